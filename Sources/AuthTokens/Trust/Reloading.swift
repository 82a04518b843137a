import DerivedCredentials
import FoundationEssentials
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// How often a ``Reloading`` file is looked at (one `stat`) unless told otherwise: a replaced
/// revocation list or issuer set takes effect within this time, without a restart. A look costs
/// one `stat` (about a microsecond) on the file's own thread, so it is 100 system calls a second
/// per file, and a revocation is in force before a person could use the token again.
public let trustFileCheckInterval: Duration = .milliseconds(10)

/// A value read from a file and read again when the file changes, without a restart: how the
/// verifier holds its ``RevocationList`` and ``TrustedIssuers``.
///
/// A thread of its own looks at the file (`stat`: device, inode, size, modification and change
/// times) once per check interval, and reads and parses it again when any of those changed, as
/// happens when the provider replaces it atomically. ``value`` does no I/O and never waits for a
/// reading: it is safe on an event loop. A new value is published whole, in one swap under a
/// lock, so a caller sees the old value or the new one, never part of a reload. A file that
/// cannot be read or is malformed leaves the last good value in force and is reported in
/// ``lastError`` (a broken update must not empty the revocation list); the next change is tried
/// again. ``reload()`` reads the file now, whatever its times say (for SIGHUP). The thread ends
/// within a check interval of the last reference going.
public final class Reloading<Value: Sendable>: Sendable {
    /// The file's path.
    public let path: String
    private let load: @Sendable (String) throws -> Value
    private let report: @Sendable (Result<Value, DCError>) -> Void
    /// What callers see: the value in force and why the last reading failed, replaced together.
    private let published: Mutex<(value: Value, failure: DCError?)>
    /// Held for a whole reading, so that the watcher's and ``reload()``'s never interleave (an
    /// older file never replaces a newer one's value); holds the look of the file last read.
    private let reading: Mutex<FileStamp?>

    /// Reads the file at `path` with `load` now (its error is thrown), then, on a thread of its
    /// own, whenever a look once every `checkInterval` finds it changed. `report` hears the outcome
    /// of every later reading: the new value, or why the last good one stays (for a service's log).
    public init(
        path: String, checkInterval: Duration = trustFileCheckInterval,
        report: @escaping @Sendable (Result<Value, DCError>) -> Void = { _ in },
        load: @escaping @Sendable (String) throws -> Value
    ) throws {
        self.path = path
        self.load = load
        self.report = report
        reading = Mutex(FileStamp(path: path))
        published = Mutex((try load(path), nil))
        try Self.watch(self, every: checkInterval)
    }

    /// Starts the thread that looks at the file every `interval` for as long as `reloading` lives.
    /// A thread rather than a task: a reading blocks on the disk, which must not take a thread of
    /// the concurrency pool or an event loop. Throws when no thread can be made: a trust file
    /// nobody watches would keep, say, a revocation list from ever reaching the service.
    private static func watch(_ reloading: Reloading, every interval: Duration) throws {
        let failed = DetachedThread.start { [weak reloading] in
            // Named for `top -H` and the tests; a new thread would keep its creator's name.
            if let comm = fopen("/proc/thread-self/comm", "w") {
                fputs("trust-file", comm)
                fclose(comm)
            }
            while true {
                DetachedThread.sleep(for: interval)
                guard let reloading else { return }
                try? reloading.read(force: false)
            }
        }
        if let failed {
            throw DCError(
                .serviceUnavailable, "cannot start the thread that watches \(reloading.path) (error \(failed))",
                hint: "the process may have reached its thread limit")
        }
    }

    /// The value in force. Does no I/O and never waits for a reading.
    public var value: Value { published.withLock { $0.value } }

    /// Reads the file now and, when it is good, makes it the value. Throws (and keeps the old
    /// value) when it cannot be read or is malformed.
    public func reload() throws {
        try read(force: true)
    }

    /// Why the last reading failed, while the value from an earlier one is still in force; nil
    /// once a reading succeeds.
    public var lastError: DCError? { published.withLock { $0.failure } }

    /// Replaces the value directly (the file is read again only when it changes).
    public func replace(with value: Value) {
        published.withLock { $0.value = value }
    }

    /// Reads the file when its look changed since the last reading (or always, with `force`) and
    /// publishes the value. When it cannot be read or is malformed, keeps the last good value,
    /// remembers the look (so that the same broken file is not read again at every check) and
    /// why, and throws that.
    private func read(force: Bool) throws {
        try reading.withLock { (seen: inout FileStamp?) throws -> Void in
            let stamp = FileStamp(path: path)
            guard force || stamp != seen else { return }
            seen = stamp
            do {
                let value = try load(path)
                published.withLock { $0 = (value, nil) }
                report(.success(value))
            } catch {
                let reported = error as? DCError ?? DCError(.invalid, "\(error)", subject: path)
                published.withLock { $0.failure = reported }
                report(.failure(reported))
                throw reported
            }
        }
    }
}

extension Reloading where Value == RevocationList {
    /// The revocation list at `path`, reloaded when it changes (see ``RevocationList/load(from:)``).
    public convenience init(revocationsAt path: String, checkInterval: Duration = trustFileCheckInterval) throws {
        try self.init(path: path, checkInterval: checkInterval, load: RevocationList.load(from:))
    }
}

extension Reloading where Value == [UInt8] {
    /// The bytes of the regular file at `path` (at most `maximumSize`), reloaded when it changes;
    /// `validate` refuses contents that must not replace the last good ones.
    public convenience init(
        bytesAt path: String, maximumSize: Int, checkInterval: Duration = trustFileCheckInterval,
        report: @escaping @Sendable (Result<[UInt8], DCError>) -> Void = { _ in },
        validate: @escaping @Sendable ([UInt8]) throws -> Void = { _ in }
    ) throws {
        try self.init(path: path, checkInterval: checkInterval, report: report) { path in
            let bytes = try TrustFile.contents(path, maximumSize: maximumSize)
            try validate(bytes)
            return bytes
        }
    }
}

extension Reloading where Value == TrustedIssuers {
    /// The trusted issuing keys at `path`, reloaded when they change (see ``TrustedIssuers/load(from:)``).
    public convenience init(issuersAt path: String, checkInterval: Duration = trustFileCheckInterval) throws {
        try self.init(path: path, checkInterval: checkInterval, load: TrustedIssuers.load(from:))
    }
}
