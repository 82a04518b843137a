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
        guard let cipher = EVP_CIPHER_CTX_new() else { throw OpenSSL.failure("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        var total = 0
        let aad = magic + Array(context.utf8)
        let ok = key.withUnsafeBytes { keyBytes in
            plaintext.withUnsafeBytes { plain in
                EVP_EncryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nonce) == 1
                    && EVP_EncryptUpdate(cipher, nil, &length, aad, Int32(aad.count)) == 1
                    && output.withUnsafeMutableBufferPointer { out in
                        EVP_EncryptUpdate(cipher, out.baseAddress, &length, plain.baseAddress, Int32(plain.count))
                            == 1
                    }
            }
        }
        guard ok else { throw OpenSSL.failure("AES-GCM encryption") }
        total = Int(length)
        guard
            output.withUnsafeMutableBufferPointer({ EVP_EncryptFinal_ex(cipher, $0.baseAddress! + total, &length) })
                == 1
        else {
            throw OpenSSL.failure("AES-GCM encryption")
        }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else {
            throw OpenSSL.failure("AES-GCM tag")
        }
        return magic + nonce + output.prefix(total) + tag
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
        let ciphertext = Array(sealed[(magic.count + 12)..<(sealed.count - 16)])
        var tag = Array(sealed.suffix(16))
        guard let cipher = EVP_CIPHER_CTX_new() else { throw OpenSSL.failure("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: ciphertext.count + 16)
        defer { output.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var length: Int32 = 0
        let aad = magic + Array(context.utf8)
        let started = key.withUnsafeBytes { keyBytes in
            EVP_DecryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nonce) == 1
                && EVP_DecryptUpdate(cipher, nil, &length, aad, Int32(aad.count)) == 1
                && output.withUnsafeMutableBufferPointer {
                    EVP_DecryptUpdate(cipher, $0.baseAddress, &length, ciphertext, Int32(ciphertext.count)) == 1
                }
        }
        guard started else { throw OpenSSL.failure("AES-GCM decryption") }
        let total = Int(length)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1,
            output.withUnsafeMutableBufferPointer({ EVP_DecryptFinal_ex(cipher, $0.baseAddress! + total, &length) })
                == 1
        else {
            OpenSSLError.clear()
            throw DCError(
                .invalid, "the encrypted store file cannot be opened with this key, or it was altered",
                hint: "the client's store is damaged or was altered: set the client up again (dcclient init)")
        }
        return SecretBytes(output.prefix(total))
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
