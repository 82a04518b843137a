/// RFC 5280 keyUsage bits, with OpenSSL's `KU_*` values as the raw value (what
/// `X509_get_key_usage` returns). Encodes as its ``names``, so JSON output reads as RFC 5280 names.
public struct KeyUsage: OptionSet, Sendable, Hashable, Codable, CustomStringConvertible {
    /// OpenSSL's `KU_*` bits.
    public let rawValue: UInt32

    /// The usage with exactly these `KU_*` bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// digitalSignature (bit 0).
    public static let digitalSignature = KeyUsage(rawValue: 0x0080)
    /// nonRepudiation, also called contentCommitment (bit 1).
    public static let nonRepudiation = KeyUsage(rawValue: 0x0040)
    /// keyEncipherment (bit 2): RSA key transport.
    public static let keyEncipherment = KeyUsage(rawValue: 0x0020)
    /// dataEncipherment (bit 3).
    public static let dataEncipherment = KeyUsage(rawValue: 0x0010)
    /// keyAgreement (bit 4): ECDH.
    public static let keyAgreement = KeyUsage(rawValue: 0x0008)
    /// keyCertSign (bit 5): signing certificates, for CAs.
    public static let keyCertSign = KeyUsage(rawValue: 0x0004)
    /// cRLSign (bit 6): signing CRLs.
    public static let cRLSign = KeyUsage(rawValue: 0x0002)
    /// encipherOnly (bit 7), meaningful with keyAgreement.
    public static let encipherOnly = KeyUsage(rawValue: 0x0001)
    /// decipherOnly (bit 8), meaningful with keyAgreement.
    public static let decipherOnly = KeyUsage(rawValue: 0x8000)

    /// Every named bit with its RFC 5280 name, in bit order.
    static let named: [(KeyUsage, String)] = [
        (.digitalSignature, "digitalSignature"), (.nonRepudiation, "nonRepudiation"),
        (.keyEncipherment, "keyEncipherment"), (.dataEncipherment, "dataEncipherment"),
        (.keyAgreement, "keyAgreement"), (.keyCertSign, "keyCertSign"), (.cRLSign, "cRLSign"),
        (.encipherOnly, "encipherOnly"), (.decipherOnly, "decipherOnly"),
    ]

    /// The RFC 5280 names of the bits set, in bit order; unknown bits are skipped. These are also
    /// the names OpenSSL's configuration syntax takes (`keyUsage=critical,digitalSignature`).
    public var names: [String] { Self.named.filter { contains($0.0) }.map(\.1) }

    /// The names joined by `, `.
    public var description: String { names.joined(separator: ", ") }

    /// The usage with the bits named by RFC 5280 `names`; nil if one is not a keyUsage name.
    public init?(names: [String]) {
        var usage: KeyUsage = []
        for name in names {
            guard let bit = Self.named.first(where: { $0.1 == name })?.0 else { return nil }
            usage.insert(bit)
        }
        self = usage
    }

    /// Decodes the array of names that ``encode(to:)`` writes.
    public init(from decoder: any Decoder) throws {
        let names = try [String](from: decoder)
        guard let usage = KeyUsage(names: names) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not a keyUsage name in \(names)"))
        }
        self = usage
    }

    /// Encodes ``names``, an array of strings.
    public func encode(to encoder: any Encoder) throws {
        try names.encode(to: encoder)
    }
}

/// An extended key usage purpose, as its dotted OID; the purposes of the derived-PIV profiles are
/// named. Encodes as the dotted OID.
public struct ExtendedKeyUsage: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    /// The dotted OID, such as `1.3.6.1.5.5.7.3.2`.
    public let rawValue: String

    /// The purpose with this dotted OID (not checked: any OID a certificate carries is kept).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The dotted OID.
    public var description: String { rawValue }

    // swift-format-ignore: DontRepeatTypeInStaticProperties
    /// anyExtendedKeyUsage: the certificate may be used for any purpose (RFC 5280's name, kept).
    public static let anyExtendedKeyUsage = ExtendedKeyUsage(rawValue: "2.5.29.37.0")
    /// id-kp-clientAuth: TLS client authentication.
    public static let clientAuth = ExtendedKeyUsage(rawValue: "1.3.6.1.5.5.7.3.2")
    /// id-kp-emailProtection: S/MIME.
    public static let emailProtection = ExtendedKeyUsage(rawValue: "1.3.6.1.5.5.7.3.4")
    /// id-pkinit-KPClientAuth (RFC 4556): Kerberos PKINIT logon.
    public static let pkinitClientAuth = ExtendedKeyUsage(rawValue: "1.3.6.1.5.2.3.4")
    /// id-PIV-cardAuth (FIPS 201): a PIV card's card authentication certificate (slot 9E), whose
    /// key signs without a PIN. It proves the card is present, not that its holder is.
    public static let pivCardAuthentication = ExtendedKeyUsage(rawValue: "2.16.840.1.101.3.6.8")
    /// Microsoft smart-card logon.
    public static let smartcardLogon = ExtendedKeyUsage(rawValue: "1.3.6.1.4.1.311.20.2.2")
    /// RFC 9336 id-kp-documentSigning.
    public static let documentSigning = ExtendedKeyUsage(rawValue: "1.3.6.1.5.5.7.3.36")
    /// Microsoft document signing.
    public static let microsoftDocumentSigning = ExtendedKeyUsage(rawValue: "1.3.6.1.4.1.311.10.3.12")
    /// Adobe PDF signing (Adobe Authentic Documents Trust).
    public static let adobePDFSigning = ExtendedKeyUsage(rawValue: "1.2.840.113583.1.1.5")
}
