internal import COpenSSL
import DerivedCredentials

/// The one owner of an `EVP_PKEY`.
package final class PKey {
    package let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit { EVP_PKEY_free(pointer) }

    enum Kind: Equatable {
        case rsa(bits: Int)
        case ec(curve: String?, bits: Int)
        case other(String)
    }

    var kind: Kind {
        let bits = Int(EVP_PKEY_get_bits(pointer))
        switch EVP_PKEY_get_base_id(pointer) {
        case EVP_PKEY_RSA: return .rsa(bits: bits)
        case EVP_PKEY_EC: return .ec(curve: curveName, bits: bits)
        case let id:
            let name = OBJ_nid2sn(id).map { String(cString: $0) } ?? "unknown"
            return .other(name)
        }
    }

    /// The short name of the named curve (`prime256v1`), or nil for explicit parameters.
    package var curveName: String? {
        var buffer = [CChar](repeating: 0, count: 80)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pointer, OSSL_PKEY_PARAM_GROUP_NAME, &buffer, buffer.count, &length) == 1
        else {
            OpenSSLError.clear()
            return nil
        }
        return String(nulTerminated: buffer)
    }

    /// True when an EC key carries its curve as explicit parameters instead of a named-curve OID.
    var hasExplicitCurveParameters: Bool {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else { return false }
        var buffer = [CChar](repeating: 0, count: 32)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pointer, OSSL_PKEY_PARAM_EC_ENCODING, &buffer, buffer.count, &length) == 1
        else {
            OpenSSLError.clear()
            return curveName == nil
        }
        return String(nulTerminated: buffer) != OSSL_PKEY_EC_ENCODING_GROUP
    }

    /// SubjectPublicKeyInfo DER; equal for a private key and its certificate.
    func subjectPublicKeyInfo() throws -> [UInt8] {
        guard let der = encodeDER({ i2d_PUBKEY(pointer, $0) }) else { throw OpenSSL.failure("i2d_PUBKEY") }
        return der
    }

    /// The PKCS#8 PrivateKeyInfo, as `openssl pkcs8 -topk8 -nocrypt -outform DER` writes it
    /// (`EVP_PKEY2PKCS8` then `i2d_PKCS8_PRIV_KEY_INFO`).
    func pkcs8() throws -> PrivateKey {
        guard let info = EVP_PKEY2PKCS8(pointer) else { throw OpenSSL.failure("EVP_PKEY2PKCS8") }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        guard var der = encodeDER({ i2d_PKCS8_PRIV_KEY_INFO(info, $0) }) else {
            throw OpenSSL.failure("i2d_PKCS8_PRIV_KEY_INFO")
        }
        return PrivateKey(pkcs8DER: SecretBytes(consuming: &der))
    }

    /// A human-readable algorithm, e.g. `RSA 2048` or `EC P-256`.
    var algorithmDescription: String {
        switch kind {
        case .rsa(let bits): "RSA \(bits)"
        case .ec(let curve, let bits): "EC " + (curve.map(PKey.nistName) ?? "explicit \(bits)-bit")
        case .other(let name): name
        }
    }

    static func nistName(_ curve: String) -> String {
        switch curve {
        case "prime256v1", "P-256": "P-256"
        case "secp384r1", "P-384": "P-384"
        case "secp521r1", "P-521": "P-521"
        default: curve
        }
    }

    /// Decodes a PKCS#8 PrivateKeyInfo (already checked to be strict DER), in place: no copy of
    /// the secret bytes is made.
    static func fromPKCS8(_ der: UnsafeRawBufferPointer) -> PKey? {
        KeyDecoderPool.shared.decode(der, as: .pkcs8)
    }

    /// Decodes a PKCS#8 PrivateKeyInfo (already checked to be strict DER).
    static func fromPKCS8(_ der: [UInt8]) -> PKey? {
        der.withUnsafeBytes { fromPKCS8($0) }
    }

    /// The key `privateKey` holds, decoded from its PKCS#8 DER where it lies (no copy to wipe).
    package static func from(_ privateKey: PrivateKey) -> PKey? {
        privateKey.withPKCS8DER { fromPKCS8($0) }
    }

    /// Decodes an already parsed PKCS#8 structure (from PKCS#12 or a decrypted key).
    static func fromPKCS8Info(_ info: OpaquePointer) -> PKey? {
        guard var der = encodeDER({ i2d_PKCS8_PRIV_KEY_INFO(info, $0) }) else { return nil }
        defer { der.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        return fromPKCS8(der)
    }

    /// Decodes a PKCS#1 RSAPrivateKey or a SEC1 ECPrivateKey.
    static func fromTypeSpecific(_ der: [UInt8], type: Int32) -> PKey? {
        der.withUnsafeBytes { KeyDecoderPool.shared.decode($0, as: type == EVP_PKEY_RSA ? .rsa : .ec) }
    }

    /// Decodes a SubjectPublicKeyInfo given as strict DER; nil when it is not one.
    package static func fromSubjectPublicKeyInfo(_ der: [UInt8]) -> PKey? {
        guard (try? DER.validate(der, what: "a public key")) != nil else { return nil }
        var cursor: UnsafePointer<UInt8>? = nil
        let decoded = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            cursor = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let decoded else {
            OpenSSLError.clear()
            return nil
        }
        return PKey(taking: decoded)
    }

    /// An EC key's public point, encoded as in a certificate (uncompressed or compressed).
    func encodedPublicPoint() throws -> [UInt8] {
        var point = [UInt8](repeating: 0, count: 200)
        var length = 0
        guard
            EVP_PKEY_get_octet_string_param(pointer, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, &point, point.count, &length)
                == 1
        else { throw OpenSSL.failure("reading the EC public point") }
        return Array(point.prefix(length))
    }

    /// Decodes a SubjectPublicKeyInfo.
    static func fromCertificate(_ x509: X509Certificate) -> PKey? {
        guard let key = X509_get_pubkey(x509.pointer) else { return nil }
        return PKey(taking: key)
    }
}

extension KeyMaterial {
    /// Material with the certificate that matches `privateKey` first (compared by
    /// SubjectPublicKeyInfo), or an error naming the mismatch.
    public static func paired(certificates: [Certificate], privateKey: PrivateKey, source: String) throws -> KeyMaterial
    {
        guard let key = PKey.from(privateKey) else {
            throw DCError(.malformedInput, "the private key cannot be read", subject: source)
        }
        let spki = try key.subjectPublicKeyInfo()
        var ordered = certificates
        guard let index = try ordered.firstIndex(where: { try X509Certificate($0).subjectPublicKeyInfo() == spki })
        else {
            throw DCError(
                .keyCertificateMismatch, "the private key does not belong to the certificate", subject: source)
        }
        ordered.insert(ordered.remove(at: index), at: 0)
        return KeyMaterial(source: source, certificates: ordered, privateKey: privateKey)
    }
}

/// Describes a private key without revealing it.
public enum PrivateKeyDetails {
    /// `RSA 2048`, `EC P-256`, or `unreadable`.
    public static func describe(_ key: PrivateKey) -> String {
        PKey.from(key)?.algorithmDescription ?? "unreadable"
    }
}
