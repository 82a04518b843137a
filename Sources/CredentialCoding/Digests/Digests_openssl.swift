internal import COpenSSL
import DerivedCredentials

extension CredentialValidator {
    static let sha1 = NID_sha1
    static let md5 = NID_md5
}

/// Hashes, MACs and random bytes from OpenSSL.
public enum Digests {
    /// SHA-256 of `bytes`: 32 bytes. Traps rather than return a wrong digest if OpenSSL fails.
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let done = EVP_Digest(
            bytes.baseAddress, bytes.count, &digest, &length, sha256Algorithm.pointer ?? EVP_sha256(), nil)
        // A failed digest must never pass for the all-zero one.
        precondition(done == 1 && length == 32, "EVP_Digest(SHA-256) failed")
        return digest
    }

    /// SHA-256 fetched once: `EVP_sha256()` makes OpenSSL 3 look the implementation up by name on
    /// every digest. Kept for the life of the process.
    static let sha256Algorithm = FetchedDigest("SHA256")
    final class FetchedDigest: @unchecked Sendable {
        // An EVP_MD is immutable once fetched and OpenSSL allows sharing it between threads.
        let pointer: OpaquePointer?
        init(_ name: String) {
            OpenSSL.ensureInitialized()
            pointer = EVP_MD_fetch(nil, name, nil)
        }
    }

    /// SHA-256 of `bytes`: 32 bytes.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] { bytes.withUnsafeBytes { sha256($0) } }

    /// HMAC-SHA-256 of `message` under `key`.
    public static func hmacSHA256(key: SecretBytes, message: [UInt8]) -> [UInt8] {
        // The providers are loaded before the first fetch: a fetch racing their loading in another
        // thread can fail, and a failed HMAC must never pass for the all-zero one.
        OpenSSL.ensureInitialized()
        var mac = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let done = key.withUnsafeBytes { keyBytes in
            HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), message, message.count, &mac, &length)
        }
        precondition(done != nil && length == 32, "HMAC-SHA-256 failed")
        return mac
    }

    /// Compares in time independent of where the bytes differ.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 }
        }
    }

    /// Cryptographically secure random bytes.
    public static func random(_ count: Int) throws -> SecretBytes {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { throw OpenSSL.failure("RAND_bytes") }
        return SecretBytes(consuming: &bytes)
    }

    /// The bytes that `hex` spells, two digits each, either case; nil for an odd count or any
    /// other character (no sign, no separator). The inverse of ``hex(_:uppercase:separator:)``.
    public static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    /// Bytes as hex digits, optionally upper case and separated (`AB:CD:…`).
    public static func hex(_ bytes: [UInt8], uppercase: Bool = false, separator: Character? = nil) -> String {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 3)
        for (index, byte) in bytes.enumerated() {
            if index > 0, let separator { text += Array(String(separator).utf8) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
