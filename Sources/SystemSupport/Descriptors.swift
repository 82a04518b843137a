import Glibc

/// Writing to a descriptor that may be closed or broken.
public enum Descriptors {
    /// Writes all of `bytes` to `descriptor` unless it is closed or broken: an interrupted write
    /// goes on, and `EBADF`, `EPIPE` or any other failure ends the write without a trap (with
    /// SIGPIPE ignored, as the tools do from start-up). Returns whether everything was written.
    @discardableResult
    public static func writeAll(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let count = Glibc.write(descriptor, bytes.baseAddress?.advanced(by: offset), bytes.count - offset)
            if count > 0 {
                offset += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return false
            }
        }
        return true
    }
}
