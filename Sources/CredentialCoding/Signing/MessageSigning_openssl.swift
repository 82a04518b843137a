internal import COpenSSL
import DerivedCredentials

/// An Ed25519 key that authenticates delivery messages: the provider signs what it delivers, the
/// client signs what it asks, and each side verifies with the other's public key, pinned when the
/// two were paired. Ed25519 (RFC 8032) because its signatures are short enough for a URL (64 bytes)
/// and it has no parameters to get wrong.
public struct MessageSigningKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The private key as PKCS#8 DER (redacted when printed).
    public let privateKey: PrivateKey
    /// The raw 32-byte public key (RFC 8032), as pinned by the other side.
    public let publicKey: [UInt8]

    /// A fresh key. Throws `DCError/Code/cryptoFailure` if OpenSSL fails.
    public static func generate() throws -> MessageSigningKey {
        OpenSSL.ensureInitialized()
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "ED25519", nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_name(ED25519)")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_generate(context, &key) == 1, let key else {
            throw OpenSSL.failure("EVP_PKEY_generate(ED25519)")
        }
        return try MessageSigningKey(PKey(taking: key))
    }

    /// The key in `pkcs8DER`; throws `DCError/Code/malformedInput` unless it is an Ed25519 key.
    public init(pkcs8DER: SecretBytes) throws {
        guard let key = pkcs8DER.withUnsafeBytes({ PKey.fromPKCS8($0) }) else {
            throw DCError(.malformedInput, "not a PKCS#8 private key", underlying: OpenSSLError.drain())
        }
        try self.init(key)
    }

    private init(_ key: PKey) throws {
        guard EVP_PKEY_get_base_id(key.pointer) == EVP_PKEY_ED25519 else {
            throw DCError(.malformedInput, "not an Ed25519 key (\(key.algorithmDescription))")
        }
        var length = 32
        var raw = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_get_raw_public_key(key.pointer, &raw, &length) == 1, length == 32 else {
            throw OpenSSL.failure("EVP_PKEY_get_raw_public_key")
        }
        privateKey = try key.pkcs8()
        publicKey = raw
    }

    /// The 64-byte Ed25519 signature of `message`.
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let key = PKey.from(privateKey) else {
            throw OpenSSL.failure("decoding the message-signing key")
        }
        guard let context = EVP_MD_CTX_new() else { throw OpenSSL.failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSignInit_ex(context, nil, nil, nil, nil, key.pointer, nil) == 1,
            EVP_DigestSign(context, &signature, &length, message, message.count) == 1, length == 64
        else { throw OpenSSL.failure("EVP_DigestSign(Ed25519)") }
        return signature
    }

    /// Whether `signature` is `publicKey`'s Ed25519 signature of `message`. Anything malformed
    /// (a key or signature of the wrong length) is simply false.
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        OpenSSL.ensureInitialized()
        guard signature.count == 64, publicKey.count == 32,
            let raw = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, publicKey.count)
        else {
            OpenSSLError.clear()
            return false
        }
        let key = PKey(taking: raw)
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        let verified =
            EVP_DigestVerifyInit_ex(context, nil, nil, nil, nil, key.pointer, nil) == 1
            && EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
        OpenSSLError.clear()
        return verified
    }

    /// `MessageSigningKey(<redacted>)`: the private key never reaches a log.
    public var description: String { "MessageSigningKey(<redacted>)" }
    /// The same redacted text as ``description``.
    public var debugDescription: String { description }
    /// A mirror that shows only the public key, so that `dump()` does not print the private one.
    public var customMirror: Mirror {
        Mirror(
            self, children: ["privateKey": "<redacted>", "publicKey": Digests.hex(publicKey)], displayStyle: .struct)
    }
}
