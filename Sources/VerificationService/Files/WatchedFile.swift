import AuthTokens
import DerivedCredentials
import Foundation
import Logging

/// A small file served as it is on disk, re-read when it changes: the JWKS document.
///
/// A thin layer over `Reloading` (AuthTokens), which holds the verifier's trust files the same
/// way: once per check interval a thread of its own looks at the file's identity (device, inode,
/// size, modification and change times) and reads it again when that changed, so a request on
/// the event loop never does file I/O; ``reload()`` reads it at once (SIGHUP). A file that has become unreadable, is not a regular file or fails
/// validation leaves the last good contents in service, with a warning in the log: an operator's
/// half-written edit never takes a running service down. Writers should still replace the file
/// atomically (write a temporary file, then rename it).
public final class WatchedFile: Sendable {
    /// The file's path.
    public var path: String { file.path }
    private let file: Reloading<[UInt8]>

    /// Reads `path` now; throws when it cannot be read, is larger than `maximumSize` or fails
    /// `validate`, so a service does not start with a broken file. Later readings are logged to
    /// `logger`: `re-read`, or `cannot re-read; still serving the previous contents`.
    public init(
        path: String, logger: Logger, checkInterval: Duration = trustFileCheckInterval, maximumSize: Int = 1 << 20,
        validate: @escaping @Sendable ([UInt8]) throws -> Void = { _ in }
    ) throws {
        file = try Reloading(
            bytesAt: path, maximumSize: maximumSize, checkInterval: checkInterval,
            report: { outcome in
                switch outcome {
                case .success(let contents):
                    logger.notice("re-read", metadata: ["dc.file": "\(path)", "dc.size": "\(contents.count)"])
                case .failure(let error):
                    logger.warning(
                        "cannot re-read; still serving the previous contents",
                        metadata: ["dc.file": "\(path)", "dc.error": "\(error)"])
                }
            }, validate: validate)
    }

    /// A file that must hold a JSON Web Key Set: a JSON object whose `keys` is an array.
    public static func jwks(path: String, logger: Logger) throws -> WatchedFile {
        try WatchedFile(path: path, logger: logger) { bytes in
            let object = try? JSONSerialization.jsonObject(with: Data(bytes))
            guard let document = object as? [String: Any], document["keys"] is [Any] else {
                throw DCError(.malformedInput, "not a JWKS document (a JSON object with a \"keys\" array)")
            }
        }
    }

    /// The current contents: no I/O, never waiting for a reading.
    public var contents: [UInt8] { file.value }

    /// Reads the file now. Keeps the previous contents (and logs a warning) if it cannot.
    public func reload() { try? file.reload() }
}
