import Foundation

/// A certificate with its private key.
public struct CertifiedKey: Sendable, Equatable {
    public let certificate: Certificate
    public let privateKey: PrivateKey

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

    public let tag: CredentialTag
    public let certificate: Certificate
    public let privateKey: PrivateKey
    /// Retired encryption pairs, newest first; empty unless ``tag`` is escrow.
    public let keyHistory: [CertifiedKey]

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
    public let name: String
    public let serialNumber: String
    public let expirationDate: Date
    /// The entries, ordered by tag.
    public let entries: [CredentialEntry]

    public init(name: String, serialNumber: String, expirationDate: Date?, entries: [CredentialEntry]) throws {
        guard !name.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw DCError(.emptyName, "the credential name is empty", hint: "give the credential a name")
        }
        guard !serialNumber.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
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

    public subscript(tag: CredentialTag) -> CredentialEntry? {
        entries.first { $0.tag == tag }
    }

    public var tags: [CredentialTag] { entries.map(\.tag) }
}
