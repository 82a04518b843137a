internal import COpenSSL
import DerivedCredentials

/// AES-256-GCM with a nonce and associated data the caller chooses: the primitive under
/// ``AtRest`` and under formats that seal many chunks with one key (a counter in each nonce).
///
/// The caller owns nonce uniqueness: a 12-byte nonce must never repeat under one key.
public enum AESGCM {
    /// Encrypts `plaintext` under the 32-byte `key` with the 12-byte `nonce`, authenticating
    /// `associatedData` too. Returns `ciphertext ‖ tag(16)`.
    /// Throws `DCError/Code/usage` for a key or nonce of another size.
    public static func seal(
        _ plaintext: UnsafeRawBufferPointer, key: SecretBytes, nonce: [UInt8], associatedData: [UInt8]
    ) throws -> [UInt8] {
        try check(key: key, nonce: nonce)
        guard let cipher = EVP_CIPHER_CTX_new() else { throw OpenSSL.failure("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        let ok = key.withUnsafeBytes { keyBytes in
            EVP_EncryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nonce) == 1
                && EVP_EncryptUpdate(cipher, nil, &length, associatedData, Int32(associatedData.count)) == 1
                && output.withUnsafeMutableBufferPointer { out in
                    EVP_EncryptUpdate(
                        cipher, out.baseAddress, &length, plaintext.baseAddress, Int32(plaintext.count)) == 1
                }
        }
        guard ok else { throw OpenSSL.failure("AES-GCM encryption") }
        var total = Int(length)
        guard
            output.withUnsafeMutableBufferPointer({
                EVP_EncryptFinal_ex(cipher, $0.baseAddress?.advanced(by: total), &length)
            })
                == 1
        else {
            throw OpenSSL.failure("AES-GCM encryption")
        }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else {
            throw OpenSSL.failure("AES-GCM tag")
        }
        return output.prefix(total) + tag
    }

