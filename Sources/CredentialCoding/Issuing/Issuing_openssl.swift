internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Generates private keys with OpenSSL.
public enum KeyGeneration {
    /// A new private key of `algorithm`, as PKCS#8. Throws `DCError/Code/cryptoFailure` if OpenSSL fails.
    public static func generate(_ algorithm: KeyAlgorithm) throws -> PrivateKey {
        try generatePKey(algorithm).pkcs8()
    }

    static func generatePKey(_ algorithm: KeyAlgorithm) throws -> PKey {
        OpenSSL.ensureInitialized()
        let name = algorithm.isEC ? "EC" : "RSA"
        guard let context = EVP_PKEY_CTX_new_from_name(nil, name, nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_name(\(name))")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw OpenSSL.failure("EVP_PKEY_keygen_init") }
        let configured: Int32
        switch algorithm {
        case .p256: configured = EVP_PKEY_CTX_set_group_name(context, "P-256")
        case .p384: configured = EVP_PKEY_CTX_set_group_name(context, "P-384")
        case .rsa2048: configured = EVP_PKEY_CTX_set_rsa_keygen_bits(context, 2048)
        case .rsa3072: configured = EVP_PKEY_CTX_set_rsa_keygen_bits(context, 3072)
        }
        guard configured == 1 else { throw OpenSSL.failure("configuring \(algorithm) key generation") }
        var key: OpaquePointer?
        guard EVP_PKEY_generate(context, &key) == 1, let key else { throw OpenSSL.failure("EVP_PKEY_generate") }
        return PKey(taking: key)
    }
}

/// A signing authority: a key and, unless it signs itself, its certificate.
public struct CertificateSigner: Sendable {
    /// The signer's certificate, whose subject becomes the issuer; nil for a self-signing root.
    public let certificate: Certificate?
    /// The signing key; it redacts itself.
    public let privateKey: PrivateKey
    /// The signing key and issuer certificate, parsed once for all the certificates this signer issues.
    private let parsed: Parsed

    /// Holds the parsed C objects. After init they are only read: signing with an `EVP_PKEY` and
    /// reading an `X509`'s name and extensions are safe from several threads in OpenSSL 3 (its
    /// caches take their own locks), so sharing is safe.
    private final class Parsed: @unchecked Sendable {
        let key: PKey
        let issuer: X509Certificate?
        init(key: PKey, issuer: X509Certificate?) {
            self.key = key
            self.issuer = issuer
        }
    }

    /// A CA with a certificate.
    public init(certificate: Certificate, privateKey: PrivateKey) throws {
        let material = try KeyMaterial.paired(certificates: [certificate], privateKey: privateKey, source: "signer")
        self.certificate = material.certificates[0]
        self.privateKey = privateKey
        parsed = Parsed(key: try Self.decode(privateKey, "the signing key"), issuer: try X509Certificate(certificate))
    }

    /// A key that signs its own certificate (a root).
    public init(selfSigningWith privateKey: PrivateKey) throws {
        self.certificate = nil
        self.privateKey = privateKey
        parsed = Parsed(key: try Self.decode(privateKey, "the signing key"), issuer: nil)
    }

    /// Issues a certificate for the public half of `subjectKey` with `profile`.
    public func issue(_ profile: CertificateProfile, for subjectKey: PrivateKey) throws -> Certificate {
        try CertificateBuilding.build(
            profile, subjectKey: try Self.decode(subjectKey, "the subject key"), issuer: parsed.issuer,
            signer: parsed.key)
    }

    /// Issues a certificate for a decoded public (or private) key.
    func issue(_ profile: CertificateProfile, for subjectKey: PKey) throws -> Certificate {
        try CertificateBuilding.build(profile, subjectKey: subjectKey, issuer: parsed.issuer, signer: parsed.key)
    }

    /// Generates a key with `algorithm` and issues a certificate for it: the way to mint new
    /// credentials (the key is encoded once, for the result, and never parsed back).
    public func issueWithNewKey(_ profile: CertificateProfile, algorithm: KeyAlgorithm) throws -> CertifiedKey {
        let key = try KeyGeneration.generatePKey(algorithm)
        let certificate = try CertificateBuilding.build(
            profile, subjectKey: key, issuer: parsed.issuer, signer: parsed.key)
        return CertifiedKey(certificate: certificate, privateKey: try key.pkcs8())
    }

    /// The parsed signing key, for the other things a CA signs (CRLs, OCSP responses).
    var signingKey: PKey { parsed.key }
    /// The parsed certificate, nil for a self-signing root.
    var issuerCertificate: X509Certificate? { parsed.issuer }

