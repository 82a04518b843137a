import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The provider's record of its sends: one 0600 JSON file per request id in a 0700 directory
/// (`$XDG_STATE_HOME/dcprovision/requests`). It holds the result key, so a result callback can be
/// authenticated, and the outcome, so a request id completes once and a replayed result is refused.
public struct RequestLedger: Sendable {
    /// One request, as stored in `<request>.json`.
    public struct Record: Codable, Sendable {
        /// The request id: 32 lowercase hex digits.
        public var request: RequestID
        /// The scheme of the client the request belongs to.
        public var clientScheme: URLScheme
        /// The credential sent; empty while a client's request is being answered (reserved).
        public var credentialName: String
        /// When the request was recorded; the time limit counts from here.
        public var created: Date
        /// base64 of the result MAC key; nil while reserved, removed once the result is in.
        public var resultKey: String?
        /// nil while pending; then `ok` or the client's error status, or ``notSent`` when the
        /// provider could not issue or send what a client asked for.
        public var outcome: ResultStatus?
        /// When the result was accepted; nil while pending.
        public var completed: Date?
        /// The MAC of the accepted result, to recognise the same result sent again (a retry).
        public var acceptedMAC: String?
        /// A delivery sealed and spooled while the client was locked, waiting for its
        /// availability notification.
        public var queuedURL: String?
        /// True when a client's `new` made a card source log in unattended (the rate limit counts these).
        public var cardRequest: Bool?
        /// The serial numbers of the credential's certificates, recorded when it is sent; once the
        /// client confirms, they become its ``Holdings/Holding``.
        public var certificateSerials: [String]?

        /// Where the send stands, as `status` shows it: the outcome once there is one, else
        /// `queued` while its delivery waits for the client, else `pending`.
        public var state: String { outcome?.text ?? (queuedURL != nil ? "queued" : "pending") }

        /// A record of a new request, pending: no outcome, no completion, nothing queued.
        public init(
            request: RequestID, clientScheme: URLScheme, credentialName: String, created: Date, resultKey: String?
        ) {
            self.request = request
            self.clientScheme = clientScheme
            self.credentialName = credentialName
            self.created = created
            self.resultKey = resultKey
        }
    }

    /// The directory holding one `<request>.json` per request; created (0700) on the first write.
    public let directory: String
    /// How long a request id stays valid.
    public var timeLimit: TimeInterval = 600

    /// A ledger kept in `directory`; nothing is read or created until it is used.
    public init(directory: String) {
        self.directory = directory
    }

    /// The file that holds the record of `request`.
    public func path(_ request: RequestID) -> String { directory + "/\(request).json" }

    /// The outcome of a client's request the provider could not answer (issuing or sending failed).
    public static let notSent = ResultStatus.notSent

    /// Records a new request id; refuses one the ledger already has.
    public func create(_ record: Record) throws {
        do {
            try write(record, replacing: false)
        } catch let error as DCError where error.code == .outputExists {
            throw Self.replayed(record.request)
        }
    }

    /// Records the request id a client's `new` carried, before anything is issued for it: once,
    /// atomically (two handlers racing on the same URL cannot both win). A request id the ledger
    /// already has — a replayed `new`, or an id of the provider's own sends — is refused
    /// (`refusedMessage`), so a replay issues nothing.
    public func reserve(
        request: RequestID, clientScheme: URLScheme, cardRequest: Bool = false, now: Date = Date()
    ) throws {
        guard !FileManager.default.fileExists(atPath: path(request)) else { throw Self.replayed(request) }
        var record = Record(
            request: request, clientScheme: clientScheme, credentialName: "", created: now, resultKey: nil)
        record.cardRequest = cardRequest ? true : nil
        try create(record)
    }

    static func replayed(_ request: RequestID) -> DCError {
        DCError(
            .refusedMessage, "a replayed request: this request id was used already", subject: request.text,
            remedy: .askWithNewRequest)
    }

    /// Marks a reserved request the provider could not answer, so that it is not left pending.
    public func abandon(_ request: RequestID) {
        guard var record = record(request), record.outcome == nil, record.resultKey == nil else { return }
        record.outcome = Self.notSent
        try? write(record, replacing: true)
    }

    /// Writes `record` to its file, all or nothing; `replacing` lets it overwrite the record of
    /// the same request.
    package func write(_ record: Record, replacing: Bool) throws {
        try RecordFile.write(record, named: "\(record.request).json", in: directory, replacing: replacing)
    }

