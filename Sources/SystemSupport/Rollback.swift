import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// What a command that makes state has changed so far, and how to put it back: the command either
/// completes or leaves nothing.
///
/// Before a step changes a path, the command keeps it (`keep(_:)`): a path that is absent is
/// removed again, and so are the directories made on the way to it (when empty); a file (its bytes
/// and mode) or a symbolic link is put back as it was, and only if it changed. ``keepTree(_:except:)``
/// keeps every path under a directory, for a step whose writes are not known one by one: what
/// appears in it is removed again. When the work given to ``allOrNothing(_:)`` throws, every kept
/// path is put back and every ``onFailure(_:)`` step runs, newest first; then the error is
/// rethrown. Putting back is best effort: a path that cannot be restored is left as it is.
///
/// A lock file (a name ending in `.lock`, as every `FileLock` of the toolkit has) that appears is
/// left: it holds nothing, and another process may be waiting on it or holding it. Only a directory
/// the work made that holds nothing else goes with its lock files, each unlinked only while nobody
/// holds it.
///
/// A process that is killed midway takes nothing back: a command that must survive that leaves a
/// marker of its own, removed last, that the next run reads (as `dcclient init` does).
public final class Rollback {
    /// A path as it was when kept.
    private enum Kept {
        /// Absent; `made` are the directories on the way to it that were absent too, outermost first.
        case absent(made: [String])
        /// A regular file: its bytes, mode and `stat` stamp (to tell whether it changed).
        case file(SecretBytes, mode: mode_t, stamp: FileStamp?)
        /// A symbolic link and its target.
        case link(String)
        /// A directory that exists: nothing to put back but what is kept inside it.
        case directory
        /// A tree: every path in it when kept (relative), so that what appears is removed again.
        case tree(Set<String>, except: Set<String>)
    }

    private var kept: [(path: String, kept: Kept)] = []
    private var undo: [() -> Void] = []

    private init() {}

    /// Runs `work` with a new rollback; when it throws, puts back what it kept and runs its undo
    /// steps, newest first, and rethrows.
    public static func allOrNothing<Result>(_ work: (Rollback) throws -> Result) throws -> Result {
        let rollback = Rollback()
        do {
            return try work(rollback)
        } catch {
            rollback.putBack()
            throw error
        }
    }

    /// Runs `work` with a new rollback; when it throws, puts back what it kept and runs its undo
    /// steps, newest first, and rethrows. The work runs on the caller's isolation.
    public static func allOrNothing<Result>(
        isolation: isolated (any Actor)? = #isolation, _ work: (Rollback) async throws -> Result
    ) async throws -> Result {
        let rollback = Rollback()
        do {
            return try await work(rollback)
        } catch {
            rollback.putBack()
            throw error
        }
    }

