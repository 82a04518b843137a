import DerivedCredentials
import Foundation

/// Reading a whole input that has a size limit: standard input or a file given on the command
/// line, refused (`DCError/Code/inputTooLarge`) as soon as it passes the limit.
public enum BoundedInput {
    /// All bytes of `path` (standard input when nil), at most `limit`.
    public static func read(_ path: String?, limit: Int) throws -> [UInt8] {
        guard let path else { return try read(descriptor: 0, limit: limit, subject: "standard input") }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw DCError(.fileNotFound, "cannot open the file", subject: path) }
        defer { close(descriptor) }
        return try read(descriptor: descriptor, limit: limit, subject: path)
    }

    /// All bytes up to the end of `descriptor`, at most `limit`; `subject` names it in errors.
    public static func read(descriptor: Int32, limit: Int, subject: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Foundation.read(descriptor, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw DCError(.ioError, "cannot read the input", subject: subject) }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
            guard bytes.count <= limit else {
                throw DCError(.inputTooLarge, "the input is larger than \(limit) bytes", subject: subject)
            }
        }
    }
}
