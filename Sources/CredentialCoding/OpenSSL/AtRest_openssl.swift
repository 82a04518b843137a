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
                hint: "the client's store is damaged or was altered: set the client up again (dcclient init)")
        }
        let nonce = Array(sealed[magic.count..<(magic.count + 12)])
        do {
            return try sealed[(magic.count + 12)...].withUnsafeBytes {
                try AESGCM.open($0, key: key, nonce: nonce, associatedData: magic + Array(context.utf8))
            }
        } catch let error as DCError where error.code == .invalid {
            throw DCError(
                .invalid, "the encrypted store file cannot be opened with this key, or it was altered",
                hint: "the client's store is damaged or was altered: set the client up again (dcclient init)")
        }
    }

    /// A 32-byte key from a passphrase: PBKDF2-HMAC-SHA-256.
    public static func deriveKey(passphrase: SecretBytes, salt: [UInt8], iterations: Int) throws -> SecretBytes {
        var key = [UInt8](repeating: 0, count: 32)
        let ok = passphrase.withUnsafeBytes { pass in
            PKCS5_PBKDF2_HMAC(
                pass.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(pass.count), salt, Int32(salt.count),
                Int32(iterations), EVP_sha256(), 32, &key)
        }
        guard ok == 1 else { throw OpenSSL.failure("PKCS5_PBKDF2_HMAC") }
        return SecretBytes(consuming: &key)
    }
}
