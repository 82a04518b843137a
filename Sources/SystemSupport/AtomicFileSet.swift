import DerivedCredentials
import FoundationEssentials
import Synchronization

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

    /// Adds a file. `name` must be a plain file name, not a path. Its bytes are checked, not its
    /// characters: a `/` or a leading `.` followed by a combining mark is one character to Swift
    /// but still a separator or a dot to the kernel.
    public mutating func add(_ name: String, _ contents: Contents, mode: mode_t) throws {
        guard !name.isEmpty, !name.utf8.contains(UInt8(ascii: "/")), name.utf8.first != UInt8(ascii: ".") else {
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
            let parent = splitLastComponent(path).parent
            if parent != path,
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

    /// Removes the file (or link) `path` if there is one; fails when it is there and cannot be
    /// removed (a directory stands in its place, a directory that does not let it go), saying
    /// `what` it is.
    public static func removeFile(_ path: String, what: String) throws {
        guard unlink(path) != 0, errno != ENOENT else { return }
        throw DCError(.ioError, "cannot remove \(what): \(String(cString: strerror(errno)))", subject: path)
    }

    /// Removes staging files that an interrupted writer left in `directory`. Staging names carry
    /// the writer's process id, and only files whose writer no longer exists are removed: another
    /// writer, in this process or another, may be staging right now.
    public static func removeStaleStagingFiles(in directory: String) {
        removeStaleStagingFiles(in: directory, prefix: ".")
    }

    /// Removes the staging files, and staging directories with their files, in `directory` whose
    /// names start with `prefix` and whose writer no longer exists. A staging directory is emptied
    /// through a descriptor opened without following links, and only when this user owns it: a
    /// name swapped for a link, or another user's directory, is never followed or emptied.
    static func removeStaleStagingFiles(in directory: String, prefix: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else { return }
        defer { close(dirfd) }
        for name in names where name.hasPrefix(prefix) {
            guard let marker = name.firstRange(of: stagingMarker) else { continue }
            let pid = name[marker.upperBound...].split(separator: "-").first.flatMap { pid_t($0) }
            if let pid, pid > 0, kill(pid, 0) == 0 || errno == EPERM { continue }  // its writer is alive
            if unlinkat(dirfd, name, 0) == 0 || errno != EISDIR { continue }  // a file, or a link: itself
            let stagingfd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard stagingfd >= 0 else { continue }
            var info = stat()
            guard fstat(stagingfd, &info) == 0, info.st_uid == geteuid(), let stream = fdopendir(stagingfd) else {
                close(stagingfd)
                continue
            }
            while let entry = readdir(stream) {
                let inner = withUnsafeBytes(of: entry.pointee.d_name) {
                    String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
                }
                if inner != "." && inner != ".." { unlinkat(stagingfd, inner, 0) }
            }
            closedir(stream)  // closes stagingfd
            unlinkat(dirfd, name, AT_REMOVEDIR)
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
                    remedy: .replaceOutput)
            }
        }

        let staged = try stage(into: dirfd, stamp: Self.newStamp())
        func unstage() { for name in staged { unlinkat(dirfd, name, 0) } }

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

    /// Writes every file, or none, into `directory`, which is created (mode 0700, missing parents
    /// with default permissions) if it does not exist; staging files and directories that an
    /// interrupted writer left are removed first.
    ///
    /// When `directory` does not exist, the whole set appears at once: the files are staged and
    /// synced in a new hidden directory beside it (`.NAME.dcstage-PID-STAMP`), which is synced and
    /// then renamed to `directory`, and the parent is synced. A crash or a kill at any point leaves
    /// `directory` absent or complete, never partly written. A directory that exists (empty or not)
    /// keeps its owner, group, mode, ACLs and mount, and is written file by file as
    /// ``commit(replacingExisting:)`` does: each file whole, the set not atomic. A symbolic link in
    /// the place of `directory` is refused.
    public func commitCreatingDirectory(replacingExisting: Bool = false) throws {
        let (parent, base) = Self.splitLastComponent(directory)
        guard !base.isEmpty, base != ".", base != ".." else {
            try Self.ensureDirectory(directory)
            Self.removeStaleStagingFiles(in: directory)
            return try commit(replacingExisting: replacingExisting)
        }
        var parentInfo = stat()
        if stat(parent, &parentInfo) != 0 {  // missing: made as `mkdir -p` would (links in the path followed)
            try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        }
        let parentfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentfd >= 0 else {
            throw DCError(
                .cannotCreateOutput, "cannot create the output directory: \(String(cString: strerror(errno)))",
                subject: directory)
        }
        defer { close(parentfd) }
        Self.removeStaleStagingFiles(in: parent, prefix: "." + base + Self.stagingMarker)

        var info = stat()
        if fstatat(parentfd, base, &info, AT_SYMLINK_NOFOLLOW) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else {
                throw DCError(
                    .cannotCreateOutput,
                    "cannot create the output directory: \(info.st_mode & S_IFMT == S_IFLNK ? "a symbolic link" : "not a directory") is in its place",
                    subject: directory)
            }
            Self.removeStaleStagingFiles(in: directory)
            return try commit(replacingExisting: replacingExisting)
        }

        let stamp = Self.newStamp()
        let stagingName = "." + base + Self.stagingMarker + stamp.dropLast()
        guard mkdirat(parentfd, stagingName, 0o700) == 0 else {
            throw DCError(
                .cannotCreateOutput, "cannot create the output directory: \(String(cString: strerror(errno)))",
                subject: directory)
        }
        let stagingfd = openat(parentfd, stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        var staged: [String] = []
        func discard() {
            if stagingfd >= 0 {
                for name in staged { unlinkat(stagingfd, name, 0) }
                close(stagingfd)
            }
            unlinkat(parentfd, stagingName, AT_REMOVEDIR)
        }
        do {
            guard stagingfd >= 0 else {
                throw DCError(
                    .cannotCreateOutput, "cannot open the staging directory: \(String(cString: strerror(errno)))",
                    subject: directory)
            }
            staged = try stage(into: stagingfd, stamp: stamp)
            // The staged files get their final names inside the staging directory, and it is
            // synced: all of it is on disk before the directory has its name.
            for (index, file) in files.enumerated() {
                guard renameat(stagingfd, staged[index], stagingfd, file.name) == 0 else {
                    throw DCError(
                        .cannotCreateOutput, "cannot publish the output file: \(String(cString: strerror(errno)))",
                        subject: path(file.name))
                }
                staged[index] = file.name
            }
            guard fsync(stagingfd) == 0 else {
                throw DCError(
                    .ioError, "cannot sync the output directory: \(String(cString: strerror(errno)))",
                    subject: directory)
            }
            // The name only if it is still free (a directory that appeared meanwhile is not
            // replaced); a file system without RENAME_NOREPLACE gets a look and then rename(2).
            var renamed = renameNoReplace(parentfd, stagingName, parentfd, base)
            var error = renamed ? 0 : errno
            if error == EINVAL {
                renamed =
                    fstatat(parentfd, base, &info, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT
                    && renameat(parentfd, stagingName, parentfd, base) == 0
                error = renamed ? 0 : (errno == ENOENT ? EEXIST : errno)
            }
            guard renamed else {
                throw error == EEXIST || error == ENOTEMPTY
                    ? DCError(
                        .outputExists, "the output directory appeared while writing", subject: directory,
                        hint: "nothing was written; run again")
                    : DCError(
                        .cannotCreateOutput, "cannot publish the output directory: \(String(cString: strerror(error)))",
                        subject: directory)
            }
        } catch {
            discard()
            throw error
        }
        close(stagingfd)
        guard fsync(parentfd) == 0 else {
            throw DCError(
                .ioError, "cannot sync the output directory's parent: \(String(cString: strerror(errno)))",
                subject: parent)
        }
    }

    /// `path` split at its last slash, trailing slashes ignored: the parent is "." when there is no
    /// slash and "/" for a name at the root. (Foundation's `deletingLastPathComponent` traps on
    /// some one-component paths.)
    static func splitLastComponent(_ path: String) -> (parent: String, name: String) {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return (".", String(trimmed)) }
        let parent = trimmed[..<slash]
        return (parent.isEmpty ? "/" : String(parent), String(trimmed[trimmed.index(after: slash)...]))
    }

    /// One random value and this process's id, for the staging names of one set (not eight
    /// `getrandom` calls per file: the files are created with `O_EXCL`, so a name taken already
    /// is an error, never a clobber).
    private static func newStamp() -> String {
        "\(getpid())-" + String(UInt64.random(in: .min ... .max), radix: 16) + "-"
    }

    /// Writes and syncs every file under a staging name in `dirfd`, and returns the staging names
    /// in the order of `files`. The files are created and written one after another (creating
    /// takes the directory's lock, so threads would only contend for it), then synced and closed
    /// from several threads, so that the syncs overlap on the device. At most a quarter of the
    /// process's descriptor limit (and 256) are open at a time. On any failure, removes what it
    /// wrote and throws the error of the first file that failed.
    private func stage(into dirfd: Int32, stamp: String) throws -> [String] {
        let names = files.indices.map { "." + files[$0].name + Self.stagingMarker + stamp + String($0) }
        var limit = rlimit()
        let batch =
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0
            ? max(1, min(256, Int(clamping: limit.rlim_cur) / 4)) : 16
        var written = 0
        func abandon(_ error: any Error) -> any Error {
            for name in names[..<written] { unlinkat(dirfd, name, 0) }
            return error
        }
        while written < files.count {
            let range = written..<min(written + batch, files.count)
            var opened: [Int32] = []
            for index in range {
                do {
                    opened.append(
                        try create(files[index].contents, as: names[index], mode: files[index].mode, dirfd: dirfd))
                } catch {
                    for fd in opened { close(fd) }
                    written = index
                    throw abandon(error)
                }
            }
            written = range.upperBound
            let descriptors = opened
            let failures = Mutex<[Int32]>([])
            ParallelWork.forEach(descriptors.count, width: ParallelWork.blockingWidth) { offset in
                var failure: Int32 = 0
                if fsync(descriptors[offset]) != 0 { failure = errno }
                if close(descriptors[offset]) != 0 && failure == 0 { failure = errno }
                if failure != 0 { failures.withLock { $0.append(failure) } }
            }
            if let failure = failures.withLock({ $0.first }) {
                throw abandon(writeError(failure))
            }
        }
        return names
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    /// Creates `name` in `dirfd` with `mode` and writes `contents` to it; returns the open
    /// descriptor, for the caller to sync and close. On failure, removes the file and throws.
    private func create(_ contents: Contents, as name: String, mode: mode_t, dirfd: Int32) throws -> Int32 {
        let fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else {
            throw DCError(
                .cannotCreateOutput, "cannot create the output file: \(String(cString: strerror(errno)))",
                subject: path(name))
        }
        var failure: Int32 = 0
        if fchmod(fd, mode) != 0 { failure = errno }
        if failure == 0 {
            failure = contents.withBytes { Descriptors.writeAll($0, to: fd) ? 0 : (errno == 0 ? EIO : errno) }
        }
        guard failure == 0 else {
            close(fd)
            unlinkat(dirfd, name, 0)
            throw writeError(failure)
        }
        return fd
    }

    private func writeError(_ failure: Int32) -> DCError {
        let full = failure == ENOSPC || failure == EDQUOT || failure == EFBIG
        return DCError(
            .ioError, "cannot write the output: \(String(cString: strerror(failure)))", subject: directory,
            hint: full ? "free some space; nothing was written" : "nothing was written")
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
