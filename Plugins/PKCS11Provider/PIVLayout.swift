import DerivedCredentials

/// One of a PIV card's 24 key slots as OpenSC's PIV driver shows it through PKCS#11: the
/// certificate and its private key share the CKA_ID, and each has a fixed label.
public struct PIVSlot: Sendable, Hashable {
    /// The SP 800-73-4 key reference: 9A, 9C, 9D, 9E, or 82–95 for the retired key management keys.
    public var keyReference: UInt8
    /// The CKA_ID OpenSC gives the slot's certificate and keys.
    public var id: UInt8
    /// The certificate's CKA_LABEL.
    public var certificateLabel: String
    /// The private key's CKA_LABEL.
    public var keyLabel: String
    /// The tag the slot's certificate and key carry in a credential; none for card authentication
    /// (9E), which proves the card, not its holder.
    public var tag: CredentialTag?
}

/// The PIV layout (`layout=piv`): the 24 slots in OpenSC's order.
///
/// OpenSC writes the retired slots' ids as the decimal numbers 05…24 and reads them as hex, so
/// retired key management 1–5 (82–86) are ids 05–09 and 6–20 (87–95) are ids 10–24 (hex): there
/// is no id 0A–0F. The table follows what OpenSC shows, which the tests check on a virtual PIV
/// card.
public enum PIVLayout {
    /// All 24 slots: 9A, 9C, 9D, 9E, then retired 82–95.
    public static let slots: [PIVSlot] =
        [
            PIVSlot(
                keyReference: 0x9A, id: 0x01, certificateLabel: "Certificate for PIV Authentication",
                keyLabel: "PIV AUTH key", tag: .authentication),
            PIVSlot(
                keyReference: 0x9C, id: 0x02, certificateLabel: "Certificate for Digital Signature",
                keyLabel: "SIGN key", tag: .signing),
            PIVSlot(
                keyReference: 0x9D, id: 0x03, certificateLabel: "Certificate for Key Management",
                keyLabel: "KEY MAN key", tag: .encryption),
            PIVSlot(
                keyReference: 0x9E, id: 0x04, certificateLabel: "Certificate for Card Authentication",
                keyLabel: "CARD AUTH key", tag: nil),
        ]
        + (1...20).map { n in
            // "05"…"24" in decimal, read as hex.
            let decimal = 4 + n
            return PIVSlot(
                keyReference: UInt8(0x81 + n), id: UInt8(decimal / 10 * 16 + decimal % 10),
                certificateLabel: "Retired Certificate for Key Management \(n)", keyLabel: "Retired KEY MAN \(n)",
                tag: .escrow)
        }
}
