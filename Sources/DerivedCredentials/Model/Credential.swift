import FoundationEssentials

/// A certificate with its private key.
public struct CertifiedKey: Sendable, Equatable {
    /// The certificate, DER-encoded.
    public let certificate: Certificate
    /// The private key that belongs to ``certificate``; it redacts itself.
    public let privateKey: PrivateKey

    /// Pairs `certificate` with `privateKey`; that they match is checked by validation, not here.
    public init(certificate: Certificate, privateKey: PrivateKey) {
        self.certificate = certificate
        self.privateKey = privateKey
    }
}

/// One tagged certificate and private key of a credential.
///
/// Only the ``CredentialTag/escrow`` entry may carry a key history: the retired encryption pairs,
/// newest first, at most ``CredentialEntry/maximumKeyHistory`` (the PIV retired key-management
/// slots 0x82–0x95).
public struct CredentialEntry: Sendable, Equatable {
    /// PIV has twenty retired key-management slots.
    public static let maximumKeyHistory = 20

    /// The role of this entry; unique within a credential.
    public let tag: CredentialTag
    /// The current certificate for ``tag``.
    public let certificate: Certificate
    /// The current private key for ``tag``; it redacts itself.
    public let privateKey: PrivateKey
    /// Retired encryption pairs, newest first; empty unless ``tag`` is escrow.
    public let keyHistory: [CertifiedKey]

    /// An entry for `tag`. Throws ``DCError/Code/keyHistoryNotAllowed`` if a non-escrow entry has a
    /// key history, ``DCError/Code/keyHistoryTooLong`` above ``maximumKeyHistory`` pairs.
    public init(
        tag: CredentialTag,
        certificate: Certificate,
        privateKey: PrivateKey,
        keyHistory: [CertifiedKey] = []
    ) throws {
        if !keyHistory.isEmpty && tag != .escrow {
            throw DCError(
                .keyHistoryNotAllowed, "only the escrow entry may carry a key history", subject: tag.rawValue)
        }
        if keyHistory.count > Self.maximumKeyHistory {
            throw DCError(
                .keyHistoryTooLong,
                "key history holds \(keyHistory.count) pairs; at most \(Self.maximumKeyHistory) are allowed",
                subject: tag.rawValue,
                hint: "drop the oldest retired keys")
        }
        self.tag = tag
        self.certificate = certificate
        self.privateKey = privateKey
        self.keyHistory = keyHistory
    }

    /// The current pair.
    public var certifiedKey: CertifiedKey { CertifiedKey(certificate: certificate, privateKey: privateKey) }
}

/// A derived credential: a name, a serial number, an expiration date and one entry per tag.
///
/// A value of this type is always well formed: ``init(name:serialNumber:expirationDate:entries:)``
/// enforces the AppConnect rules (non-empty name and serial, a date, at least one entry, no
/// repeated tag). Whether the certificates fit their tags is a separate question, answered by a
/// ``Verdict`` from validation.
public struct Credential: Sendable, Equatable {
    /// The credential's display name; never empty or only whitespace.
    public let name: String
    /// The credential's serial number, as text; never empty or only whitespace.
    public let serialNumber: String
    /// When the credential stops being valid.
    public let expirationDate: Date
    /// The entries, ordered by tag.
    public let entries: [CredentialEntry]

    /// A credential, with `entries` sorted by tag. Throws ``DCError/Code/emptyName``,
    /// ``DCError/Code/emptySerialNumber``, ``DCError/Code/missingExpirationDate`` (a nil date),
    /// ``DCError/Code/noEntries`` or ``DCError/Code/duplicateTag``.
    public init(name: String, serialNumber: String, expirationDate: Date?, entries: [CredentialEntry]) throws {
        guard !name.trimmingWhitespaceAndNewlines().isEmpty else {
            throw DCError(.emptyName, "the credential name is empty", hint: "give the credential a name")
        }
        guard !serialNumber.trimmingWhitespaceAndNewlines().isEmpty else {
            throw DCError(.emptySerialNumber, "the credential serial number is empty", subject: name)
        }
        guard let expirationDate else {
            throw DCError(.missingExpirationDate, "the credential has no expiration date", subject: name)
        }
        guard !entries.isEmpty else {
            throw DCError(.noEntries, "the credential has no entries", subject: name, hint: "add at least one tag")
        }
        var seen = Set<CredentialTag>()
        for entry in entries where !seen.insert(entry.tag).inserted {
            throw DCError(
                .duplicateTag, "tag '\(entry.tag)' appears more than once", subject: name,
                hint: "each tag may be used once per credential")
        }
        self.name = name
        self.serialNumber = serialNumber
        self.expirationDate = expirationDate
        self.entries = entries.sorted { $0.tag < $1.tag }
    }

    /// The entry for `tag`, or nil if the credential has none.
    public subscript(tag: CredentialTag) -> CredentialEntry? {
        entries.first { $0.tag == tag }
    }

    /// The tags present, in tag order.
    public var tags: [CredentialTag] { entries.map(\.tag) }
}
