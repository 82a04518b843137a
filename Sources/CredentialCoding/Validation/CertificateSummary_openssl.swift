internal import COpenSSL
import DerivedCredentials

/// What a listing shows of a certificate, its subject and its key's algorithm, read without
/// decoding the key.
///
/// OpenSSL 3.0 decodes a certificate's public key while it parses the certificate, through a
/// decoder it builds afresh for each one: about 0.1 ms, most of what reading a certificate costs,
/// and a token listing of 50 certificates paid it 50 times for two fields. This reads the
/// subject `Name` and the SubjectPublicKeyInfo's `AlgorithmIdentifier` (and, for RSA, the
/// modulus, for its length) with OpenSSL's own parsers, from a certificate whose DER is checked
/// as strictly as ``CertificateDetails`` checks it. Keys on explicit curves and algorithms other
/// than RSA and EC are read the long way. ``subject`` and ``keyAlgorithm`` are written as
/// ``CertificateDetails`` writes them (`CN=…,O=…`; `EC P-256`, `RSA 2048`).
public struct CertificateSummary: Sendable, Hashable {
    /// The subject, RFC 2253, as ``CertificateDetails/subject``.
    public var subject: String
    /// The public key's algorithm, as ``CertificateDetails/keyAlgorithm``.
    public var keyAlgorithm: String

    /// Reads the summary. Throws `DCError/Code/malformedInput`, `DCError/Code/notDER` or
    /// `DCError/Code/trailingData` unless the bytes are one strict-DER certificate structure.
    public init(_ certificate: Certificate) throws {
        let der = certificate.derBytes
        let malformed = DCError(.malformedInput, "not an X.509 certificate")
        let top = try DER.validate(der, what: "certificate")
        let parts = try DER.children(der, of: top)
        guard top.identifier == 0x30, parts.count == 3, parts[0].identifier == 0x30 else { throw malformed }
        // TBSCertificate: [0] version, serialNumber, signature, issuer, validity, subject,
        // subjectPublicKeyInfo, then the optional unique identifiers and extensions.
        var fields = try DER.children(der, of: parts[0])
        if fields.first?.identifier == 0xA0 { fields.removeFirst() }
        guard fields.count >= 6, fields[4].identifier == 0x30, fields[5].identifier == 0x30 else { throw malformed }
        guard let name = Array(der[fields[4].range]).decodeDER({ d2i_X509_NAME(nil, $0, $1) }, free: X509_NAME_free)
        else {
            throw DCError(.malformedInput, "not an X.509 certificate", underlying: OpenSSLError.drain())
        }
        defer { X509_NAME_free(name) }
        subject = X509Certificate.format(name)
        keyAlgorithm =
            try Self.keyAlgorithm(der, fields[5]) ?? X509Certificate(der: der).publicKey?.algorithmDescription
            ?? "unknown"
    }

    /// The algorithm of the SubjectPublicKeyInfo at `node` of `der`, or nil when it takes
    /// decoding the key to say (explicit curve parameters, other algorithms).
    private static func keyAlgorithm(_ der: [UInt8], _ node: DER.Node) throws -> String? {
        let parts = try DER.children(der, of: node)
        guard parts.count == 2, parts[0].identifier == 0x30, parts[1].identifier == 0x03 else { return nil }
        guard
            let algorithm = Array(der[parts[0].range]).decodeDER({ d2i_X509_ALGOR(nil, $0, $1) }, free: X509_ALGOR_free)
        else {
            OpenSSLError.clear()
            return nil
        }
        defer { X509_ALGOR_free(algorithm) }
        var object: OpaquePointer?
        var parameterType: Int32 = 0
        var parameter: UnsafeRawPointer?
        X509_ALGOR_get0(&object, &parameterType, &parameter, algorithm)
        switch OBJ_obj2nid(object) {
        case NID_X9_62_id_ecPublicKey:
            guard parameterType == V_ASN1_OBJECT, let parameter else { return nil }
            let nid = OBJ_obj2nid(OpaquePointer(parameter))
            guard nid != NID_undef, let curve = OBJ_nid2sn(nid) else { return nil }
            return "EC " + PKey.nistName(String(cString: curve))
        case NID_rsaEncryption:
            // The BIT STRING (no unused bits) holds RSAPublicKey: SEQUENCE { modulus, exponent }.
            let bits = parts[1].content
            guard bits.count > 1, der[bits.lowerBound] == 0 else { return nil }
            let key = Array(der[(bits.lowerBound + 1)..<bits.upperBound])
            guard let keyTop = try? DER.validate(key, what: "RSA public key"),
                let numbers = try? DER.children(key, of: keyTop), numbers.count == 2, numbers[0].identifier == 0x02,
                let modulus = Array(key[numbers[0].range]).decodeDER(
                    { d2i_ASN1_INTEGER(nil, $0, $1) }, free: ASN1_INTEGER_free)
            else {
                OpenSSLError.clear()
                return nil
            }
            defer { ASN1_INTEGER_free(modulus) }
            guard let number = ASN1_INTEGER_to_BN(modulus, nil), BN_is_negative(number) == 0 else {
                OpenSSLError.clear()
                return nil
            }
            defer { BN_free(number) }
            return "RSA \(BN_num_bits(number))"
        default:
            return nil
        }
    }
}
