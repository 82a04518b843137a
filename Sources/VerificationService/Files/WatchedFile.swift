import DerivedCredentials
import Foundation
import Logging

/// A small file served as it is on disk, re-read when it changes.
///
/// At most once per ``checkInterval`` a request looks at the file's identity (device, inode,
/// size, modification time, change time); when that differs from what was read, the file is read
/// again. ``reload(logger:)`` reads it at once (SIGHUP). A file that has become unreadable or
/// invalid leaves the last good contents in service, with a warning in the log: an operator's
/// half-written edit never takes a running service down. Writers should still replace the file
/// atomically (write a temporary file, then rename it).
public final class WatchedFile: Sendable {
    /// The file's path.
    public let path: String
    /// The longest a change can go unnoticed.
    public let checkInterval: Duration
    /// The largest file accepted.
    public let maximumSize: Int
    private let validate: @Sendable ([UInt8]) throws -> Void
    private let state: Locked<State>

    private struct State {
        var contents: [UInt8]
        var identity: FileIdentity
        var lastCheck: ContinuousClock.Instant
    }

    /// Reads `path` now; throws when it cannot be read, is larger than `maximumSize` or fails
    /// `validate`, so a service does not start with a broken file.
    public init(
        path: String, checkInterval: Duration = .seconds(1), maximumSize: Int = 1 << 20,
        validate: @escaping @Sendable ([UInt8]) throws -> Void = { _ in }
    ) throws {
        self.path = path
        self.checkInterval = checkInterval
        self.maximumSize = maximumSize
        self.validate = validate
        let (identity, contents) = try Self.read(path, maximumSize: maximumSize)
        try validate(contents)
        state = Locked(State(contents: contents, identity: identity, lastCheck: .now))
    }

    /// A file that must hold a JSON Web Key Set: a JSON object whose `keys` is an array.
    public static func jwks(path: String) throws -> WatchedFile {
        try WatchedFile(path: path) { bytes in
            let object = try? JSONSerialization.jsonObject(with: Data(bytes))
            guard let document = object as? [String: Any], document["keys"] is [Any] else {
                throw DCError(.malformedInput, "not a JWKS document (a JSON object with a \"keys\" array)")
            }
        }
    }

    /// The current contents, re-read first if the file changed and the last look is older than
    /// ``checkInterval``.
    public func contents(logger: Logger) -> [UInt8] {
        let now = ContinuousClock.now
        let due = state.withLock { state -> FileIdentity? in
            guard now - state.lastCheck >= checkInterval else { return nil }
            state.lastCheck = now
            return state.identity
        }
        if let known = due, (try? FileIdentity(path: path)) != known {
            reload(logger: logger)
        }
        return state.withLock { $0.contents }
    }

    /// Reads the file now. Keeps the previous contents (and logs a warning) if it cannot.
    public func reload(logger: Logger) {
        do {
            let (identity, contents) = try Self.read(path, maximumSize: maximumSize)
            try validate(contents)
            state.withLock {
                $0.contents = contents
                $0.identity = identity
                $0.lastCheck = .now
            }
            logger.notice("re-read", metadata: ["dc.file": "\(path)", "dc.size": "\(contents.count)"])
        } catch {
            logger.warning(
                "cannot re-read; still serving the previous contents",
                metadata: ["dc.file": "\(path)", "dc.error": "\(error)"])
        }
    }

    private static func read(_ path: String, maximumSize: Int) throws -> (FileIdentity, [UInt8]) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code: DCError.Code = errno == ENOENT ? .fileNotFound : .ioError
            throw DCError(code, "cannot open: \(String(cString: strerror(errno)))", subject: path)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw DCError(.malformedInput, "not a regular file", subject: path)
        }
        guard Int(info.st_size) <= maximumSize else {
            throw DCError(.inputTooLarge, "larger than \(maximumSize) bytes", subject: path)
        }
        var bytes = [UInt8](repeating: 0, count: maximumSize + 1)
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw DCError(.ioError, "cannot read: \(String(cString: strerror(errno)))", subject: path)
            }
            if count == 0 { break }
            filled += count
        }
        guard filled <= maximumSize else {
            throw DCError(.inputTooLarge, "larger than \(maximumSize) bytes", subject: path)
        }
        return (FileIdentity(info), Array(bytes.prefix(filled)))
    }
}

/// What tells one version of a file from another without reading it.
struct FileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modified: timespec
    var changed: timespec

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    init(path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else { throw DCError(.ioError, "cannot stat", subject: path) }
        self.init(info)
    }

    static func == (lhs: FileIdentity, rhs: FileIdentity) -> Bool {
        lhs.device == rhs.device && lhs.inode == rhs.inode && lhs.size == rhs.size
            && lhs.modified.tv_sec == rhs.modified.tv_sec && lhs.modified.tv_nsec == rhs.modified.tv_nsec
            && lhs.changed.tv_sec == rhs.changed.tv_sec && lhs.changed.tv_nsec == rhs.changed.tv_nsec
    }
}

/// A value behind a lock.
final class Locked<Value>: @unchecked Sendable {
    // `value` is only touched inside `lock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
