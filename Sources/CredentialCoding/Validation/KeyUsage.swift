/// RFC 5280 keyUsage bits, as OpenSSL reports them (`KU_*`).
public enum KeyUsage {
    /// digitalSignature (bit 0).
    public static let digitalSignature: UInt32 = 0x0080
    /// nonRepudiation, also called contentCommitment (bit 1).
    public static let nonRepudiation: UInt32 = 0x0040
    /// keyEncipherment (bit 2): RSA key transport.
    public static let keyEncipherment: UInt32 = 0x0020
    /// dataEncipherment (bit 3).
    public static let dataEncipherment: UInt32 = 0x0010
    /// keyAgreement (bit 4): ECDH.
    public static let keyAgreement: UInt32 = 0x0008
    /// keyCertSign (bit 5): signing certificates, for CAs.
    public static let keyCertSign: UInt32 = 0x0004
    /// cRLSign (bit 6): signing CRLs.
    public static let cRLSign: UInt32 = 0x0002
    /// encipherOnly (bit 7), meaningful with keyAgreement.
    public static let encipherOnly: UInt32 = 0x0001
    /// decipherOnly (bit 8), meaningful with keyAgreement.
    public static let decipherOnly: UInt32 = 0x8000

    static let all: [(UInt32, String)] = [
        (digitalSignature, "digitalSignature"), (nonRepudiation, "nonRepudiation"),
        (keyEncipherment, "keyEncipherment"), (dataEncipherment, "dataEncipherment"),
        (keyAgreement, "keyAgreement"), (keyCertSign, "keyCertSign"), (cRLSign, "cRLSign"),
        (encipherOnly, "encipherOnly"), (decipherOnly, "decipherOnly"),
    ]

    /// The RFC 5280 names of the bits set in `bits`, in bit order; unknown bits are skipped.
    public static func names(_ bits: UInt32) -> [String] {
        all.filter { bits & $0.0 != 0 }.map(\.1)
    }
}

/// Extended key usage OIDs that occur in the derived-PIV profiles.
public enum ExtendedKeyUsage {
    /// anyExtendedKeyUsage: the certificate may be used for any purpose.
    public static let anyExtendedKeyUsage = "2.5.29.37.0"
    /// id-kp-clientAuth: TLS client authentication.
    public static let clientAuth = "1.3.6.1.5.5.7.3.2"
    /// id-kp-emailProtection: S/MIME.
    public static let emailProtection = "1.3.6.1.5.5.7.3.4"
    /// id-pkinit-KPClientAuth (RFC 4556): Kerberos PKINIT logon.
    public static let pkinitClientAuth = "1.3.6.1.5.2.3.4"
    /// Microsoft smart-card logon.
    public static let smartcardLogon = "1.3.6.1.4.1.311.20.2.2"
    /// RFC 9336 id-kp-documentSigning.
    public static let documentSigning = "1.3.6.1.5.5.7.3.36"
    /// Microsoft document signing.
    public static let microsoftDocumentSigning = "1.3.6.1.4.1.311.10.3.12"
    /// Adobe PDF signing (Adobe Authentic Documents Trust).
    public static let adobePDFSigning = "1.2.840.113583.1.1.5"
}