    /// The record of `request`, or nil when there is none or it cannot be decoded.
    public func record(_ request: RequestID) -> Record? {
        guard let data = FileManager.default.contents(atPath: path(request)) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(Record.self, from: data)
    }

    /// The record of `request`, which was just written: an error, not nil, when it has gone
    /// (`fileNotFound`), cannot be read (`ioError`) or cannot be decoded (`invalid`).
    package func existingRecord(_ request: RequestID) throws -> Record {
        let file = path(request)
        guard let data = FileManager.default.contents(atPath: file) else {
            guard FileManager.default.fileExists(atPath: file) else {
                throw DCError(.fileNotFound, "the request's record is gone", subject: file)
            }
            throw DCError(.ioError, "cannot read the request's record", subject: file)
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard let record = try? decoder.decode(Record.self, from: data) else {
            throw DCError(.invalid, "the request's record is damaged", subject: file)
        }
        return record
    }

    /// Accepts a result callback once: the MAC must verify with the request's key, within the
    /// time limit, for a request that has no outcome yet. The identical result again (a client
    /// retrying after a crash) is acknowledged without any change; any other is refused.
    public func complete(request: RequestID, status: ResultStatus, mac: String, now: Date = Date()) throws -> Record {
        let hint = "results come only from the client the credential was sealed to; nothing was changed"
        guard var record = record(request) else {
            throw DCError(.refusedMessage, "a result for an unknown request", subject: request.text, hint: hint)
        }
        if let outcome = record.outcome {
            guard outcome == status, let accepted = record.acceptedMAC,
                Digests.constantTimeEqual(Array(accepted.utf8), Array(mac.utf8))
            else {
                throw DCError(
                    .refusedMessage, "a replayed result: the request is already complete", subject: request.text,
                    hint: hint)
            }
            return record
        }
        guard let keyText = record.resultKey, var key = Data(base64Encoded: keyText).map(Array.init) else {
            throw DCError(
                .refusedMessage, "a result for a request that was never sent", subject: request.text, hint: hint)
        }
        let secret = SecretBytes(consuming: &key)
        let expected = DeliveryPayload.resultMAC(key: secret, request: request, status: status)
        guard Digests.constantTimeEqual(Array(expected.utf8), Array(mac.utf8)) else {
            throw DCError(
                .refusedMessage, "the result's MAC does not verify (forged or altered)", subject: request.text,
                hint: hint)
        }
        guard now.timeIntervalSince(record.created) <= timeLimit else {
            throw DCError(
                .refusedMessage, "the result came after the request's time limit", subject: request.text,
                remedy: .sendAgain)
        }
        record.outcome = status
        record.completed = now
        record.acceptedMAC = mac
        record.resultKey = nil
        try write(record, replacing: true)
        return record
    }

    /// Marks a queued delivery as sent (or dropped), so it is not sent twice.
    public func dequeue(_ request: RequestID) throws {
        guard var record = record(request), record.queuedURL != nil else { return }
        record.queuedURL = nil
        try write(record, replacing: true)
    }

    /// How long a finished record is kept for `dcprovision status`.
    public var retention: TimeInterval = 7 * 86400
    /// The most records kept; the oldest finished ones go first.
    public var capacity = 1000

    /// Removes finished records older than ``retention``, and the oldest finished ones beyond
    /// ``capacity``. Records still within the time limit stay whatever the bound (they are what
    /// refuses a replayed request id); pending ones past it are the caller's to close first.
    /// Returns the request ids removed.
    @discardableResult
    public func prune(now: Date = Date()) -> [RequestID] {
        prune(recent(limit: Int.max), now: now)
    }

    /// ``prune(now:)`` over `records`, newest first, as ``recent(limit:)`` read them.
    @discardableResult
    package func prune(_ records: [Record], now: Date) -> [RequestID] {
        var removed: [RequestID] = []
        for (index, record) in records.enumerated() where record.outcome != nil {
            let age = now.timeIntervalSince(record.created)
            // Twice the time limit: a `new` is accepted up to the limit either side of its own time.
            guard age > 2 * timeLimit, age > retention || index >= capacity else { continue }
            unlink(path(record.request))
            removed.append(record.request)
        }
        return removed
    }

    /// Recent records, newest first.
    public func recent(limit: Int = 20) -> [Record] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { RequestID(validating: String($0.dropLast(5))) }
            .compactMap { record($0) }
            .sorted { $0.created > $1.created }.prefix(limit).map { $0 }
    }
}