    /// Keeps `path` as it is now, to be put back if the work fails.
    public func keep(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if Self.isLockFile(path) { return }
            var made: [String] = []
            var parent = AtomicFileSet.splitLastComponent(path).parent
            while parent != "/", parent != ".", lstat(parent, &info) != 0 {
                made.insert(parent, at: 0)
                parent = AtomicFileSet.splitLastComponent(parent).parent
            }
            kept.append((path, .absent(made: made)))
            return
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            guard let bytes = Self.read(path) else { return }
            kept.append((path, .file(bytes, mode: info.st_mode & 0o7777, stamp: FileStamp(path: path))))
        case S_IFLNK:
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) {
                kept.append((path, .link(target)))
            }
        case S_IFDIR: kept.append((path, .directory))
        default: break
        }
    }

    /// Keeps `path` only while it is absent, so that a file the work makes goes again; one that
    /// exists is never put back. For what must not be undone once there, such as a revocation list
    /// another command may have added to meanwhile (a revocation errs toward revoked).
    public func keepIfAbsent(_ path: String) {
        var info = stat()
        guard lstat(path, &info) != 0 else { return }
        keep(path)
    }

    /// Keeps every path under `directory` (and the directory itself) as it is now; paths in
    /// `except` (absolute) are neither put back nor removed: what a step must keep even when the
    /// work fails, such as a number that must never be used twice.
    public func keepTree(_ directory: String, except: Set<String> = []) {
        var info = stat()
        guard lstat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return keep(directory) }
        let names = Set((try? FileManager.default.subpathsOfDirectory(atPath: directory)) ?? [])
        for name in names.sorted() where !except.contains(directory + "/" + name) { keep(directory + "/" + name) }
        kept.append((directory, .tree(names, except: except)))
    }

    /// Keeps the directory of `files` and every file the set would write, before it is committed.
    public func keep(_ files: AtomicFileSet) {
        keep(files.directory)
        for name in files.names { keep(files.directory + "/" + name) }
    }

    /// Keeps the directory `path` and creates it (mode 0700, missing parents as `mkdir -p`).
    public func ensureDirectory(_ path: String) throws {
        keep(path)
        try AtomicFileSet.ensureDirectory(path)
    }

    /// Adds a step that undoes what no kept path shows (a key in the kernel keyring, say).
    public func onFailure(_ step: @escaping () -> Void) {
        undo.append(step)
    }

    /// Puts back every kept path and runs every undo step, newest first.
    private func putBack() {
        for step in undo.reversed() { step() }
        for (path, state) in kept.reversed() {
            switch state {
            case .absent(let made):
                Self.removeMade(path)
                for directory in made.reversed() { Self.removeIfOnlyLocks(directory) }
            case .file(let bytes, let mode, let stamp):
                var info = stat()
                if let stamp, lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                    FileStamp(path: path) == stamp
                {
                    continue
                }
                Self.replace(path, with: bytes, mode: mode)
            case .link(let target):
                if (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == target { continue }
                try? FileManager.default.removeItem(atPath: path)
                symlink(target, path)
            case .directory:
                AtomicFileSet.ensureDirectory(quietly: path)
            case .tree(let names, let except):
                let appeared = ((try? FileManager.default.subpathsOfDirectory(atPath: path)) ?? []).filter {
                    !names.contains($0) && !except.contains(path + "/" + $0) && !Self.isLockFile($0)
                }
                // Deepest first, so that a new directory is emptied before it goes.
                for name in appeared.sorted(by: >) { Self.removeMade(path + "/" + name) }
            }
        }
    }

    /// Whether `path` names a lock file, which is never removed but with the directory made for it.
    private static func isLockFile(_ path: String) -> Bool { path.hasSuffix(".lock") }

    /// Removes the directory `path`, which the work made, when nothing but lock files is in it
    /// (the work's own: a directory that was not there when it began holds no one else's).
    private static func removeIfOnlyLocks(_ path: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path),
            names.allSatisfy(isLockFile)
        else { return }
        for name in names { unlinkUnheldLock(path + "/" + name) }
        rmdir(path)
    }

    /// Removes `path`, which the work made, without following links: a directory's contents
    /// first, each lock file only while nobody holds it (``unlinkUnheldLock(_:)``), and the
    /// directory itself only once it is empty, so a lock another process holds keeps its place.
    private static func removeMade(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            if isLockFile(path) { unlinkUnheldLock(path) } else { unlink(path) }
            return
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
            removeMade(path + "/" + name)
        }
        rmdir(path)
    }

    /// Unlinks the lock file `path` while holding its lock, and only if nobody else holds it: a
    /// lock held elsewhere stays, so two processes never each hold "the" lock on two files.
    private static func unlinkUnheldLock(_ path: String) {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return }
        defer { close(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return }
        unlink(path)
    }

    /// The bytes of the regular file `path`, read without following a link; nil when it cannot be read.
    private static func read(_ path: String) -> SecretBytes? {
        // Non-blocking, so that a FIFO put in its place cannot hold the command; only a regular file.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var done = 0
        while done < bytes.count {
            // cannot fail: the buffer is not empty inside this loop, so it has a base address.
            let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + done, $0.count - done) }
            if count < 0 && errno == EINTR { continue }
            // A failing read is not the file's content: nothing is kept rather than a part of it.
            guard count >= 0 else { return nil }
            guard count > 0 else { break }
            done += count
        }
        bytes.removeSubrange(done...)
        return SecretBytes(consuming: &bytes)
    }

    /// Writes `bytes` to a staging name beside `path` and renames it into place.
    private static func replace(_ path: String, with bytes: SecretBytes, mode: mode_t) {
        let (parent, name) = AtomicFileSet.splitLastComponent(path)
        AtomicFileSet.ensureDirectory(quietly: parent)
        let staging =
            parent + "/." + name + AtomicFileSet.stagingMarker + "\(getpid())-"
            + String(UInt64.random(in: .min ... .max), radix: 16)
        let fd = open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { return }
        let written = bytes.withUnsafeBytes { Descriptors.writeAll($0, to: fd) } && fchmod(fd, mode) == 0
        let synced = fsync(fd) == 0
        close(fd)
        if !(written && synced) || rename(staging, path) != 0 { unlink(staging) }
    }
}

extension AtomicFileSet {
    /// Creates the directory `path` as ``ensureDirectory(_:)`` does, ignoring failure.
    static func ensureDirectory(quietly path: String) {
        try? ensureDirectory(path)
    }
}