    private static func decode(_ key: PrivateKey, _ what: String) throws -> PKey {
        guard let decoded = PKey.from(key) else {
            throw DCError(.malformedInput, "\(what) cannot be read")
        }
        return decoded
    }
}

package enum CertificateBuilding {
    static func build(_ profile: CertificateProfile, subjectKey: PKey, issuer: X509Certificate?, signer: PKey) throws
        -> Certificate
    {
        guard profile.notBefore < profile.notAfter else {
            throw DCError(.usage, "notBefore must be earlier than notAfter")
        }
        for url in profile.ocspURLs + profile.crlURLs where !RevocationURL.isAcceptable(url) {
            throw DCError(
                .usage, "'\(url.escapingControlCharacters)' is not an http:// URL for revocation",
                hint: "give http://host[:port][/path] (no spaces or commas)")
        }
        guard let x509 = X509_new() else { throw OpenSSL.failure("X509_new") }
        let certificate = X509Certificate(taking: x509)
        guard X509_set_version(x509, 2) == 1 else { throw OpenSSL.failure("X509_set_version") }
        try setSerial(profile.serialNumber, x509)
        let name = try makeName(profile.subject)
        defer { X509_NAME_free(name) }
        guard X509_set_subject_name(x509, name) == 1,
            X509_set_issuer_name(x509, issuer.map { X509_get_subject_name($0.pointer) } ?? name) == 1
        else { throw OpenSSL.failure("setting names") }
        guard ASN1_TIME_set(X509_getm_notBefore(x509), time_t(profile.notBefore.timeIntervalSince1970)) != nil,
            ASN1_TIME_set(X509_getm_notAfter(x509), time_t(profile.notAfter.timeIntervalSince1970)) != nil
        else { throw OpenSSL.failure("setting validity") }
        try setPublicKey(subjectKey, x509)

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.pointer ?? x509, x509, nil, nil, 0)
        for (name, value) in extensions(profile) {
            guard let ext = X509V3_EXT_nconf(nil, &context, name, value) else {
                throw DCError(
                    .usage, "cannot make the \(name) extension from '\(value.escapingControlCharacters)'",
                    underlying: OpenSSLError.drain())
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw OpenSSL.failure("X509_add_ext") }
        }
        if !profile.policies.isEmpty {
            let oids = profile.policies.map { strdup($0) }
            defer { oids.forEach { free($0) } }
            let added = oids.map { UnsafePointer($0) }.withUnsafeBufferPointer {
                dc_add_certificate_policies(x509, $0.baseAddress, Int32($0.count))
            }
            guard added == 1 else {
                throw DCError(
                    .usage, "invalid certificate policy OIDs \(profile.policies)", underlying: OpenSSLError.drain())
            }
        }
        guard X509_sign(x509, signer.pointer, digest(for: signer)) > 0 else { throw OpenSSL.failure("X509_sign") }
        return Certificate(derBytes: try certificate.der())
    }

    /// The digest that matches the signer's strength (ECDSA P-384 with SHA-384, as FIPS 186 pairs
    /// them); SHA-256 otherwise. Certificates, CRLs and OCSP responses use it alike.
    static func digest(for signer: PKey) -> OpaquePointer? {
        switch signer.curveName {
        case "secp384r1": EVP_sha384()
        case "secp521r1": EVP_sha512()
        default: EVP_sha256()
        }
    }

    /// The extensions in OpenSSL's configuration syntax, in a fixed order.
    static func extensions(_ profile: CertificateProfile) -> [(String, String)] {
        var list: [(String, String)] = []
        if profile.isCA {
            list.append(("basicConstraints", "critical,CA:TRUE" + (profile.pathLength.map { ",pathlen:\($0)" } ?? "")))
        } else {
            list.append(("basicConstraints", "CA:FALSE"))
        }
        if !profile.keyUsage.isEmpty {
            list.append(("keyUsage", "critical," + profile.keyUsage.names.joined(separator: ",")))
        }
        if !profile.extendedKeyUsage.isEmpty {
            list.append(("extendedKeyUsage", profile.extendedKeyUsage.map(\.rawValue).joined(separator: ",")))
        }
        list.append(("subjectKeyIdentifier", "hash"))
        list.append(("authorityKeyIdentifier", "keyid:always"))
        if !profile.subjectAlternativeNames.isEmpty {
            let names = profile.subjectAlternativeNames.map { name -> String in
                switch name {
                case .uri(let uri): "URI:" + uri
                case .email(let email): "email:" + email
                case .userPrincipalName(let upn): "otherName:1.3.6.1.4.1.311.20.2.3;UTF8:" + upn
                }
            }
            list.append(("subjectAltName", names.joined(separator: ",")))
        }
        if !profile.ocspURLs.isEmpty {
            list.append(("authorityInfoAccess", profile.ocspURLs.map { "OCSP;URI:" + $0 }.joined(separator: ",")))
        }
        if !profile.crlURLs.isEmpty {
            list.append(("crlDistributionPoints", profile.crlURLs.map { "URI:" + $0 }.joined(separator: ",")))
        }
        return list
    }

