import CredentialCoding
import DerivedCredentials
import Foundation

/// The provider's record of its sends: one 0600 JSON file per request id in a 0700 directory
/// (`$XDG_STATE_HOME/dcprovision/requests`). It holds the result key, so a result callback can be
/// authenticated, and the outcome, so a request id completes once and a replayed result is refused.
public struct RequestLedger: Sendable {
    public struct Record: Codable, Sendable {
        public var request: String
        public var clientScheme: String
        public var credentialName: String
        public var created: Date
        /// base64 of the result MAC key; removed once the result is in.
        public var resultKey: String?
        /// nil while pending; then `ok` or the client's error status.
        public var outcome: String?
        public var completed: Date?
        /// The MAC of the accepted result, to recognise the same result sent again (a retry).
        public var acceptedMAC: String?
        /// A delivery sealed and spooled while the client was locked, waiting for its
        /// availability notification.
        public var queuedURL: String?

        public init(request: String, clientScheme: String, credentialName: String, created: Date, resultKey: String?) {
            self.request = request
            self.clientScheme = clientScheme
            self.credentialName = credentialName
            self.created = created
            self.resultKey = resultKey
        }
    }

    public let directory: String
    /// How long a request id stays valid.
    public var timeLimit: TimeInterval = 600

    public init(directory: String) {
        self.directory = directory
    }

    func path(_ request: String) -> String { directory + "/\(request).json" }

    public func create(_ record: Record) throws {
        try write(record, replacing: false)
    }

    func write(_ record: Record, replacing: Bool) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        try AtomicFileSet.ensureDirectory(directory)
        var files = AtomicFileSet(directory: directory)
        try files.add("\(record.request).json", .bytes(Array(try encoder.encode(record))), mode: 0o600)
        try files.commit(replacingExisting: replacing)
    }

    public func record(_ request: String) -> Record? {
        guard let data = FileManager.default.contents(atPath: path(request)) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(Record.self, from: data)
    }

    /// Accepts a result callback once: the MAC must verify with the request's key, within the
    /// time limit, for a request that has no outcome yet. The identical result again (a client
    /// retrying after a crash) is acknowledged without any change; any other is refused.
    public func complete(request: String, status: String, mac: String, now: Date = Date()) throws -> Record {
        guard var record = record(request) else {
            throw DCError(.invalid, "a result for an unknown request", subject: request)
        }
        if let outcome = record.outcome {
            guard outcome == status, let accepted = record.acceptedMAC,
                Digests.constantTimeEqual(Array(accepted.utf8), Array(mac.utf8))
            else { throw DCError(.invalid, "a replayed result: the request is already complete", subject: request) }
            return record
        }
        guard let keyText = record.resultKey, var key = Data(base64Encoded: keyText).map(Array.init) else {
            throw DCError(.invalid, "the request has no result key", subject: request)
        }
        let secret = SecretBytes(consuming: &key)
        let expected = DeliveryPayload.resultMAC(key: secret, request: request, status: status)
        guard Digests.constantTimeEqual(Array(expected.utf8), Array(mac.utf8)) else {
            throw DCError(.invalid, "the result's MAC does not verify (forged or altered)", subject: request)
        }
        guard now.timeIntervalSince(record.created) <= timeLimit else {
            throw DCError(.invalid, "the result came after the request's time limit", subject: request)
        }
        record.outcome = status
        record.completed = now
        record.acceptedMAC = mac
        record.resultKey = nil
        try write(record, replacing: true)
        return record
    }

    /// Marks a queued delivery as sent (or dropped), so it is not sent twice.
    public func dequeue(_ request: String) throws {
        guard var record = record(request), record.queuedURL != nil else { return }
        record.queuedURL = nil
        try write(record, replacing: true)
    }

    /// Recent records, newest first.
    public func recent(limit: Int = 20) -> [Record] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { record(String($0.dropLast(5))) }
            .sorted { $0.created > $1.created }.prefix(limit).map { $0 }
    }
}
