internal import COpenSSL
import DerivedCredentials

/// Encryption at rest: AES-256-GCM with a random 96-bit nonce. The format is
/// `"DCAR1" ‖ nonce(12) ‖ ciphertext ‖ tag(16)`; the magic and a caller-chosen context string
/// are authenticated (AAD), so a file cannot be moved to another role without failing to open.
public enum AtRest {
    static let magic = Array("DCAR1".utf8)

    /// Encrypts `plaintext` under the 32-byte `key`, binding `context` as AAD; a fresh nonce every call.
    /// Throws `DCError/Code/usage` for a key of another size.
    public static func seal(_ plaintext: SecretBytes, key: SecretBytes, context: String) throws -> [UInt8] {
        guard key.count == 32 else { throw DCError(.usage, "an at-rest key has 32 bytes") }
        let nonce = try Digests.random(12).withUnsafeBytes { Array($0) }
        let sealed = try plaintext.withUnsafeBytes {
            try AESGCM.seal($0, key: key, nonce: nonce, associatedData: magic + Array(context.utf8))
        }
        return magic + nonce + sealed
    }

    /// Decrypts what ``seal(_:key:context:)`` made with the same `key` and `context`. Throws
    /// `DCError/Code/invalid` if it is not a sealed file, or if the key, the context or a byte differs.
    public static func open(_ sealed: [UInt8], key: SecretBytes, context: String) throws -> SecretBytes {
        guard key.count == 32 else { throw DCError(.usage, "an at-rest key has 32 bytes") }
        guard sealed.count >= magic.count + 12 + 16, Array(sealed.prefix(magic.count)) == magic else {
            throw DCError(
                .invalid, "not an encrypted store file",
                remedy: .setUpAlteredStore)
        }
        let nonce = Array(sealed[magic.count..<(magic.count + 12)])
        do {
            return try sealed[(magic.count + 12)...].withUnsafeBytes {
                try AESGCM.open($0, key: key, nonce: nonce, associatedData: magic + Array(context.utf8))
            }
        } catch let error as DCError where error.code == .invalid {
            throw DCError(
                .invalid, "the encrypted store file cannot be opened with this key, or it was altered",
                remedy: .setUpAlteredStore)
        }
    }

    /// The most PBKDF2 iterations ``deriveKey(passphrase:salt:iterations:)`` runs: about a second
    /// here. The count comes from a file, which must not hold the process for hours.
    public static let maximumIterations = 10_000_000

    /// A 32-byte key from a passphrase: PBKDF2-HMAC-SHA-256 with `iterations` (1 to
    /// ``maximumIterations``; otherwise `DCError/Code/invalid`). The same bytes as OpenSSL's
    /// `PKCS5_PBKDF2_HMAC`, in half its time (see `dc_pbkdf2_hmac_sha256`).
    public static func deriveKey(passphrase: SecretBytes, salt: [UInt8], iterations: Int) throws -> SecretBytes {
        guard (1...maximumIterations).contains(iterations) else {
            throw DCError(
                .invalid, "the key-derivation iteration count \(iterations) is outside 1…\(maximumIterations)",
                remedy: .setUpAlteredStore)
        }
        var key = [UInt8](repeating: 0, count: 32)
        let ok = passphrase.withUnsafeBytes { pass in
            dc_pbkdf2_hmac_sha256(
                pass.baseAddress?.assumingMemoryBound(to: UInt8.self), pass.count, salt, salt.count,
                UInt(iterations), &key, key.count)
        }
        guard ok == 1 else { throw OpenSSL.failure("PBKDF2-HMAC-SHA-256") }
        return SecretBytes(consuming: &key)
    }
}
