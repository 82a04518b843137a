#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Bytes that must not leak: private keys, passphrases, PINs.
///
/// The storage is a single heap buffer that is zeroed when the last copy goes away. The type
/// never prints its contents: `description`, `debugDescription` and the mirror that `dump()`
/// uses all say `<redacted>`.
public struct SecretBytes: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    private let storage: Storage

    /// Copies `bytes` into a fresh buffer; the caller remains responsible for wiping its own copy.
    public init(_ bytes: some Collection<UInt8>) {
        storage = Storage(bytes)
    }

    /// Takes the bytes of `array` and zeroes the array.
    public init(consuming array: inout [UInt8]) {
        storage = Storage(array)
        array.withUnsafeMutableBytes { SecretBytes.wipe($0) }
        array.removeAll()
    }

    /// The number of bytes, which is not secret.
    public var count: Int { storage.buffer.count }
    /// Whether there are no bytes.
    public var isEmpty: Bool { storage.buffer.isEmpty }

    /// Lends the bytes to `body`; they must not escape it.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(storage.buffer))
    }

    /// Equal lengths and equal bytes, compared in constant time for a given length.
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        // Constant-time comparison: the time does not depend on where the bytes differ.
        var difference: UInt8 = 0
        for i in 0..<lhs.count { difference |= lhs.storage.buffer[i] ^ rhs.storage.buffer[i] }
        return difference == 0
    }

    /// Always `SecretBytes(<redacted>)`.
    public var description: String { "SecretBytes(<redacted>)" }
    /// The same redacted text as ``description``.
    public var debugDescription: String { description }
    /// A mirror whose one child is `<redacted>`, so that `dump()` does not print the bytes.
    public var customMirror: Mirror { Mirror(self, children: ["bytes": "<redacted>"], displayStyle: .struct) }

    /// Zeroes memory in a way the optimiser may not remove.
    public static func wipe(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        #if canImport(Glibc)
            explicit_bzero(base, buffer.count)
        #else
            memset_s(base, buffer.count, 0, buffer.count)
        #endif
    }

    // Immutable after init; the buffer is only written in init and deinit, so sharing the class
    // between threads is safe.
    private final class Storage: @unchecked Sendable {
        let buffer: UnsafeMutableBufferPointer<UInt8>

        init(_ bytes: some Collection<UInt8>) {
            buffer = .allocate(capacity: bytes.count)
            _ = buffer.initialize(from: bytes)
        }

        deinit {
            SecretBytes.wipe(UnsafeMutableRawBufferPointer(buffer))
            buffer.deallocate()
        }
    }
}

extension SecretBytes {
    /// The bytes in standard base64 (with padding), as a secret: unlike `Data.base64EncodedString()`,
    /// no String copy of the secret is left behind for the allocator to keep.
    public func base64Encoded() -> SecretBytes {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out = [UInt8]()
        out.reserveCapacity((count + 2) / 3 * 4)
        withUnsafeBytes { bytes in
            var index = 0
            while index < bytes.count {
                let b0 = Int(bytes[index])
                let b1 = index + 1 < bytes.count ? Int(bytes[index + 1]) : 0
                let b2 = index + 2 < bytes.count ? Int(bytes[index + 2]) : 0
                out.append(alphabet[b0 >> 2])
                out.append(alphabet[(b0 & 0x03) << 4 | b1 >> 4])
                out.append(index + 1 < bytes.count ? alphabet[(b1 & 0x0F) << 2 | b2 >> 6] : UInt8(ascii: "="))
                out.append(index + 2 < bytes.count ? alphabet[b2 & 0x3F] : UInt8(ascii: "="))
                index += 3
            }
        }
        return SecretBytes(consuming: &out)
    }
}
