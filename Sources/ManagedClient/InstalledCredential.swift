import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import SystemSupport

/// The installed credential as the client's store keeps it: the payload exactly as it was
/// delivered, sealed at rest under the store key (`store/credential`), the number of the delivery
/// that brought it (`store/credential.sequence`) and the key history the client keeps
/// (`store/key-history`, sealed; see ``KeyContinuity``). The three are replaced together, all or
/// nothing; this type is the only code that reads or writes them.
struct InstalledCredential {
    /// The store directory, `$XDG_DATA_HOME/dcclient/store`.
    let store: String

    private var payloadPath: String { store + "/credential" }
    private var sequencePath: String { store + "/credential.sequence" }
    private var keyHistoryPath: String { store + "/key-history" }
    /// The three files ``replace(with:sequence:keyHistory:key:)`` writes, for a command to keep.
    var files: [String] { [payloadPath, sequencePath, keyHistoryPath] }

    /// The delivered payload, opened with the store key; nil when nothing is installed.
    func payload(key: SecretBytes) throws -> SecretBytes? {
        guard let data = FileManager.default.contents(atPath: payloadPath) else { return nil }
        return try AtRest.open(Array(data), key: key, context: "credential")
    }

    /// The installed credential, decoded as `reading` says; nil when nothing is installed.
    func credential(key: SecretBytes, reading: PairReading = .strict) throws -> Credential? {
        try payload(key: key).map { try DeliveryPayload.decode($0, reading: reading).credential }
    }

    /// The number of the delivery that brought the installed credential; nil when nothing is
    /// installed (or it came before delivery numbers did).
    var sequence: UInt64? {
        FileManager.default.contents(atPath: sequencePath).flatMap {
            UInt64(String(decoding: $0, as: UTF8.self).trimmingWhitespaceAndNewlines())
        }
    }

    /// The retired encryption pairs the client keeps, newest first; nil when nothing is installed
    /// or the credential was installed before the client kept a history (its escrow entry's
    /// history is then the whole history).
    func keyHistory(key: SecretBytes, reading: PairReading = .strict) throws -> [CertifiedKey]? {
        guard let data = FileManager.default.contents(atPath: keyHistoryPath) else { return nil }
        return try KeyHistoryCoding.decode(
            try AtRest.open(Array(data), key: key, context: "key-history"), reading: reading)
    }

    /// Replaces the installed credential, its number and the key history with `payload`,
    /// `sequence` and `keyHistory` (the payload and history sealed under `key`), in one
    /// all-or-nothing commit.
    func replace(with payload: SecretBytes, sequence: UInt64, keyHistory: [CertifiedKey], key: SecretBytes) throws {
        var files = AtomicFileSet(directory: store)
        try files.add("credential", .bytes(try AtRest.seal(payload, key: key, context: "credential")), mode: 0o600)
        try files.add("credential.sequence", .bytes(Array("\(sequence)\n".utf8)), mode: 0o600)
        try files.add(
            "key-history",
            .bytes(try AtRest.seal(KeyHistoryCoding.encode(keyHistory), key: key, context: "key-history")),
            mode: 0o600)
        try files.commit(replacingExisting: true)
    }
}
