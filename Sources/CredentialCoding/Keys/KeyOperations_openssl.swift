internal import COpenSSL
import DerivedCredentials
import FoundationEssentials
import Synchronization

/// A digest algorithm a signature or a padding names.
public enum DigestAlgorithm: String, Sendable, CaseIterable {
    /// SHA-1 (only where a peer's mechanism names it: OAEP's and PSS's default).
    case sha1 = "SHA1"
    /// SHA-224.
    case sha224 = "SHA224"
    /// SHA-256.
    case sha256 = "SHA256"
    /// SHA-384.
    case sha384 = "SHA384"
    /// SHA-512.
    case sha512 = "SHA512"

    /// The digest's length in bytes.
    public var length: Int {
        switch self {
        case .sha1: 20
        case .sha224: 28
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }
}

/// How a ``KeyOperations`` signs: the scheme, and whether it hashes the input first.
public enum SignatureScheme: Sendable, Equatable {
    /// ECDSA. With a digest, the input is hashed with it first; without, the input is the digest
    /// (PKCS#11's `CKM_ECDSA`). The signature is `r‖s`, each as long as the curve's order.
    case ecdsa(DigestAlgorithm?)
    /// RSASSA-PKCS1-v1_5. With a digest, the input is hashed and wrapped in a DigestInfo first;
    /// without, the input (a DigestInfo the caller made) is padded and signed as it is
    /// (`CKM_RSA_PKCS`).
    case rsaPKCS1(DigestAlgorithm?)
    /// RSASSA-PSS with MGF1 over `mgf` and a salt of `saltLength` bytes. With `hashingInput`, the
    /// input is hashed with `digest` first; without, the input is that digest (`CKM_RSA_PKCS_PSS`).
    case rsaPSS(digest: DigestAlgorithm, mgf: DigestAlgorithm, saltLength: Int, hashingInput: Bool)
}

/// How a ``KeyOperations`` decrypts with an RSA key.
public enum DecryptionPadding: Sendable, Equatable {
    /// RSAES-PKCS1-v1_5.
    case pkcs1
    /// RSAES-OAEP with `digest`, MGF1 over `mgf`, and a label (usually empty).
    case oaep(digest: DigestAlgorithm, mgf: DigestAlgorithm, label: [UInt8])
}

/// The public half of a key in the encodings PKCS#11 attributes carry.
public struct PublicKeyParts: Sendable, Equatable {
    /// The kind of key.
    public enum Kind: Sendable, Equatable {
        /// An EC key on a named curve of `bits` bits.
        case ec(bits: Int)
        /// An RSA key with a modulus of `bits` bits.
        case rsa(bits: Int)
    }

    /// The kind of key and its size.
    public var kind: Kind
    /// EC: the curve's OID as DER (`CKA_EC_PARAMS`); empty for RSA.
    public var ecParameters: [UInt8]
    /// EC: the public point, uncompressed (`04‖x‖y`); empty for RSA.
    public var ecPoint: [UInt8]
    /// RSA: the modulus, big-endian without leading zeros; empty for EC.
    public var modulus: [UInt8]
    /// RSA: the public exponent, big-endian without leading zeros; empty for EC.
    public var publicExponent: [UInt8]
    /// The SubjectPublicKeyInfo DER.
    public var subjectPublicKeyInfo: [UInt8]

    /// The parts of `certificate`'s public key. Throws `DCError/Code/malformedInput` unless it is
    /// an RSA key or an EC key on a named curve.
    public init(_ certificate: Certificate) throws {
        let x509 = try X509Certificate(certificate)
        guard let key = x509.publicKey else {
            throw DCError(
                .malformedInput, "the certificate's public key cannot be read", underlying: OpenSSLError.drain())
        }
        try self.init(key)
    }

