import DerivedCredentials
import FoundationEssentials

/// What a person wants to see about a certificate. Strings from inside the certificate (subject,
/// issuer) are as found: escape them with `escapingControlCharacters` before printing.
public struct CertificateDetails: Sendable, Codable, Hashable {
    /// The subject name in RFC 2253 form (`CN=Alice,O=Example`), UTF-8.
    public var subject: String
    /// The issuer name in RFC 2253 form, UTF-8.
    public var issuer: String
    /// Hexadecimal, upper case.
    public var serialNumber: String
    /// The start of validity; nil if OpenSSL cannot read the time.
    public var notBefore: Date?
    /// The end of validity; nil if OpenSSL cannot read the time.
    public var notAfter: Date?
    /// `RSA 2048`, `EC P-256`.
    public var keyAlgorithm: String
    /// OpenSSL's long name of the signature algorithm, such as `ecdsa-with-SHA256`.
    public var signatureAlgorithm: String
    /// The keyUsage bits; nil when the extension is absent. Encoded as RFC 5280 names
    /// (`digitalSignature`, …).
    public var keyUsage: KeyUsage?
    /// Extended key usage purposes, in the certificate's order; encoded as dotted OIDs.
    public var extendedKeyUsage: [ExtendedKeyUsage]?
    /// The names `openssl x509 -text` prints for ``extendedKeyUsage``, in the same order
    /// (`TLS Web Client Authentication`; the dotted OID when OpenSSL knows no name).
    public var extendedKeyUsageNames: [String]?
    /// The certificatePolicies policy identifiers, in the certificate's order; nil when the
    /// extension is absent.
    public var certificatePolicies: [CertificatePolicy]?
    /// subjectAltName entries: `email:…`, `URI:…`, `DNS:…`, `UPN:…`, `other:<oid>`.
    public var subjectAlternativeNames: [String]
    /// The subject's commonName, when it has exactly one.
    public var commonName: String?
    /// SHA-256 of the DER, upper-case hex pairs joined by `:`, as `openssl x509 -fingerprint -sha256` prints it.
    public var sha256Fingerprint: String

    /// Reads the details out of `certificate`. Throws `DCError/Code/malformedInput`,
    /// `DCError/Code/notDER` or `DCError/Code/trailingData` unless it is one strict-DER certificate.
    public init(_ certificate: Certificate) throws {
        let x509 = try X509Certificate(certificate)
        subject = x509.subject
        issuer = x509.issuer
        serialNumber = x509.serialNumberHex
        notBefore = x509.notBefore
        notAfter = x509.notAfter
        keyAlgorithm = x509.publicKey?.algorithmDescription ?? "unknown"
        signatureAlgorithm = x509.signature.name
        keyUsage = x509.keyUsage
        extendedKeyUsage = x509.extendedKeyUsage
        extendedKeyUsageNames = extendedKeyUsage?.map(\.name)
        certificatePolicies = x509.certificatePolicies?.map { CertificatePolicy(oid: $0.oid, name: $0.name) }
        subjectAlternativeNames = x509.subjectAlternativeNames
        commonName = x509.commonName
        // The SHA-256 of the DER, as `openssl x509 -fingerprint -sha256` prints it. The bytes are
        // strict DER, so they are what OpenSSL would re-encode and hash.
        sha256Fingerprint = Digests.hex(Digests.sha256(certificate.derBytes), uppercase: true, separator: ":")
    }
}

extension CertificateDetails {
    /// One certificatePolicies policy identifier.
    public struct CertificatePolicy: Sendable, Codable, Hashable {
        /// The dotted OID, such as `2.16.840.1.101.3.2.1.3.13`.
        public var oid: String
        /// The name `openssl x509 -text` prints after `Policy:`: OpenSSL's long name, or the
        /// dotted OID when OpenSSL knows none.
        public var name: String
    }

    /// Every extension of `certificate` as `openssl x509 -text` prints it, through the same
    /// OpenSSL function: the `X509v3 extensions:` title indented by 8, each extension's name (and
    /// `critical`) by 12 and its value by 16, one line each, lines ending in `\n`. Empty when the
    /// certificate has no extension. Text from inside the certificate is as found: escape it
    /// before printing.
    public static func extensionsText(of certificate: Certificate) throws -> String {
        try X509Certificate(certificate).extensionsText
    }
}
