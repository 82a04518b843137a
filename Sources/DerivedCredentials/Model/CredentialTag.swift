/// The role a certificate and key play in a derived credential.
///
/// The wire names (`rawValue`) are stable lowercase strings and part of every format this toolkit
/// writes. A credential holds each tag at most once.
public enum CredentialTag: String, CaseIterable, Codable, Sendable, Comparable, CustomStringConvertible {
    /// PIV authentication (slot 9A): TLS client authentication, smart-card logon.
    case authentication
    /// Digital signature (slot 9C): S/MIME and document signing.
    case signing
    /// Key management (slot 9D): S/MIME decryption of current mail.
    case encryption
    /// Escrowed key management: the current decryption key plus retired ones (slots 82–95).
    case escrow

    /// The wire name, such as `escrow`.
    public var description: String { rawValue }

    /// Parses a wire name, case-insensitively.
    public init?(wireName: some StringProtocol) {
        self.init(rawValue: wireName.lowercased())
    }

    /// Orders tags as they are declared: authentication, signing, encryption, escrow.
    public static func < (lhs: CredentialTag, rhs: CredentialTag) -> Bool {
        lhs.order < rhs.order
    }

    /// The position in the declaration.
    private var order: Int {
        switch self {
        case .authentication: 0
        case .signing: 1
        case .encryption: 2
        case .escrow: 3
        }
    }
}