    /// The parts of `key`; `subjectPublicKeyInfo` is its encoding when the caller has it (a
    /// certificate's own), which spares OpenSSL's encoder.
    init(_ key: PKey, subjectPublicKeyInfo: [UInt8]? = nil) throws {
        self.subjectPublicKeyInfo = try subjectPublicKeyInfo ?? key.subjectPublicKeyInfo()
        ecParameters = []
        ecPoint = []
        modulus = []
        publicExponent = []
        switch key.kind {
        case .ec(let curve?, let bits):
            kind = .ec(bits: bits)
            let nid = OBJ_sn2nid(curve)
            guard nid != NID_undef, let object = OBJ_nid2obj(nid),
                let der = encodeDER({ i2d_ASN1_OBJECT(object, $0) })
            else { throw OpenSSL.failure("the curve's OID") }
            ecParameters = der
            var length = 0
            guard EVP_PKEY_get_octet_string_param(key.pointer, OSSL_PKEY_PARAM_PUB_KEY, nil, 0, &length) == 1 else {
                throw OpenSSL.failure("EVP_PKEY_get_octet_string_param(pub)")
            }
            var point = [UInt8](repeating: 0, count: length)
            guard EVP_PKEY_get_octet_string_param(key.pointer, OSSL_PKEY_PARAM_PUB_KEY, &point, length, &length) == 1
            else { throw OpenSSL.failure("EVP_PKEY_get_octet_string_param(pub)") }
            ecPoint = Array(point.prefix(length))
        case .rsa(let bits):
            kind = .rsa(bits: bits)
            modulus = try Self.number(key, OSSL_PKEY_PARAM_RSA_N)
            publicExponent = try Self.number(key, OSSL_PKEY_PARAM_RSA_E)
        default:
            throw DCError(.malformedInput, "not an RSA key or an EC key on a named curve (\(key.algorithmDescription))")
        }
    }

    private static func number(_ key: PKey, _ name: String) throws -> [UInt8] {
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key.pointer, name, &number) == 1, let number else {
            throw OpenSSL.failure("EVP_PKEY_get_bn_param(\(name))")
        }
        defer { BN_free(number) }
        var bytes = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
        _ = BN_bn2bin(number, &bytes)
        return bytes
    }
}

/// The DER encodings of a certificate's names and serial number, as PKCS#11's `CKA_SUBJECT`,
/// `CKA_ISSUER` and `CKA_SERIAL_NUMBER` carry them.
public struct CertificateNames: Sendable, Equatable {
    /// The subject Name, DER.
    public var subject: [UInt8]
    /// The issuer Name, DER.
    public var issuer: [UInt8]
    /// The serial number as a DER INTEGER.
    public var serialNumber: [UInt8]

    /// The names of `certificate`. Throws `DCError/Code/malformedInput` unless it is one
    /// strict-DER certificate.
    public init(_ certificate: Certificate) throws {
        try self.init(try X509Certificate(certificate))
    }

    init(_ x509: X509Certificate) throws {
        guard let subject = encodeDER({ i2d_X509_NAME(X509_get_subject_name(x509.pointer), $0) }),
            let issuer = encodeDER({ i2d_X509_NAME(X509_get_issuer_name(x509.pointer), $0) }),
            let serial = encodeDER({ i2d_ASN1_INTEGER(X509_get0_serialNumber(x509.pointer), $0) })
        else { throw OpenSSL.failure("i2d_X509_NAME") }
        self.subject = subject
        self.issuer = issuer
        self.serialNumber = serial
    }
}

/// What a PKCS#11 token shows of a certificate, read in one parse of it: its names, its public
/// key's parts, its key usage and its validity. Parsing a certificate is the costly part (OpenSSL 3
/// decodes its public key through a decoder chain), so a token reads these once per certificate.
public struct TokenCertificate: Sendable, Equatable {
    /// The subject, the issuer and the serial number, DER.
    public var names: CertificateNames
    /// The public key, in PKCS#11's encodings; its SubjectPublicKeyInfo is the certificate's own.
    public var publicParts: PublicKeyParts
    /// The keyUsage bits; nil when the extension is absent.
    public var keyUsage: KeyUsage?
    /// The start of validity; nil if OpenSSL cannot read the time.
    public var notBefore: Date?
    /// The end of validity; nil if OpenSSL cannot read the time.
    public var notAfter: Date?

    /// What a token shows of `certificate`. Throws `DCError/Code/malformedInput` unless it is one
    /// strict-DER certificate whose key is RSA or EC on a named curve.
    public init(_ certificate: Certificate) throws {
        let x509 = try X509Certificate(certificate)
        names = try CertificateNames(x509)
        guard let key = x509.publicKey else {
            throw DCError(
                .malformedInput, "the certificate's public key cannot be read", underlying: OpenSSLError.drain())
        }
        publicParts = try PublicKeyParts(key, subjectPublicKeyInfo: try x509.subjectPublicKeyInfo())
        keyUsage = x509.keyUsage
        notBefore = x509.notBefore
        notAfter = x509.notAfter
    }
}

