import DerivedCredentials

/// The derived-PIV certificate profile of one tag (FPKI common policy, SP 800-157): the one table
/// that the validator checks against, the test CA issues from and the PEM classifier reads a tag
/// from. Change a rule here and all three follow.
public struct TagProfile: Sendable, Hashable {
    /// The tag this profile is for.
    public let tag: CredentialTag
    /// The keyUsage bits the certificate of an RSA key must have (and the test CA sets).
    public let rsaKeyUsage: KeyUsage
    /// The keyUsage bits the certificate of an EC key must have (and the test CA sets).
    public let ecKeyUsage: KeyUsage
    /// The purposes of the tag: an extendedKeyUsage extension must name at least one of these or
    /// `anyExtendedKeyUsage` (no extension at all is accepted).
    public let purposes: [ExtendedKeyUsage]
    /// The purposes the test CA writes into a certificate for this tag, in this order.
    public let issuedPurposes: [ExtendedKeyUsage]
    /// The EC curves allowed, as OpenSSL's short names.
    public let curves: [String]
    /// The smallest RSA modulus allowed, in bits.
    public let minimumRSABits: Int

    /// keyUsage bits that only a CA may have: an end entity with either is refused.
    public static let caKeyUsage: KeyUsage = [.keyCertSign, .cRLSign]

    /// The keyUsage bits required for a key of this kind (EC or RSA).
    public func requiredKeyUsage(ec: Bool) -> KeyUsage { ec ? ecKeyUsage : rsaKeyUsage }

    /// The keyUsage bits required for (and issued to) a key of `algorithm`.
    public func requiredKeyUsage(for algorithm: KeyAlgorithm) -> KeyUsage { requiredKeyUsage(ec: algorithm.isEC) }

    /// The extendedKeyUsage purposes of which an extension must name one: ``purposes`` and
    /// `anyExtendedKeyUsage` (RFC 5280 4.2.1.12).
    public var allowedExtendedKeyUsage: Set<ExtendedKeyUsage> { Set(purposes + [.anyExtendedKeyUsage]) }

    /// Whether keys of `algorithm` are allowed for this tag.
    public func allows(_ algorithm: KeyAlgorithm) -> Bool {
        switch algorithm {
        case .p256: curves.contains("prime256v1")
        case .p384: curves.contains("secp384r1")
        case .rsa2048: minimumRSABits <= 2048
        case .rsa3072: minimumRSABits <= 3072
        }
    }

    /// The profile of `tag`.
    public static func of(_ tag: CredentialTag) -> TagProfile {
        switch tag {
        case .authentication: authentication
        case .signing: signing
        case .encryption: encryption
        case .escrow: escrow
        }
    }

    static let curves = ["prime256v1", "secp384r1", "secp521r1"]

    /// Authentication (PIV authentication): digitalSignature, for client authentication and logon.
    public static let authentication = TagProfile(
        tag: .authentication, rsaKeyUsage: .digitalSignature, ecKeyUsage: .digitalSignature,
        purposes: [.clientAuth, .pkinitClientAuth, .smartcardLogon],
        issuedPurposes: [.clientAuth, .smartcardLogon, .pkinitClientAuth], curves: curves, minimumRSABits: 2048)

    /// Digital signature: digitalSignature and nonRepudiation, for e-mail and document signing.
    public static let signing = TagProfile(
        tag: .signing, rsaKeyUsage: [.digitalSignature, .nonRepudiation],
        ecKeyUsage: [.digitalSignature, .nonRepudiation],
        purposes: [.emailProtection, .documentSigning, .microsoftDocumentSigning, .adobePDFSigning],
        issuedPurposes: [.emailProtection, .documentSigning], curves: curves, minimumRSABits: 2048)

    /// Key management: keyEncipherment for RSA, keyAgreement for EC, for S/MIME.
    public static let encryption = TagProfile(
        tag: .encryption, rsaKeyUsage: .keyEncipherment, ecKeyUsage: .keyAgreement, purposes: [.emailProtection],
        issuedPurposes: [.emailProtection], curves: curves, minimumRSABits: 2048)

    /// Retired key management keys: the encryption profile (their certificates may be expired).
    public static let escrow = TagProfile(
        tag: .escrow, rsaKeyUsage: .keyEncipherment, ecKeyUsage: .keyAgreement, purposes: [.emailProtection],
        issuedPurposes: [.emailProtection], curves: curves, minimumRSABits: 2048)
}
