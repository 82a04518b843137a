internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Private keys rebuilt from the raw components a token gives out, and AES-key-wrapped keys
/// unwrapped: the two ways a PKCS#11 key becomes PKCS#8 (where the token allows it at all).
public enum KeyImport {
    /// An EC private key from its scalar; the curve and public point come from `certificate`, so
    /// the result is known to belong to it (checked again by comparing SubjectPublicKeyInfo).
    public static func ecPrivateKey(scalar: SecretBytes, certificate: Certificate) throws -> PrivateKey {
        let x509 = try X509Certificate(certificate)
        guard let publicKey = x509.publicKey, case .ec(let curve?, _) = publicKey.kind else {
            throw DCError(.keyCertificateMismatch, "the certificate does not hold an EC key on a named curve")
        }
        let point = try publicKey.encodedPublicPoint()
        let key = try scalar.withUnsafeBytes { bytes -> PKey in
            guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSL.failure("OSSL_PARAM_BLD_new") }
            defer { OSSL_PARAM_BLD_free(builder) }
            guard let scalarNumber = BN_secure_new(),
                BN_bin2bn(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(bytes.count), scalarNumber)
                    != nil
            else {
                throw OpenSSL.failure("BN_bin2bn")
            }
            defer { BN_clear_free(scalarNumber) }
            // OpenSSL keeps the name pointers until OSSL_PARAM_BLD_to_param: owned C strings.
            let keyNames: [String] = ["group", "priv", "pub"]  // OSSL_PKEY_PARAM_GROUP_NAME, _PRIV_KEY, _PUB_KEY
            let strings = try OpenSSL.cStrings(keyNames + [curve])
            defer { strings.forEach { free($0) } }
            let (names, group) = (strings[..<3], strings[3])
            guard OSSL_PARAM_BLD_push_utf8_string(builder, names[0], group, 0) == 1,
                OSSL_PARAM_BLD_push_BN(builder, names[1], scalarNumber) == 1,
                OSSL_PARAM_BLD_push_octet_string(builder, names[2], point, point.count) == 1,
                let params = OSSL_PARAM_BLD_to_param(builder)
            else { throw OpenSSL.failure("building EC key parameters") }
            defer { OSSL_PARAM_free(params) }
            return try fromData("EC", params)
        }
        return try checkedPKCS8(key, certificate: x509)
    }

    /// `key` in the canonical PKCS#8 form the rest of the toolkit writes. Tokens may export an
    /// EC key without its public point (SoftHSM2's wrapped PKCS#8 has none); it is rebuilt from
    /// its scalar with the certificate's point, as `openssl pkcs8 -topk8` would write it.
    public static func canonical(_ key: PrivateKey, certificate: Certificate) throws -> PrivateKey {
        guard let decoded = PKey.from(key) else {
            throw DCError(.malformedInput, "the exported key is not PKCS#8")
        }
        guard case .ec = decoded.kind else {
            return try checkedPKCS8(decoded, certificate: try X509Certificate(certificate))
        }
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(decoded.pointer, "priv", &number) == 1, let number else {
            throw OpenSSL.failure("reading the EC scalar")
        }
        defer { BN_clear_free(number) }
        var scalar = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))  // BN_num_bytes is a macro
        BN_bn2bin(number, &scalar)
        return try ecPrivateKey(scalar: SecretBytes(consuming: &scalar), certificate: certificate)
    }

    /// An RSA private key from its CRT components (big-endian, as PKCS#11 gives them).
    public static func rsaPrivateKey(
        modulus: [UInt8], publicExponent: [UInt8], privateExponent: SecretBytes, prime1: SecretBytes,
        prime2: SecretBytes,
        exponent1: SecretBytes, exponent2: SecretBytes, coefficient: SecretBytes, certificate: Certificate
    ) throws -> PrivateKey {
        guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSL.failure("OSSL_PARAM_BLD_new") }
        defer { OSSL_PARAM_BLD_free(builder) }
        let parts: [(String, SecretBytes)] = [
            ("n", SecretBytes(modulus)), ("e", SecretBytes(publicExponent)), ("d", privateExponent),
            ("rsa-factor1", prime1),
            ("rsa-factor2", prime2), ("rsa-exponent1", exponent1), ("rsa-exponent2", exponent2),
            ("rsa-coefficient1", coefficient),
        ]
        let names = try OpenSSL.cStrings(parts.map(\.0))
        defer { names.forEach { free($0) } }
        var numbers: [OpaquePointer] = []
        defer { numbers.forEach { BN_clear_free($0) } }
        for (index, part) in parts.enumerated() {
            guard let number = BN_secure_new() else { throw OpenSSL.failure("BN_secure_new") }
            numbers.append(number)
            let ok = part.1.withUnsafeBytes {
                BN_bin2bn($0.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32($0.count), number) != nil
            }
            guard ok, OSSL_PARAM_BLD_push_BN(builder, names[index], number) == 1 else {
                throw OpenSSL.failure("building RSA key parameters")
            }
        }
        guard let params = OSSL_PARAM_BLD_to_param(builder) else { throw OpenSSL.failure("OSSL_PARAM_BLD_to_param") }
        defer { OSSL_PARAM_free(params) }
        return try checkedPKCS8(try fromData("RSA", params), certificate: try X509Certificate(certificate))
    }

    /// RFC 5649 AES key wrap with padding, undone; returns exactly one DER object (PKCS#11 tokens
    /// such as SoftHSM 2.6 zero-pad the key to a multiple of 8 before wrapping: the padding is cut
    /// at the DER length).
    public static func unwrapAESKeyWrapPad(_ wrapped: [UInt8], key: SecretBytes) throws -> SecretBytes {
        guard key.count == 32, let context = EVP_CIPHER_CTX_new() else {
            throw DCError(.usage, "a 256-bit wrapping key is needed")
        }
        defer { EVP_CIPHER_CTX_free(context) }
        EVP_CIPHER_CTX_set_flags(context, Int32(EVP_CIPHER_CTX_FLAG_WRAP_ALLOW))
        var output = [UInt8](repeating: 0, count: wrapped.count + 16)
        defer { output.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var length: Int32 = 0
        var total: Int32 = 0
        let ok = key.withUnsafeBytes { keyBytes in
            EVP_DecryptInit_ex(context, EVP_aes_256_wrap_pad(), nil, keyBytes.baseAddress, nil) == 1
                && EVP_DecryptUpdate(context, &output, &length, wrapped, Int32(wrapped.count)) == 1
        }
        guard ok else {
            throw DCError(
                .invalid, "the wrapped key does not unwrap",
                remedy: .deriveAfterDamagedKey,
                underlying: OpenSSLError.drain())
        }
        total = length
        guard
            output.withUnsafeMutableBufferPointer({
                EVP_DecryptFinal_ex(context, $0.baseAddress?.advanced(by: Int(total)), &length)
            }) == 1
        else {
            throw DCError(
                .invalid, "the wrapped key does not unwrap",
                remedy: .deriveAfterDamagedKey,
                underlying: OpenSSLError.drain())
        }
        total += length
        let plain = Array(output.prefix(Int(total)))
        // The DER length of the outer SEQUENCE: cut the token's zero padding.
        guard plain.count >= 2, plain[0] == 0x30 else {
            throw DCError(
                .invalid, "the unwrapped key is not DER",
                remedy: .deriveAfterDamagedKey)
        }
        var derLength = Int(plain[1])
        var header = 2
        if plain[1] & 0x80 != 0 {
            let count = Int(plain[1] & 0x7F)
            guard count <= 4, plain.count >= 2 + count else {
                throw DCError(
                    .invalid, "the unwrapped key is not DER",
                    remedy: .deriveAfterDamagedKey)
            }
            derLength = plain[2..<(2 + count)].reduce(0) { $0 << 8 | Int($1) }
            header = 2 + count
        }
        guard header + derLength <= plain.count, plain[(header + derLength)...].allSatisfy({ $0 == 0 }) else {
            throw DCError(
                .invalid, "the unwrapped key has unexpected trailing bytes",
                remedy: .deriveAfterDamagedKey)
        }
        var exact = Array(plain.prefix(header + derLength))
        return SecretBytes(consuming: &exact)
    }

    static func fromData(_ type: String, _ params: UnsafeMutablePointer<OSSL_PARAM>) throws -> PKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_name")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &key, dc_EVP_PKEY_KEYPAIR(), params) == 1, let key
        else {
            throw DCError(
                .malformedInput, "the token's key components do not form a \(type) key",
                underlying: OpenSSLError.drain())
        }
        return PKey(taking: key)
    }

    static func checkedPKCS8(_ key: PKey, certificate: X509Certificate) throws -> PrivateKey {
        guard try key.subjectPublicKeyInfo() == certificate.subjectPublicKeyInfo() else {
            throw DCError(.keyCertificateMismatch, "the token's private key does not belong to the certificate")
        }
        return try KeyDecoding.checked(key).pkcs8()
    }
}