/// A private key made ready to sign, decrypt and agree on keys, as a PKCS#11 token does with it:
/// parsed once, then used from any thread (each operation has its own OpenSSL context).
///
/// The key lives in OpenSSL's memory for as long as this object does; when the process has
/// called ``KeyOperations/useLockedMemory()``, OpenSSL keeps the private numbers in its secure
/// heap (locked, never swapped or dumped). It is never printed: `dump()` and `description` show
/// only the kind of key.
public final class KeyOperations: @unchecked Sendable, CustomStringConvertible, CustomReflectable {
    // `key` is never modified after init; OpenSSL allows concurrent operations on one EVP_PKEY
    // when each has its own EVP_PKEY_CTX, which every method makes, except raw ECDSA: its
    // contexts, initialised once (fetching the implementation costs as much as a tenth of the
    // signature), wait in `idle` (a `Mutex`), each used by one thread at a time.
    private let key: PKey
    private let idle = Mutex<[PooledContext]>([])
    /// The public half, in PKCS#11's encodings.
    public let publicParts: PublicKeyParts

    /// The key in `privateKey`. Throws `DCError/Code/malformedInput` unless it is an RSA key or
    /// an EC key on a named curve.
    public init(_ privateKey: PrivateKey) throws {
        OpenSSL.ensureInitialized()
        guard let decoded = PKey.from(privateKey) else {
            throw DCError(.malformedInput, "not a PKCS#8 private key", underlying: OpenSSLError.drain())
        }
        key = decoded
        publicParts = try PublicKeyParts(decoded)
    }

    /// Asks OpenSSL to keep private keys decoded from now on in its secure heap (64 KiB, locked
    /// in memory and left out of core dumps), unless the process set one up already. Returns
    /// whether a secure heap is in use; it is not when the memory-lock limit is too small.
    @discardableResult
    public static func useLockedMemory() -> Bool {
        if CRYPTO_secure_malloc_initialized() == 1 { return true }
        return CRYPTO_secure_malloc_init(64 * 1024, 16) != 0
    }

    /// Whether `certificate` certifies this key: its public key is this key's public half, as
    /// OpenSSL compares keys (`EVP_PKEY_eq`).
    public func isCertified(by certificate: Certificate) -> Bool {
        guard let x509 = try? X509Certificate(certificate), let publicKey = x509.publicKey else { return false }
        return EVP_PKEY_eq(publicKey.pointer, key.pointer) == 1
    }

    /// The length of a signature this key makes, in bytes.
    public var signatureLength: Int {
        switch publicParts.kind {
        case .ec(let bits): 2 * ((bits + 7) / 8)
        case .rsa(let bits): (bits + 7) / 8
        }
    }

