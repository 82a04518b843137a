import DerivedCredentials
import Foundation

/// Key algorithms the toolkit generates (the derived-PIV profiles allow these).
public enum KeyAlgorithm: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case p256, p384, rsa2048, rsa3072

    public var description: String {
        switch self {
        case .p256: "EC P-256"
        case .p384: "EC P-384"
        case .rsa2048: "RSA 2048"
        case .rsa3072: "RSA 3072"
        }
    }

    public var isEC: Bool { self == .p256 || self == .p384 }
}

/// An X.500 name as an ordered list of attributes, most significant first (`O=…`, then `CN=…`).
public struct DistinguishedName: Sendable, Hashable, Codable, CustomStringConvertible {
    public struct Attribute: Sendable, Hashable, Codable {
        /// A short name OpenSSL knows (`C`, `O`, `OU`, `CN`, `serialNumber`, `UID`, …) or a dotted OID.
        public var type: String
        public var value: String

        public init(_ type: String, _ value: String) {
            self.type = type
            self.value = value
        }
    }

    public var attributes: [Attribute]
    /// The DER encoding, when the name was copied from a certificate (kept byte for byte).
    public var der: [UInt8]?

    public init(_ attributes: [Attribute]) {
        self.attributes = attributes
        self.der = nil
    }

    /// A name copied exactly from another certificate's DER-encoded Name.
    public init(der: [UInt8]) {
        self.attributes = []
        self.der = der
    }

    public var description: String {
        der != nil
            ? "<DER name, \(der!.count) bytes>" : attributes.map { "\($0.type)=\($0.value)" }.joined(separator: ",")
    }
}

/// A subjectAltName entry.
public enum SubjectAlternativeName: Sendable, Hashable, Codable {
    case uri(String)
    case email(String)
    /// A Microsoft user principal name (otherName 1.3.6.1.4.1.311.20.2.3), used for smart-card logon.
    case userPrincipalName(String)
}

/// Everything that goes into a certificate apart from its keys.
public struct CertificateProfile: Sendable, Hashable {
    public var subject: DistinguishedName
    /// 1–20 bytes, positive; nil gives 16 random bytes.
    public var serialNumber: [UInt8]?
    public var notBefore: Date
    public var notAfter: Date
    /// `KeyUsage` bits; the extension is critical. Zero leaves it out.
    public var keyUsage: UInt32
    /// Extended key usage OIDs; empty leaves the extension out.
    public var extendedKeyUsage: [String]
    /// basicConstraints cA (critical for CAs, non-critical `CA:FALSE` otherwise).
    public var isCA: Bool
    public var pathLength: Int?
    public var subjectAlternativeNames: [SubjectAlternativeName]
    /// certificatePolicies OIDs.
    public var policies: [String]

    public init(
        subject: DistinguishedName, serialNumber: [UInt8]? = nil, notBefore: Date, notAfter: Date, keyUsage: UInt32,
        extendedKeyUsage: [String] = [], isCA: Bool = false, pathLength: Int? = nil,
        subjectAlternativeNames: [SubjectAlternativeName] = [], policies: [String] = []
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
    }
}
