internal import CPKCS11Types
import CredentialCoding
import DerivedCredentials
import FoundationEssentials
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
    /// The certificate's validity period (a bound the certificate lacks is open).
    var notBefore: Date?
    var notAfter: Date?
    /// The private key: only while the token is logged in, and only once it was used (decoded
    /// from the store at its first use, ``TokenContents/loadKey(at:from:)``).
    var key: KeyOperations?

    /// Whether the certificate is within its validity period at `date`.
    func isValid(at date: Date) -> Bool {
        (notBefore.map { $0 <= date } ?? true) && (notAfter.map { date <= $0 } ?? true)
    }

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
    /// The credential's own expiration date: past it, no key of the token signs.
    var expirationDate: Date

    init(credential: Credential, history: [CertifiedKey], sequence: UInt64?) throws {
        self.sequence = sequence
        expirationDate = credential.expirationDate
        pairs = try Self.certifiedKeys(credential: credential, history: history).enumerated().map { index, entry in
            let historyNumber = entry.tag == nil ? index + 1 - credential.entries.count : nil
            // One parse per certificate: OpenSSL 3 decodes its public key through a decoder chain.
            let summary = try TokenCertificate(entry.certificate)
            return TokenKeyPair(
                tag: entry.tag, historyNumber: historyNumber,
                id: TokenKeyPair.id(tag: entry.tag, historyNumber: historyNumber), certificate: entry.certificate,
                names: summary.names, publicParts: summary.publicParts,
                permissions: KeyPermissions(tag: entry.tag, keyUsage: summary.keyUsage, kind: summary.publicParts.kind),
                notBefore: summary.notBefore, notAfter: summary.notAfter)
        }
    }

    /// The certificates and keys the token shows, in its order: the credential's by tag, then the
    /// history (at most ``CredentialEntry/maximumKeyHistory``, newest first). The one home of
    /// that order, for the pairs and for their keys.
    private static func certifiedKeys(credential: Credential, history: [CertifiedKey])
        -> [(tag: CredentialTag?, certificate: Certificate, privateKey: PrivateKey)]
    {
        credential.entries.sorted(by: { $0.tag < $1.tag }).map { ($0.tag, $0.certificate, $0.privateKey) }
            + history.prefix(CredentialEntry.maximumKeyHistory).map { (nil, $0.certificate, $0.privateKey) }
    }

    /// Decodes the private key of pair `index` from `credential` and `history` (read again from
    /// the store at the key's first use: the token holds no key it was not asked to use). A key
    /// whose public half is not its certificate's is refused (`CKR_GENERAL_ERROR`), whatever the
    /// store says: a key never signs under another key's certificate. So is a store whose pairs
    /// are no longer the token's (a renewal in between).
    mutating func loadKey(at index: Int, credential: Credential, history: [CertifiedKey]) throws {
        let keys = Self.certifiedKeys(credential: credential, history: history)
        guard keys.count == pairs.count, pairs.indices.contains(index),
            keys[index].certificate == pairs[index].certificate
        else { throw ReturnValue(CKR_GENERAL_ERROR) }
        KeyOperations.useLockedMemory()
        let key = try KeyOperations(keys[index].privateKey)
        guard key.isCertified(by: pairs[index].certificate) else { throw ReturnValue(CKR_GENERAL_ERROR) }
        pairs[index].key = key
    }

    /// Drops every private key (on logout, lock, finalize).
    mutating func dropKeys() {
        for index in pairs.indices { pairs[index].key = nil }
    }

    /// The pair and kind behind a handle, if it names one.
    func object(_ handle: CK_OBJECT_HANDLE) -> (pair: TokenKeyPair, kind: ObjectKind)? {
        pairIndex(handle).map { (pairs[$0.index], $0.kind) }
    }

    /// The index of the pair behind a handle and the kind it names, if it names one.
    func pairIndex(_ handle: CK_OBJECT_HANDLE) -> (index: Int, kind: ObjectKind)? {
        guard handle >= 1 else { return nil }
        let index = Int((handle - 1) / 3)
        guard index < pairs.count else { return nil }
        let kind: ObjectKind = [.certificate, .publicKey, .privateKey][Int((handle - 1) % 3)]
        return (index, kind)
    }

    /// Every handle, in order.
    var handles: [CK_OBJECT_HANDLE] { (0..<pairs.count * 3).map { CK_OBJECT_HANDLE($0 + 1) } }
}