    /// Fills in the SubjectPublicKeyInfo from the key's parameters. `X509_set_pubkey` does the
    /// same through OpenSSL 3's encoder and decoder (≈0.35 ms per certificate here); setting the
    /// algorithm and the key bits directly costs ≈0.01 ms. Issued certificates are checked against
    /// `i2d_PUBKEY` of their key by the validator's key-match check in the tests.
    static func setPublicKey(_ key: PKey, _ x509: OpaquePointer) throws {
        guard let publicKey = X509_get_X509_PUBKEY(x509) else { throw OpenSSL.failure("X509_get_X509_PUBKEY") }
        let algorithm: Int32
        let parameterType: Int32
        let parameter: UnsafeMutableRawPointer?
        var bits: [UInt8]
        switch key.kind {
        case .ec(let curve, _):
            guard let curve, case let nid = OBJ_sn2nid(curve), nid != NID_undef else {
                throw DCError(.unsupportedAlgorithm, "the EC key has no named curve")
            }
            algorithm = NID_X9_62_id_ecPublicKey
            parameterType = V_ASN1_OBJECT
            parameter = UnsafeMutableRawPointer(OBJ_nid2obj(nid))
            bits = try key.encodedPublicPoint()
        case .rsa:
            // RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
            func integer(_ name: String) throws -> [UInt8] {
                var number: OpaquePointer?
                guard EVP_PKEY_get_bn_param(key.pointer, name, &number) == 1, let number else {
                    throw OpenSSL.failure("reading the RSA public key")
                }
                defer { BN_free(number) }
                var magnitude = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
                BN_bn2bin(number, &magnitude)
                if magnitude.first.map({ $0 & 0x80 != 0 }) ?? true { magnitude.insert(0, at: 0) }
                return DER.wrap(0x02, magnitude)
            }
            algorithm = NID_rsaEncryption
            parameterType = V_ASN1_NULL
            parameter = nil
            bits = DER.wrap(0x30, try integer("n") + integer("e"))
        case .other(let name):
            throw DCError(.unsupportedAlgorithm, "cannot issue certificates for \(name) keys")
        }
        // X509_PUBKEY_set0_param takes ownership of the key bytes, which must come from OpenSSL's allocator.
        guard let owned = CRYPTO_malloc(bits.count, #fileID, #line) else { throw OpenSSL.failure("CRYPTO_malloc") }
        bits.withUnsafeBytes { UnsafeMutableRawBufferPointer(start: owned, count: $0.count).copyMemory(from: $0) }
        guard
            X509_PUBKEY_set0_param(
                publicKey, OBJ_nid2obj(algorithm), parameterType, parameter,
                owned.assumingMemoryBound(to: UInt8.self), Int32(bits.count)) == 1
        else {
            CRYPTO_free(owned, #fileID, #line)
            throw OpenSSL.failure("X509_PUBKEY_set0_param")
        }
    }

    static func setSerial(_ serial: [UInt8]?, _ x509: OpaquePointer) throws {
        var bytes = serial ?? (0..<16).map { _ in UInt8.random(in: 0...255) }
        if serial == nil {
            bytes[0] &= 0x7F
            bytes[0] |= 0x01
        }  // positive, 16 significant bytes
        guard !bytes.isEmpty, bytes.count <= 20 else { throw DCError(.usage, "a serial number has 1 to 20 bytes") }
        guard let number = BN_bin2bn(bytes, Int32(bytes.count), nil) else { throw OpenSSL.failure("BN_bin2bn") }
        defer { BN_free(number) }
        guard let integer = BN_to_ASN1_INTEGER(number, nil) else { throw OpenSSL.failure("BN_to_ASN1_INTEGER") }
        defer { ASN1_INTEGER_free(integer) }
        guard X509_set_serialNumber(x509, integer) == 1 else { throw OpenSSL.failure("X509_set_serialNumber") }
    }

    package static func makeName(_ name: DistinguishedName) throws -> OpaquePointer {
        if let der = name.der {
            try DER.validate(der, what: "distinguished name")
            guard let decoded = der.decodeDER({ d2i_X509_NAME(nil, $0, $1) }, free: X509_NAME_free) else {
                throw DCError(.malformedInput, "not a distinguished name", underlying: OpenSSLError.drain())
            }
            return decoded
        }
        guard let made = X509_NAME_new() else { throw OpenSSL.failure("X509_NAME_new") }
        for attribute in name.attributes {
            guard
                X509_NAME_add_entry_by_txt(made, attribute.type, MBSTRING_UTF8, attribute.value, -1, -1, 0) == 1
            else {
                X509_NAME_free(made)
                throw DCError(
                    .usage,
                    "cannot use the name attribute \(attribute.type)=\(attribute.value.escapingControlCharacters)",
                    underlying: OpenSSLError.drain())
            }
        }
        return made
    }
}

extension CertificateDetails {
    /// The subject Name's DER encoding, to copy it into another certificate.
    public static func subjectDER(of certificate: Certificate) throws -> [UInt8] {
        let x509 = try X509Certificate(certificate)
        guard let der = encodeDER({ i2d_X509_NAME(X509_get_subject_name(x509.pointer), $0) }) else {
            throw OpenSSL.failure("i2d_X509_NAME")
        }
        return der
    }
}
