import DerivedCredentials
import FoundationEssentials

/// Key algorithms the toolkit generates (the derived-PIV profiles allow these).
public enum KeyAlgorithm: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// The NIST curves P-256 and P-384, and RSA with 2048- or 3072-bit moduli (exponent 65537).
    case p256, p384, rsa2048, rsa3072

    /// The name people read, such as `EC P-256` or `RSA 3072`.
    public var description: String {
        switch self {
        case .p256: "EC P-256"
        case .p384: "EC P-384"
        case .rsa2048: "RSA 2048"
        case .rsa3072: "RSA 3072"
        }
    }

    /// Whether this is an elliptic-curve algorithm (P-256, P-384) rather than RSA.
    public var isEC: Bool { self == .p256 || self == .p384 }
}

/// An X.500 name as an ordered list of attributes, most significant first (`O=…`, then `CN=…`).
public struct DistinguishedName: Sendable, Hashable, Codable, CustomStringConvertible {
    /// One `type=value` pair of a name.
    public struct Attribute: Sendable, Hashable, Codable {
        /// A short name OpenSSL knows (`C`, `O`, `OU`, `CN`, `serialNumber`, `UID`, …) or a dotted OID.
        public var type: String
        /// The value, as UTF-8 text.
        public var value: String

        /// An attribute of `type` (a short name or dotted OID) with `value`.
        public init(_ type: String, _ value: String) {
            self.type = type
            self.value = value
        }
    }

    /// The attributes, most significant first; empty when the name is held as ``der``.
    public var attributes: [Attribute]
    /// The DER encoding, when the name was copied from a certificate (kept byte for byte).
    public var der: [UInt8]?

    /// A name built from `attributes`, most significant first.
    public init(_ attributes: [Attribute]) {
        self.attributes = attributes
        self.der = nil
    }

    /// A name copied exactly from another certificate's DER-encoded Name.
    public init(der: [UInt8]) {
        self.attributes = []
        self.der = der
    }

    /// `O=Example,CN=Alice` for attributes, or the size only for a name held as DER.
    public var description: String {
        der.map { "<DER name, \($0.count) bytes>" }
            ?? attributes.map { "\($0.type)=\($0.value)" }.joined(separator: ",")
    }
}

/// A subjectAltName entry.
public enum SubjectAlternativeName: Sendable, Hashable, Codable {
    /// A uniformResourceIdentifier, such as `urn:uuid:…`.
    case uri(String)
    /// An rfc822Name: an email address.
    case email(String)
    /// A Microsoft user principal name (otherName 1.3.6.1.4.1.311.20.2.3), used for smart-card logon.
    case userPrincipalName(String)
}

/// Everything that goes into a certificate apart from its keys.
public struct CertificateProfile: Sendable, Hashable {
    /// The subject name; the issuer's name comes from the signer.
    public var subject: DistinguishedName
    /// 1–20 bytes, positive; nil gives 16 random bytes.
    public var serialNumber: [UInt8]?
    /// The start of validity, to the second.
    public var notBefore: Date
    /// The end of validity, to the second; issuing throws `DCError/Code/usage` unless it is after ``notBefore``.
    public var notAfter: Date
    /// The keyUsage bits; the extension is critical. Empty leaves it out.
    public var keyUsage: KeyUsage
    /// Extended key usage purposes, in order; empty leaves the extension out.
    public var extendedKeyUsage: [ExtendedKeyUsage]
    /// basicConstraints cA (critical for CAs, non-critical `CA:FALSE` otherwise).
    public var isCA: Bool
    /// basicConstraints pathLenConstraint for a CA; nil leaves it unlimited. Ignored unless ``isCA``.
    public var pathLength: Int?
    /// subjectAltName entries, in order; empty leaves the extension out.
    public var subjectAlternativeNames: [SubjectAlternativeName]
    /// certificatePolicies OIDs.
    public var policies: [String]
    /// OCSP responder URLs for authorityInfoAccess (`http://` only); empty leaves it out.
    public var ocspURLs: [String]
    /// CRL distribution point URLs (`http://` only); empty leaves the extension out.
    public var crlURLs: [String]

    /// A profile with these fields; nothing is checked until a signer issues it.
    public init(
        subject: DistinguishedName, serialNumber: [UInt8]? = nil, notBefore: Date, notAfter: Date, keyUsage: KeyUsage,
        extendedKeyUsage: [ExtendedKeyUsage] = [], isCA: Bool = false, pathLength: Int? = nil,
        subjectAlternativeNames: [SubjectAlternativeName] = [], policies: [String] = [], ocspURLs: [String] = [],
        crlURLs: [String] = []
    ) {
        self.subject = subject
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.keyUsage = keyUsage
        self.extendedKeyUsage = extendedKeyUsage
        self.isCA = isCA
        self.pathLength = pathLength
        self.subjectAlternativeNames = subjectAlternativeNames
        self.policies = policies
        self.ocspURLs = ocspURLs
        self.crlURLs = crlURLs
    }
}
