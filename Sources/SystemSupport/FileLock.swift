import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// An exclusive advisory lock on a file (`flock`), held for the length of a closure. `flock`
/// locks belong to the open file description, so two opens in one process exclude each other
/// too: threads and processes alike wait their turn. The lock file is created (0600) if missing
/// and never removed; it holds nothing.
public enum FileLock {
    /// Runs `body` with `path` locked exclusively, passing the open descriptor (for a caller that
    /// keeps its data in the lock file itself). Waits for the lock; never times out.
    public static func withExclusiveLock<T>(at path: String, _ body: (Int32) throws -> T) throws -> T {
        try AtomicFileSet.ensureDirectory(PathText.parent(of: path))
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw DCError(.cannotCreateOutput, "cannot open the lock file", subject: path)
        }
        defer { close(descriptor) }
        var locked: Int32
        repeat { locked = flock(descriptor, LOCK_EX) } while locked != 0 && errno == EINTR
        guard locked == 0 else { throw DCError(.ioError, "cannot lock", subject: path) }
        defer { flock(descriptor, LOCK_UN) }
        return try body(descriptor)
    }

    /// Runs the async `body` with `path` locked exclusively, for work that awaits while it holds
    /// the lock (a child process, a handler's answer). It waits for the lock without blocking a
    /// thread: it tries, and sleeps between tries, so that the holder's own tasks, which may need
    /// the same few threads, can finish. Waits as long as the holder holds the lock.
    public static func withExclusiveLock<T>(at path: String, _ body: () async throws -> T) async throws -> T {
        try AtomicFileSet.ensureDirectory(PathText.parent(of: path))
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw DCError(.cannotCreateOutput, "cannot open the lock file", subject: path)
        }
        defer { close(descriptor) }
        var pause = Duration.milliseconds(2)
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else { throw DCError(.ioError, "cannot lock", subject: path) }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(50))
        }
        defer { flock(descriptor, LOCK_UN) }
        return try await body()
    }

    /// Replaces the decimal number kept in the file at `path`, under the lock: `next` gets the
    /// file's text, trimmed (empty when new), and returns the number to store, which is written
    /// in place and synced before the lock is released. Returns that number.
    @discardableResult
    public static func updateNumber(at path: String, _ next: (String) throws -> UInt64) throws -> UInt64 {
        try withExclusiveLock(at: path) { descriptor in
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = read(descriptor, &buffer, buffer.count)
            guard count >= 0 else { throw DCError(.ioError, "cannot read", subject: path) }
            let value = try next(
                String(decoding: buffer.prefix(count), as: UTF8.self).trimmingWhitespaceAndNewlines())
            let output = Array("\(value)\n".utf8)
            guard ftruncate(descriptor, 0) == 0, pwrite(descriptor, output, output.count, 0) == output.count,
                fsync(descriptor) == 0
            else { throw DCError(.ioError, "cannot write", subject: path) }
            return value
        }
    }
}
