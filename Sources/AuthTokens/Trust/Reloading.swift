import DerivedCredentials
import Foundation
import SystemSupport

/// How often a ``Reloading`` file is looked at (one `stat`) unless told otherwise: a replaced
/// revocation list or issuer set takes effect within this time, without a restart. A look costs
/// one `stat` (about a microsecond), so even under load it is at most 100 system calls a second
/// per file, and a revocation is in force before a person could use the token again.
public let trustFileCheckInterval: Duration = .milliseconds(10)

/// A value read from a file and read again when the file changes, without a restart: how the
/// verifier holds its ``RevocationList`` and ``TrustedIssuers``.
///
/// ``value`` looks at the file (`stat`: device, inode, size, modification and change times) at
/// most once per check interval, and reads it again when any of those changed, as happens when
/// the provider replaces it atomically. The new value replaces the old one at once for every
/// thread. A file that cannot be read or is malformed leaves the last good value in force and is
/// reported in ``lastError`` (a broken update must not empty the revocation list); the next
/// change is tried again. ``reload()`` reads the file now, whatever its times say (for SIGHUP).
public final class Reloading<Value: Sendable>: @unchecked Sendable {
    // Every mutable property is only touched under `lock`; `load` and `path` never change.

    /// The file's path.
    public let path: String
    private let load: @Sendable (String) throws -> Value
    private let interval: Duration
    private let lock = NSLock()
    private var current: Value
    private var stamp: FileStamp?
    private var lastCheck: ContinuousClock.Instant
    private var failure: DCError?
    private var checking = false
    private let report: @Sendable (Result<Value, DCError>) -> Void

    /// Reads the file at `path` with `load` now (its error is thrown), then at most once every
    /// `checkInterval` when it has changed. `report` hears the outcome of every later reading:
    /// the new value, or why the last good one stays (for a service's log).
    public init(
        path: String, checkInterval: Duration = trustFileCheckInterval,
        report: @escaping @Sendable (Result<Value, DCError>) -> Void = { _ in },
        load: @escaping @Sendable (String) throws -> Value
    ) throws {
        self.path = path
        self.load = load
        self.report = report
        self.interval = checkInterval
        self.stamp = FileStamp(path: path)
        self.current = try load(path)
        self.lastCheck = .now
    }

    /// The current value, read again first when the file changed and the last look is at least
    /// the check interval old. Never throws and never waits for another thread's reading.
    public var value: Value {
        let now = ContinuousClock.now
        let (snapshot, due) = lock.withLock { () -> (Value, Bool) in
            guard !checking, now - lastCheck >= interval else { return (current, false) }
            checking = true
            lastCheck = now
            return (current, true)
        }
        guard due else { return snapshot }
        refresh()
        return lock.withLock { current }
    }

    /// Reads the file now and, when it is good, makes it the value. Throws (and keeps the old
    /// value) when it cannot be read or is malformed.
    public func reload() throws {
        try read(FileStamp(path: path))
    }

    /// Why the last reading failed, while the value from an earlier one is still in force; nil
    /// once a reading succeeds.
    public var lastError: DCError? { lock.withLock { failure } }

    /// Replaces the value directly (the file is looked at again only when it changes).
    public func replace(with value: Value) {
        lock.withLock { current = value }
    }

    private func refresh() {
        defer { lock.withLock { checking = false } }
        let stamp = FileStamp(path: path)
        guard lock.withLock({ stamp != self.stamp }) else { return }
        try? read(stamp)
    }

    /// Reads the file, whose look is `stamp`, and makes it the value. When it cannot be read or is
    /// malformed, keeps the last good value, remembers `stamp` (so that the same broken file is
    /// not read again at every check) and why, and throws that.
    private func read(_ stamp: FileStamp?) throws {
        do {
            let value = try load(path)
            lock.withLock {
                current = value
                self.stamp = stamp
                failure = nil
            }
            report(.success(value))
        } catch {
            let reported = error as? DCError ?? DCError(.invalid, "\(error)", subject: path)
            lock.withLock {
                self.stamp = stamp
                failure = reported
            }
            report(.failure(reported))
            throw reported
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