    /// Signs `input` with `scheme`. Throws `DCError/Code/usage` when the scheme does not fit the
    /// key or the input's length does not fit the scheme, `DCError/Code/cryptoFailure` when
    /// OpenSSL fails.
    public func sign(_ input: [UInt8], with scheme: SignatureScheme) throws -> [UInt8] {
        switch (scheme, publicParts.kind) {
        case (.ecdsa(let digest?), .ec):
            return try Self.rawECDSA(try digestSign(input, digest: digest), length: signatureLength)
        case (.ecdsa(nil), .ec):
            return try Self.rawECDSA(try pooledECDSA(input), length: signatureLength)
        case (.rsaPKCS1(let digest?), .rsa):
            return try digestSign(input, digest: digest) { context in
                EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1
            }
        case (.rsaPKCS1(nil), .rsa):
            guard input.count <= signatureLength - 11 else {
                throw DCError(.usage, "the input is too long for PKCS#1 v1.5 padding with this key")
            }
            return try rawSign(input) { EVP_PKEY_CTX_set_rsa_padding($0, RSA_PKCS1_PADDING) == 1 }
        case (.rsaPSS(let digest, let mgf, let saltLength, let hashingInput), .rsa):
            let configure: (OpaquePointer) -> Bool = { context in
                EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PSS_PADDING) == 1
                    && EVP_PKEY_CTX_set_rsa_mgf1_md_name(context, mgf.rawValue, nil) == 1
                    && EVP_PKEY_CTX_set_rsa_pss_saltlen(context, Int32(saltLength)) == 1
            }
            if hashingInput { return try digestSign(input, digest: digest, configure: configure) }
            guard input.count == digest.length else {
                throw DCError(.usage, "the input is not a \(digest.rawValue) digest")
            }
            return try rawSign(input) { context in
                configure(context) && EVP_PKEY_CTX_set_signature_md(context, Self.md(digest)) == 1
            }
        default:
            throw DCError(.usage, "this key cannot sign with that scheme")
        }
    }

    /// Decrypts `input` with an RSA key. Throws `DCError/Code/usage` for an EC key and
    /// `DCError/Code/cryptoFailure` when the ciphertext does not decrypt.
    public func decrypt(_ input: [UInt8], padding: DecryptionPadding) throws -> SecretBytes {
        guard case .rsa = publicParts.kind else { throw DCError(.usage, "an EC key does not decrypt") }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_pkey")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_decrypt_init(context) == 1 else { throw OpenSSL.failure("EVP_PKEY_decrypt_init") }
        switch padding {
        case .pkcs1:
            guard EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1 else {
                throw OpenSSL.failure("EVP_PKEY_CTX_set_rsa_padding")
            }
        case .oaep(let digest, let mgf, let label):
            guard EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_OAEP_PADDING) == 1,
                EVP_PKEY_CTX_set_rsa_oaep_md_name(context, digest.rawValue, nil) == 1,
                EVP_PKEY_CTX_set_rsa_mgf1_md_name(context, mgf.rawValue, nil) == 1
            else { throw OpenSSL.failure("setting up OAEP") }
            if !label.isEmpty {
                // OpenSSL takes ownership of the label it is given.
                guard let copy = CRYPTO_malloc(label.count, #fileID, #line) else { throw OpenSSL.failure("OAEP label") }
                label.withUnsafeBytes {
                    UnsafeMutableRawBufferPointer(start: copy, count: $0.count).copyMemory(from: $0)
                }
                guard EVP_PKEY_CTX_set0_rsa_oaep_label(context, copy, Int32(label.count)) == 1 else {
                    CRYPTO_free(copy, #fileID, #line)
                    throw OpenSSL.failure("EVP_PKEY_CTX_set0_rsa_oaep_label")
                }
            }
        }
        var length = 0
        guard EVP_PKEY_decrypt(context, nil, &length, input, input.count) == 1 else {
            throw DCError(.cryptoFailure, "the ciphertext does not decrypt", underlying: OpenSSLError.drain())
        }
        var plaintext = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_decrypt(context, &plaintext, &length, input, input.count) == 1 else {
            plaintext.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            throw DCError(.cryptoFailure, "the ciphertext does not decrypt", underlying: OpenSSLError.drain())
        }
        var result = Array(plaintext.prefix(length))
        plaintext.withUnsafeMutableBytes { SecretBytes.wipe($0) }
        return SecretBytes(consuming: &result)
    }

    /// ECDH with the peer's public point (uncompressed or compressed, on this key's curve): the
    /// shared secret's x coordinate, as PKCS#11's `CKM_ECDH1_DERIVE` with `CKD_NULL` gives it.
    /// Throws `DCError/Code/usage` for an RSA key or a point that is not on the curve.
    public func agree(peerPoint: [UInt8]) throws -> SecretBytes {
        guard case .ec = publicParts.kind, case .ec(let curve?, _) = key.kind else {
            throw DCError(.usage, "an RSA key does not agree on keys")
        }
        guard let peer = try Self.publicKey(curve: curve, point: peerPoint) else {
            throw DCError(.usage, "the peer's public point is not on the key's curve", underlying: OpenSSLError.drain())
        }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_pkey")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var length = 0
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer.pointer) == 1,
            EVP_PKEY_derive(context, nil, &length) == 1
        else { throw DCError(.usage, "the peer's key does not fit", underlying: OpenSSLError.drain()) }
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive(context, &secret, &length) == 1 else {
            secret.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            throw OpenSSL.failure("EVP_PKEY_derive")
        }
        // The secret is as long as OpenSSL says it wrote, which may be less than it first said.
        let written = min(length, secret.count)
        secret.withUnsafeMutableBytes { SecretBytes.wipe(UnsafeMutableRawBufferPointer(rebasing: $0[written...])) }
        secret.removeLast(secret.count - written)
        return SecretBytes(consuming: &secret)
    }

    /// `KeyOperations(EC 256)`; never the key.
    public var description: String {
        switch publicParts.kind {
        case .ec(let bits): "KeyOperations(EC \(bits))"
        case .rsa(let bits): "KeyOperations(RSA \(bits))"
        }
    }

    /// A mirror that shows only the kind of key, so that `dump()` prints no key material.
    public var customMirror: Mirror { Mirror(self, children: ["key": description], displayStyle: .class) }

    // MARK: - OpenSSL

    private static func md(_ digest: DigestAlgorithm) -> OpaquePointer? {
        switch digest {
        case .sha1: EVP_sha1()
        case .sha224: EVP_sha224()
        case .sha256: EVP_sha256()
        case .sha384: EVP_sha384()
        case .sha512: EVP_sha512()
        }
    }

    deinit {
        idle.withLock { $0.forEach { EVP_PKEY_CTX_free($0.pointer) } }
    }

    /// ECDSA over `input` as the digest, with a context from `idle` (made when none waits).
    private func pooledECDSA(_ input: [UInt8]) throws -> [UInt8] {
        var context = idle.withLock { $0.popLast() }?.pointer
        if context == nil {
            guard let made = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else {
                throw OpenSSL.failure("EVP_PKEY_CTX_new_from_pkey")
            }
            guard EVP_PKEY_sign_init(made) == 1 else {
                EVP_PKEY_CTX_free(made)
                throw OpenSSL.failure("EVP_PKEY_sign_init")
            }
            context = made
        }
        guard let context else { throw OpenSSL.failure("EVP_PKEY_CTX") }
        var signature = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(key.pointer)))
        var length = signature.count
        guard EVP_PKEY_sign(context, &signature, &length, input, input.count) == 1 else {
            EVP_PKEY_CTX_free(context)
            throw DCError(.usage, "the input does not fit the signature", underlying: OpenSSLError.drain())
        }
        idle.withLock { $0.append(PooledContext(pointer: context)) }
        return Array(signature.prefix(length))
    }

    /// `EVP_PKEY_sign` over `input` as it is (the input is the digest, or a DigestInfo).
    private func rawSign(_ input: [UInt8], configure: (OpaquePointer) -> Bool) throws -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_pkey")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_sign_init(context) == 1, configure(context) else {
            throw DCError(.usage, "the signature's parameters do not fit the key", underlying: OpenSSLError.drain())
        }
        var length = 0
        guard EVP_PKEY_sign(context, nil, &length, input, input.count) == 1 else {
            throw DCError(.usage, "the input does not fit the signature", underlying: OpenSSLError.drain())
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_sign(context, &signature, &length, input, input.count) == 1 else {
            throw DCError(.usage, "the input does not fit the signature", underlying: OpenSSLError.drain())
        }
        return Array(signature.prefix(length))
    }

    /// `EVP_DigestSign`: hashes `input` with `digest`, then signs.
    private func digestSign(
        _ input: [UInt8], digest: DigestAlgorithm, configure: (OpaquePointer) -> Bool = { _ in true }
    ) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw OpenSSL.failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        guard EVP_DigestSignInit_ex(context, &keyContext, digest.rawValue, nil, nil, key.pointer, nil) == 1,
            let keyContext, configure(keyContext)
        else {
            throw DCError(.usage, "the signature's parameters do not fit the key", underlying: OpenSSLError.drain())
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, input, input.count) == 1 else {
            throw OpenSSL.failure("EVP_DigestSign")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, input, input.count) == 1 else {
            throw OpenSSL.failure("EVP_DigestSign")
        }
        return Array(signature.prefix(length))
    }

    /// An ECDSA-Sig-Value DER as `r‖s`, each left-padded to `length / 2` bytes.
    private static func rawECDSA(_ der: [UInt8], length: Int) throws -> [UInt8] {
        guard let signature = der.decodeDER({ d2i_ECDSA_SIG(nil, $0, $1) }, free: ECDSA_SIG_free) else {
            throw OpenSSL.failure("d2i_ECDSA_SIG")
        }
        defer { ECDSA_SIG_free(signature) }
        var raw = [UInt8](repeating: 0, count: length)
        let half = Int32(length / 2)
        let done = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(ECDSA_SIG_get0_r(signature), buffer.baseAddress, half) == half
                && BN_bn2binpad(ECDSA_SIG_get0_s(signature), buffer.baseAddress?.advanced(by: Int(half)), half) == half
        }
        guard done else { throw OpenSSL.failure("BN_bn2binpad") }
        return raw
    }

    /// A public key on `curve` (OpenSSL's short name) at `point`; nil when the point is not on it.
    private static func publicKey(curve: String, point: [UInt8]) throws -> PKey? {
        // The curve's parameters, then the point: EC_POINT_oct2point underneath refuses a point
        // that is not on the curve.
        guard !point.isEmpty, let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        var made: OpaquePointer?
        guard EVP_PKEY_paramgen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, curve) == 1,
            EVP_PKEY_paramgen(context, &made) == 1, let made
        else { throw OpenSSL.failure("the curve's parameters") }
        let key = PKey(taking: made)
        guard EVP_PKEY_set1_encoded_public_key(key.pointer, point, point.count) == 1 else { return nil }
        return key
    }
}
