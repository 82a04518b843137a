import DerivedCredentials
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writes a set of files into one directory so that a failure leaves nothing behind.
///
/// Every file is first written in full to a temporary name (`O_CREAT|O_EXCL|O_NOFOLLOW`, its final
/// mode, `fsync`); only when all of them are on disk are they moved to their names and the
/// directory is synced. (One `syncfs` instead of a `fsync` per file is cheaper, but it waits for
/// every dirty page of the file system, an unbounded cost on a busy machine.) Without
/// `replacingExisting`, publishing uses `link(2)`, which fails atomically if the name exists, and a clash rolls back what was already published. A full disk,
/// a size limit or a permission problem while staging leaves the directory as it was.
public struct AtomicFileSet {
    /// What one file holds: plain bytes, or a secret that is written from its own buffer.
    public enum Contents: Sendable {
        /// Bytes that are not secret, such as a certificate.
        case bytes([UInt8])
        /// A secret, such as a private key; writing it makes no copy of the bytes.
        case secret(SecretBytes)
    }

    /// The suffix of staging files; ``removeStaleStagingFiles(in:)`` cleans those a crash left.
    public static let stagingMarker = ".dcstage-"

    /// The directory the files go into; it must exist when ``commit(replacingExisting:)`` runs.
    public let directory: String
    private var files: [(name: String, contents: Contents, mode: mode_t)] = []

    /// An empty set for `directory`; nothing touches the disk until ``commit(replacingExisting:)``.
    public init(directory: String) {
        self.directory = directory
    }

    /// The file names added so far, in the order they were added.
    public var names: [String] { files.map(\.name) }

    /// Adds a file. `name` must be a plain file name, not a path.
    public mutating func add(_ name: String, _ contents: Contents, mode: mode_t) throws {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != "..", !name.hasPrefix(".") else {
            throw DCError(.usage, "invalid output file name", subject: name)
        }
        guard !files.contains(where: { $0.name == name }) else {
            throw DCError(
                .usage, "two outputs would have the same name", subject: name, hint: "rename one of the inputs")
        }
        files.append((name, contents, mode))
    }

    /// Creates `path` (mode 0700) if it does not exist, and missing parents with default
    /// permissions, like `mkdir -p`. An existing directory keeps its mode.
    public static func ensureDirectory(_ path: String) throws {
        if mkdir(path, 0o700) == 0 { return }
        var error = errno
        if error == ENOENT {
            let parent = (path as NSString).deletingLastPathComponent
            if !parent.isEmpty, parent != path,
                (try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)) != nil
            {
                if mkdir(path, 0o700) == 0 { return }
                error = errno
            }
        }
        var info = stat()
        if error == EEXIST, lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { return }
        throw DCError(
            .cannotCreateOutput, "cannot create the output directory: \(String(cString: strerror(error)))",
            subject: path)
    }

    /// Removes staging files that an interrupted writer left in `directory`. Staging names carry
    /// the writer's process id, and only files whose writer no longer exists are removed: another
    /// writer, in this process or another, may be staging right now.
    public static func removeStaleStagingFiles(in directory: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where name.hasPrefix(".") {
            guard let marker = name.range(of: stagingMarker) else { continue }
            let pid = name[marker.upperBound...].split(separator: "-").first.flatMap { pid_t($0) }
            if let pid, pid > 0, kill(pid, 0) == 0 || errno == EPERM { continue }  // its writer is alive
            unlink(directory + "/" + name)
        }
    }

    /// Syncs `directory` itself, so that the entries created, renamed or removed in it last
    /// survive a crash. Throws `ioError` naming `what` when it cannot.
    public static func syncDirectory(_ directory: String, what: String = "the directory") throws {
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if dirfd >= 0 { close(dirfd) } }
        guard dirfd >= 0, fsync(dirfd) == 0 else {
            throw DCError(.ioError, "cannot sync \(what): \(String(cString: strerror(errno)))", subject: directory)
        }
    }

    /// Writes every file, or none.
    public func commit(replacingExisting: Bool = false) throws {
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else {
            throw DCError(
                errno == ENOENT ? .fileNotFound : .cannotCreateOutput,
                "cannot open the output directory: \(String(cString: strerror(errno)))", subject: directory)
        }
        defer { close(dirfd) }

        if !replacingExisting {
            for file in files where faccessat(dirfd, file.name, F_OK, AT_SYMLINK_NOFOLLOW) == 0 {
                throw DCError(
                    .outputExists, "the output file already exists", subject: path(file.name),
                    hint: "remove it or pass --force to replace it")
            }
        }

        // Stage. The names carry this process's id and one random value for the whole set, not
        // eight `getrandom` calls per file (the files are created with O_EXCL, so a name taken
        // already is an error, never a clobber).
        var staged: [String] = []
        func unstage() { for name in staged { unlinkat(dirfd, name, 0) } }
        let stamp = "\(getpid())-" + String(UInt64.random(in: .min ... .max), radix: 16) + "-"
        do {
            for (index, file) in files.enumerated() {
                let temporary = "." + file.name + Self.stagingMarker + stamp + String(index)
                try write(file.contents, to: temporary, mode: file.mode, dirfd: dirfd)
                staged.append(temporary)
            }
        } catch {
            unstage()
            throw error
        }

        // Publish.
        var published: [String] = []
        for (file, temporary) in zip(files, staged) {
            let ok: Bool
            if replacingExisting {
                ok = renameat(dirfd, temporary, dirfd, file.name) == 0
            } else {
                ok = linkat(dirfd, temporary, dirfd, file.name, 0) == 0
                if ok { unlinkat(dirfd, temporary, 0) }
            }
            if !ok {
                let error = errno
                unstage()
                if !replacingExisting { for name in published { unlinkat(dirfd, name, 0) } }
                throw DCError(
                    error == EEXIST ? .outputExists : .cannotCreateOutput,
                    error == EEXIST
                        ? "the output file appeared while writing"
                        : "cannot publish the output file: \(String(cString: strerror(error)))",
                    subject: path(file.name))
            }
            published.append(file.name)
        }
        guard fsync(dirfd) == 0 else {
            throw DCError(
                .ioError, "cannot sync the output directory: \(String(cString: strerror(errno)))", subject: directory)
        }
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    private func write(_ contents: Contents, to name: String, mode: mode_t, dirfd: Int32) throws {
        let fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else {
            throw DCError(
                .cannotCreateOutput, "cannot create the output file: \(String(cString: strerror(errno)))",
                subject: path(name))
        }
        var failure: Int32 = 0
        if fchmod(fd, mode) != 0 { failure = errno }
        if failure == 0 {
            failure = contents.withBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let count = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if count < 0 {
                        if errno == EINTR { continue }
                        return errno
                    }
                    offset += count
                }
                return 0
            }
        }
        if failure == 0 && fsync(fd) != 0 { failure = errno }
        if close(fd) != 0 && failure == 0 { failure = errno }
        guard failure == 0 else {
            unlinkat(dirfd, name, 0)
            let reason = String(cString: strerror(failure))
            let full = failure == ENOSPC || failure == EDQUOT || failure == EFBIG
            throw DCError(
                .ioError, "cannot write the output: \(reason)", subject: directory,
                hint: full ? "free some space; nothing was written" : "nothing was written")
        }
    }
}

extension AtomicFileSet.Contents {
    fileprivate func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch self {
        case .bytes(let bytes): return bytes.withUnsafeBytes(body)
        case .secret(let secret): return secret.withUnsafeBytes(body)
        }
    }
}
