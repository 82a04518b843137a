import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// What travels sealed in the spool file: the credential and everything that binds it to one
/// request. Encoded canonically (see ``encode()``) and sealed with `Sealing`.
public struct DeliveryPayload: Sendable {
    /// The payload format version, written as `"v":1`.
    public static let version = 1

    /// The request id the payload answers: 32 lowercase hex digits, also in the delivery URL.
    public var requestId: RequestID
    /// The id of the client the payload is sealed to.
    public var clientId: ClientID
    /// Whole seconds since 1970.
    public var issuedAt: Date
    /// The key the client MACs its result with (32 random bytes).
    public var resultKey: SecretBytes
    /// The credential delivered, private keys included; its keys redact themselves.
    public var credential: Credential

    /// A payload with these fields; `issuedAt` is rounded down to whole seconds.
    public init(
        requestId: RequestID, clientId: ClientID, issuedAt: Date, resultKey: SecretBytes, credential: Credential
    ) {
        self.requestId = requestId
        self.clientId = clientId
        self.issuedAt = Date(timeIntervalSince1970: issuedAt.timeIntervalSince1970.rounded(.down))
        self.resultKey = resultKey
        self.credential = credential
    }

    /// The canonical encoding: compact JSON, keys in this fixed order, entries ordered by tag,
    /// dates as integer seconds, certificates and keys as standard base64:
    ///
    /// `{"v":1,"requestId":…,"clientId":…,"issuedAt":N,"resultKey":B64,"credential":{"name":…,
    /// "serialNumber":…,"expirationDate":N,"entries":[{"tag":…,"certificate":B64,"privateKey":B64,
    /// "keyHistory":[{"certificate":B64,"privateKey":B64}…]}…]}}`
    ///
    /// Built into one buffer that is wiped, so key material leaves no stray copies.
    public func encode() throws -> SecretBytes {
        var out: [UInt8] = []
        func string(_ value: String) throws {
            out += Array(try JSONEncoder().encode(value))  // JSON string escaping of non-secret text
        }
        func raw(_ text: String) { out += Array(text.utf8) }
        func secret(_ value: SecretBytes) {
            raw("\"")
            value.base64Encoded().withUnsafeBytes { out += $0 }
            raw("\"")
        }
        func pair(_ pair: CertifiedKey) { PairCoding.append(pair, to: &out) }
        raw("{\"v\":\(Self.version),\"requestId\":")
        try string(requestId.text)
        raw(",\"clientId\":")
        try string(clientId.text)
        raw(",\"issuedAt\":\(Int(issuedAt.timeIntervalSince1970)),\"resultKey\":")
        secret(resultKey)
        raw(",\"credential\":{\"name\":")
        try string(credential.name)
        raw(",\"serialNumber\":")
        try string(credential.serialNumber)
        raw(",\"expirationDate\":\(Int(credential.expirationDate.timeIntervalSince1970.rounded(.down))),\"entries\":[")
        for (index, entry) in credential.entries.enumerated() {
            if index > 0 { raw(",") }
            raw("{\"tag\":\"\(entry.tag.rawValue)\",")
            pair(entry.certifiedKey)
            raw(",\"keyHistory\":[")
            for (historyIndex, retired) in entry.keyHistory.enumerated() {
                if historyIndex > 0 { raw(",") }
                raw("{")
                pair(retired)
                raw("}")
            }
            raw("]}")
        }
        raw("]}}")
        return SecretBytes(consuming: &out)
    }

    /// Decodes and checks a payload: the version, the shape, and every certificate and key
    /// through the strict reader (a key must match its certificate), unless `reading` is
    /// ``PairReading/asSealed`` (the client's own sealed copy of a payload that passed).
    public static func decode(_ bytes: SecretBytes, reading: PairReading = .strict) throws -> DeliveryPayload {
        struct Pair: Decodable {
            var certificate: String
            var privateKey: String
        }
        struct Entry: Decodable {
            var tag: String
            var certificate: String
            var privateKey: String
            var keyHistory: [Pair]
        }
        struct WireCredential: Decodable {
            var name: String
            var serialNumber: String
            var expirationDate: Int
            var entries: [Entry]
        }
        struct Wire: Decodable {
            var v: Int
            var requestId: RequestID
            var clientId: ClientID
            var issuedAt: Int
            var resultKey: String
            var credential: WireCredential
        }
        let wire: Wire
        do {
            wire = try bytes.withUnsafeBytes { try JSONDecoder().decode(Wire.self, from: Data($0)) }
        } catch {
            throw DCError(
                .invalid, "the delivered payload is not valid",
                hint: "nothing was installed; ask the provider to send again")
        }
        guard wire.v == version else {
            throw DCError(
                .invalid, "payload version \(wire.v) is not supported",
                hint: "nothing was installed; ask the provider to send again")
        }
        func pair(_ certificate: String, _ key: String, _ place: String) throws -> CertifiedKey {
            try PairCoding.decode(
                certificate: certificate, privateKey: key, place: place,
                hint: "nothing was installed; ask the provider to send again", reading: reading)
        }
        var entries: [CredentialEntry] = []
        for entry in wire.credential.entries {
            guard let tag = CredentialTag(rawValue: entry.tag) else {
                throw DCError(
                    .invalid, "unknown tag in the payload",
                    hint: "nothing was installed; ask the provider to send again")
            }
            let current = try pair(entry.certificate, entry.privateKey, entry.tag)
            let history = try entry.keyHistory.enumerated().map {
                try pair($0.element.certificate, $0.element.privateKey, "\(tag) history \($0.offset)")
            }
            entries.append(
                try CredentialEntry(
                    tag: tag, certificate: current.certificate, privateKey: current.privateKey, keyHistory: history))
        }
        guard var resultKey = Data(base64Encoded: wire.resultKey).map(Array.init), resultKey.count == 32 else {
            throw DCError(
                .invalid, "the payload's result key is not valid",
                hint: "nothing was installed; ask the provider to send again")
        }
        return DeliveryPayload(
            requestId: wire.requestId, clientId: wire.clientId,
            issuedAt: Date(timeIntervalSince1970: TimeInterval(wire.issuedAt)),
            resultKey: SecretBytes(consuming: &resultKey),
            credential: try Credential(
                name: wire.credential.name, serialNumber: wire.credential.serialNumber,
                expirationDate: Date(timeIntervalSince1970: TimeInterval(wire.credential.expirationDate)),
                entries: entries))
    }

    /// The MAC of a result message: HMAC-SHA-256 over `v1|request|status` with the result key.
    public static func resultMAC(key: SecretBytes, request: RequestID, status: ResultStatus) -> String {
        Digests.hex(Digests.hmacSHA256(key: key, message: Array("v1|\(request)|\(status)".utf8)))
    }
}
