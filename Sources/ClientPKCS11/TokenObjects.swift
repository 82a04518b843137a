internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient

/// What a key may do, from its tag and its certificate's key usage: an authentication or signing
/// key signs and never decrypts; an encryption or escrow key (and every key of the history)
/// decrypts or agrees on keys, and signs only when its certificate's key usage allows it.
struct KeyPermissions: Equatable {
    var sign: Bool
    var decrypt: Bool
    var derive: Bool

    init(tag: CredentialTag?, keyUsage: KeyUsage?, kind: PublicKeyParts.Kind) {
        let isRSA = kind.isRSA
        switch tag {
        case .authentication?, .signing?:
            sign = true
            decrypt = false
            derive = false
        case .encryption?, .escrow?, nil:
            sign = keyUsage.map { !$0.isDisjoint(with: [.digitalSignature, .nonRepudiation]) } ?? false
            decrypt = isRSA && (keyUsage.map { !$0.isDisjoint(with: [.keyEncipherment, .dataEncipherment]) } ?? true)
            derive = !isRSA && (keyUsage.map { $0.contains(.keyAgreement) } ?? true)
        }
    }
}

/// One certificate and its key pair as the token shows them: a certificate object, a public-key
/// object and a private-key object sharing one `CKA_ID`.
struct TokenKeyPair {
    /// The tag, or nil for a key of the escrow history.
    var tag: CredentialTag?
    /// For a key of the history: its place, 1 for the newest.
    var historyNumber: Int?
    var id: [UInt8]
    var certificate: Certificate
    var names: CertificateNames
    var publicParts: PublicKeyParts
    var permissions: KeyPermissions
    /// Whether the certificate is outside its validity period now (an expired authentication or
    /// signing key no longer signs; an expired encryption key still opens old mail).
    var expired: Bool
    /// The private key: only while the token is logged in.
    var key: KeyOperations?

    /// The PIV-style names programs show, then our tag's name.
    var labels: (certificate: String, publicKey: String, privateKey: String) {
        let (certificate, key): (String, String)
        switch tag {
        case .authentication?: (certificate, key) = ("Certificate for PIV Authentication", "PIV AUTH")
        case .signing?: (certificate, key) = ("Certificate for Digital Signature", "SIGN")
        case .encryption?: (certificate, key) = ("Certificate for Key Management", "KEY MAN")
        case .escrow?: (certificate, key) = ("Certificate for Escrowed Key Management", "ESCROW KEY MAN")
        case nil:
            let number = historyNumber ?? 0
            (certificate, key) = ("Retired Certificate for Key Management \(number)", "RETIRED KEY MAN \(number)")
        }
        let suffix = tag.map { " (\($0.rawValue))" } ?? " (escrow history \(historyNumber ?? 0))"
        return (certificate + suffix, key + " pubkey" + suffix, key + " key" + suffix)
    }

    /// The `CKA_ID` of a tag: the PIV key references' order (01 authentication, 02 signing, 03
    /// key management), 04 for escrow, and 05 on for the history (PIV's retired key-management
    /// slots, newest first).
    static func id(tag: CredentialTag?, historyNumber: Int?) -> [UInt8] {
        switch tag {
        case .authentication?: [0x01]
        case .signing?: [0x02]
        case .encryption?: [0x03]
        case .escrow?: [0x04]
        case nil: [UInt8(truncatingIfNeeded: 4 + (historyNumber ?? 0))]
        }
    }
}

/// The kinds of object the token holds.
enum ObjectKind: Equatable {
    case certificate
    case publicKey
    case privateKey
}

/// The token's view of the installed credential: its key pairs, in the order of the tags, then
/// the escrow history. Object handles are stable for one credential: pair `n` has handles
/// `3n+1` (certificate), `3n+2` (public key), `3n+3` (private key).
struct TokenContents {
    var pairs: [TokenKeyPair]
    /// The delivery the credential came with, for telling a renewal apart.
    var sequence: UInt64?

    init(credential: Credential, history: [CertifiedKey], sequence: UInt64?, now: Date) throws {
        self.sequence = sequence
        let lifetime = try CredentialLifetime(credential, now: now, window: 0)
        let expiredTags = Set(lifetime.unusable.filter { $0.historyIndex == nil }.map(\.tag))
        var pairs: [TokenKeyPair] = []
        for entry in credential.entries.sorted(by: { $0.tag < $1.tag }) {
            pairs.append(
                try Self.pair(
                    tag: entry.tag, historyNumber: nil, certificate: entry.certificate,
                    expired: expiredTags.contains(entry.tag)))
        }
        for (index, old) in history.prefix(CredentialEntry.maximumKeyHistory).enumerated() {
            pairs.append(
                try Self.pair(tag: nil, historyNumber: index + 1, certificate: old.certificate, expired: false))
        }
        self.pairs = pairs
    }

    private static func pair(
        tag: CredentialTag?, historyNumber: Int?, certificate: Certificate, expired: Bool
    ) throws -> TokenKeyPair {
        let parts = try PublicKeyParts(certificate)
        let details = try CertificateDetails(certificate)
        return TokenKeyPair(
            tag: tag, historyNumber: historyNumber, id: TokenKeyPair.id(tag: tag, historyNumber: historyNumber),
            certificate: certificate, names: try CertificateNames(certificate), publicParts: parts,
            permissions: KeyPermissions(tag: tag, keyUsage: details.keyUsage, kind: parts.kind), expired: expired)
    }

    /// Loads the private keys of `credential` and `history` into the pairs (on login).
    mutating func loadKeys(credential: Credential, history: [CertifiedKey]) throws {
        KeyOperations.useLockedMemory()
        var keys: [PrivateKey] = credential.entries.sorted(by: { $0.tag < $1.tag }).map(\.privateKey)
        keys += history.prefix(CredentialEntry.maximumKeyHistory).map(\.privateKey)
        for index in pairs.indices where index < keys.count {
            pairs[index].key = try KeyOperations(keys[index])
        }
    }

    /// Drops every private key (on logout, lock, finalize).
    mutating func dropKeys() {
        for index in pairs.indices { pairs[index].key = nil }
    }

    /// The pair and kind behind a handle, if it names one.
    func object(_ handle: CK_OBJECT_HANDLE) -> (pair: TokenKeyPair, kind: ObjectKind)? {
        guard handle >= 1 else { return nil }
        let index = Int((handle - 1) / 3)
        guard index < pairs.count else { return nil }
        let kind: ObjectKind = [.certificate, .publicKey, .privateKey][Int((handle - 1) % 3)]
        return (pairs[index], kind)
    }

    /// Every handle, in order.
    var handles: [CK_OBJECT_HANDLE] { (0..<pairs.count * 3).map { CK_OBJECT_HANDLE($0 + 1) } }
}