    /// Decrypts what ``seal(_:key:nonce:associatedData:)`` made from `sealed` (`ciphertext ‖ tag`)
    /// with the same `key`, `nonce` and `associatedData`. Throws `DCError/Code/invalid` when any of
    /// them or a byte differs; nothing of the plaintext is returned then.
    public static func open(
        _ sealed: UnsafeRawBufferPointer, key: SecretBytes, nonce: [UInt8], associatedData: [UInt8]
    ) throws -> SecretBytes {
        try check(key: key, nonce: nonce)
        guard sealed.count >= 16 else { throw altered() }
        let ciphertext = UnsafeRawBufferPointer(rebasing: sealed[..<(sealed.count - 16)])
        var tag = Array(sealed.suffix(16))
        guard let cipher = EVP_CIPHER_CTX_new() else { throw OpenSSL.failure("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: ciphertext.count + 16)
        defer { output.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var length: Int32 = 0
        let started = key.withUnsafeBytes { keyBytes in
            EVP_DecryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nonce) == 1
                && EVP_DecryptUpdate(cipher, nil, &length, associatedData, Int32(associatedData.count)) == 1
                && output.withUnsafeMutableBufferPointer {
                    EVP_DecryptUpdate(
                        cipher, $0.baseAddress, &length, ciphertext.baseAddress, Int32(ciphertext.count)) == 1
                }
        }
        guard started else { throw OpenSSL.failure("AES-GCM decryption") }
        let total = Int(length)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1,
            output.withUnsafeMutableBufferPointer({
                EVP_DecryptFinal_ex(cipher, $0.baseAddress?.advanced(by: total), &length)
            })
                == 1
        else {
            OpenSSLError.clear()
            throw altered()
        }
        return SecretBytes(output.prefix(total))
    }

    private static func check(key: SecretBytes, nonce: [UInt8]) throws {
        guard key.count == 32 else { throw DCError(.usage, "an AES-256-GCM key has 32 bytes") }
        guard nonce.count == 12 else { throw DCError(.usage, "an AES-GCM nonce has 12 bytes") }
    }

    private static func altered() -> DCError {
        DCError(.invalid, "the encrypted data cannot be opened with this key, or it was altered")
    }
}

extension AESGCM {
    /// One key sealing or opening many chunks in place, each under its own nonce: a stream's
    /// chunks share one OpenSSL cipher context, so the key schedule is computed once and nothing is
    /// allocated per chunk. The caller owns nonce uniqueness, as with ``AESGCM/seal(_:key:nonce:associatedData:)``.
    /// What one chunk makes is the same as what that call makes: `ciphertext ‖ tag(16)`.
    public final class Stream {
        private let cipher: OpaquePointer
        private let sealing: Bool

        /// A stream that seals (`sealing`) or opens chunks under the 32-byte `key`.
        /// Throws `DCError/Code/usage` for a key of another size.
        public init(key: SecretBytes, sealing: Bool) throws {
            guard key.count == 32 else { throw DCError(.usage, "an AES-256-GCM key has 32 bytes") }
            guard let cipher = EVP_CIPHER_CTX_new() else { throw OpenSSL.failure("EVP_CIPHER_CTX_new") }
            let ok = key.withUnsafeBytes { keyBytes in
                sealing
                    ? EVP_EncryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nil) == 1
                    : EVP_DecryptInit_ex(cipher, EVP_aes_256_gcm(), nil, keyBytes.baseAddress, nil) == 1
            }
            guard ok else {
                EVP_CIPHER_CTX_free(cipher)
                throw OpenSSL.failure("AES-GCM setup")
            }
            self.cipher = cipher
            self.sealing = sealing
        }

        // Freeing the context cleanses the key schedule it holds.
        deinit { EVP_CIPHER_CTX_free(cipher) }

        /// Encrypts `buffer` in place under the 12-byte `nonce`, authenticating `associatedData`
        /// too, and writes the 16-byte tag at `tag`.
        public func seal(
            _ buffer: UnsafeMutableRawBufferPointer, tag: UnsafeMutableRawPointer, nonce: [UInt8],
            associatedData: [UInt8]
        ) throws {
            precondition(sealing && nonce.count == 12 && buffer.count <= Int(Int32.max))
            var length: Int32 = 0
            let bytes = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard EVP_EncryptInit_ex(cipher, nil, nil, nil, nonce) == 1,
                EVP_EncryptUpdate(cipher, nil, &length, associatedData, Int32(associatedData.count)) == 1,
                buffer.isEmpty || EVP_EncryptUpdate(cipher, bytes, &length, bytes, Int32(buffer.count)) == 1,
                EVP_EncryptFinal_ex(cipher, bytes.map { $0 + buffer.count } ?? nil, &length) == 1,
                EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1
            else { throw OpenSSL.failure("AES-GCM encryption") }
        }

        /// Decrypts `buffer` in place under the 12-byte `nonce` and checks the 16-byte tag at
        /// `tag` and `associatedData`. Throws `DCError/Code/invalid` when any of them or a byte
        /// differs; `buffer` is wiped then, so nothing unauthenticated is left in it.
        public func open(
            _ buffer: UnsafeMutableRawBufferPointer, tag: UnsafeRawPointer, nonce: [UInt8], associatedData: [UInt8]
        ) throws {
            precondition(!sealing && nonce.count == 12 && buffer.count <= Int(Int32.max))
            var length: Int32 = 0
            let bytes = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard EVP_DecryptInit_ex(cipher, nil, nil, nil, nonce) == 1,
                EVP_DecryptUpdate(cipher, nil, &length, associatedData, Int32(associatedData.count)) == 1,
                buffer.isEmpty || EVP_DecryptUpdate(cipher, bytes, &length, bytes, Int32(buffer.count)) == 1,
                EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_SET_TAG, 16, UnsafeMutableRawPointer(mutating: tag)) == 1
            else { throw OpenSSL.failure("AES-GCM decryption") }
            guard EVP_DecryptFinal_ex(cipher, bytes.map { $0 + buffer.count } ?? nil, &length) == 1 else {
                OpenSSLError.clear()
                SecretBytes.wipe(buffer)
                throw altered()
            }
        }
    }
}
