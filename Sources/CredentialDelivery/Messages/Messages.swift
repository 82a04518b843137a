import CredentialCoding
import DerivedCredentials

// The eight messages of the conversation. Each is declared once here: its stored properties are
// its parameters in URL order, its `CodingKeys` their names on the wire, their types their rules
// (a group of fields declared elsewhere, the policy, is its own fields in place);
// `URLMessageCoder` derives the URL, the strict parser and the signed text from that. PROTOCOL.md
// in docs/ describes the conversation they make.

/// `<provider-scheme>:/new?v=2&client=ID&request=HEX32&time=N&sig=HEX128`: a client asks for a
/// credential under a fresh request id; signed with the client's key, which the provider pinned
/// when they paired.
public struct CredentialRequest: SignedURLMessage {
    /// `new`.
    public static let path = "new"
    /// The asking client.
    public var client: ClientID
    /// The id the answer will carry; chosen by the client, single-use.
    public var request: RequestID
    /// When it was asked, in seconds since 1970.
    public var time: Int64
    /// The client's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, request, time
        case signature = "sig"
    }

    /// An unsigned request; ``SignedURLMessage/signed(with:scheme:)`` signs it.
    public init(client: ClientID, request: RequestID, time: Int64, signature: SignatureHex? = nil) {
        (self.client, self.request, self.time, self.signature) = (client, request, time, signature)
    }
}

/// `<provider-scheme>:/available?v=2&client=ID&time=N&sig=HEX128`: the client's secure services
/// became available, so queued deliveries may go now; signed like a ``CredentialRequest``.
public struct AvailabilityNotice: SignedURLMessage {
    /// `available`.
    public static let path = "available"
    /// The client.
    public var client: ClientID
    /// When, in seconds since 1970; each notice is later than the last.
    public var time: Int64
    /// The client's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, time
        case signature = "sig"
    }

    /// An unsigned notice.
    public init(client: ClientID, time: Int64, signature: SignatureHex? = nil) {
        (self.client, self.time, self.signature) = (client, time, signature)
    }
}

/// `<client-scheme>:/deliver?v=2&client=ID&request=HEX32&digest=HEX64&seq=N&sig=HEX128`: the
/// sealed payload is in the client's spool as `<request>.cms`, with this SHA-256; signed with the
/// provider's key, which the client pinned; `seq` grows with every delivery to the client.
public struct DeliveryNotice: SignedURLMessage {
    /// `deliver`.
    public static let path = "deliver"
    /// The receiving client.
    public var client: ClientID
    /// The request this answers.
    public var request: RequestID
    /// The SHA-256 of the sealed payload in the spool.
    public var digest: SHA256Hex
    /// The delivery's number for this client; grows with every delivery.
    public var sequence: UInt64
    /// The provider's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, request, digest
        case sequence = "seq"
        case signature = "sig"
    }

    /// An unsigned notice.
    public init(
        client: ClientID, request: RequestID, digest: SHA256Hex, sequence: UInt64, signature: SignatureHex? = nil
    ) {
        (self.client, self.request, self.digest, self.sequence, self.signature) =
            (client, request, digest, sequence, signature)
    }
}

/// `<provider-scheme>:/result?v=2&request=HEX32&status=STATUS&mac=HEX64`: the client's answer to
/// a delivery, authenticated with the key sealed in the payload (``DeliveryPayload/resultMAC(key:request:status:)``).
public struct DeliveryResult: URLMessage {
    /// `result`.
    public static let path = "result"
    /// The request the delivery answered.
    public var request: RequestID
    /// `ok`, or why not (``ResultStatus``): lowercase letters, digits and `-`.
    public var status: ResultStatus
    /// The HMAC-SHA-256 over the request and status.
    public var mac: SHA256Hex

    /// A result with its MAC.
    public init(request: RequestID, status: ResultStatus, mac: SHA256Hex) {
        (self.request, self.status, self.mac) = (request, status, mac)
    }
}

/// `<client-scheme>:/policy?v=2&client=ID&seq=N&state=STATE&autolock=SECONDS&message=B64[&tokenlogin=secure-services]&time=N&sig=HEX128`:
/// the provider's policy for the client, signed with the provider's key; `seq` grows with every
/// change. The policy's fields are parameters of their own, in place, as ``ClientPolicy``
/// declares them (its fields are declared there only); `tokenlogin` is written only when it is
/// not the passphrase, so that policies without it read as they always did.
public struct PolicyNotice: SignedURLMessage {
    /// `policy`.
    public static let path = "policy"
    /// The client the policy is for.
    public var client: ClientID
    /// The policy: `seq`, `state`, `autolock`, `message` and `tokenlogin`.
    public var policy: ClientPolicy
    /// When the provider signed it, in seconds since 1970.
    public var time: Int64
    /// The provider's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, policy, time
        case signature = "sig"
    }

    /// The unsigned notice of `policy` for `client`, at `time`.
    public init(client: ClientID, policy: ClientPolicy, time: Int64, signature: SignatureHex? = nil) {
        (self.client, self.policy, self.time, self.signature) = (client, policy, time, signature)
    }
}

/// `<provider-scheme>:/ack?v=2&client=ID&seq=N&of=SUBJECT&policy=STATE&message=B64&time=N&sig=HEX128`:
/// the app's acknowledgement of policy `seq` (`of=auth` or `of=fileio`): applied, error or
/// unsupported, with its message; signed like a ``CredentialRequest``.
public struct Acknowledgement: SignedURLMessage {
    /// `ack`.
    public static let path = "ack"
    /// The acknowledging client.
    public var client: ClientID
    /// The number of the policy acknowledged.
    public var sequence: UInt64
    /// Which policy it answers.
    public var subject: PolicySubject
    /// How the app handled it.
    public var state: PolicyState
    /// Why, for the operator; may be empty.
    public var message: String
    /// When, in seconds since 1970.
    public var time: Int64
    /// The client's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client
        case sequence = "seq"
        case subject = "of"
        case state = "policy"
        case message, time
        case signature = "sig"
    }

    /// An unsigned acknowledgement.
    public init(
        client: ClientID, sequence: UInt64, subject: PolicySubject, state: PolicyState, message: String, time: Int64,
        signature: SignatureHex? = nil
    ) {
        (self.client, self.sequence, self.subject, self.state, self.message, self.time, self.signature) =
            (client, sequence, subject, state, message, time, signature)
    }
}

/// `<client-scheme>:/delegation?v=2&client=ID&id=HEX32&digest=HEX64&time=N&sig=HEX128`: the
/// provider's auth-token delegation `id` is in the client's spool as `<id>.dlg`, with this
/// SHA-256; signed with the provider's key. A delegation is too long for a URL (and names the
/// user), so only its digest travels in one.
public struct DelegationNotice: SignedURLMessage {
    /// `delegation`.
    public static let path = "delegation"
    /// The receiving client.
    public var client: ClientID
    /// The delegation's id.
    public var id: RequestID
    /// The SHA-256 of the delegation in the spool.
    public var digest: SHA256Hex
    /// When the provider signed it, in seconds since 1970.
    public var time: Int64
    /// The provider's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, id, digest, time
        case signature = "sig"
    }

    /// An unsigned notice.
    public init(client: ClientID, id: RequestID, digest: SHA256Hex, time: Int64, signature: SignatureHex? = nil) {
        (self.client, self.id, self.digest, self.time, self.signature) = (client, id, digest, time, signature)
    }
}

/// `<provider-scheme>:/jwt?v=2&client=ID&request=HEX32&audience=B64&scope=B64&time=N&sig=HEX128`:
/// the client asks for an identity JWT for the relying party `audience` with `scope`; signed like
/// a ``CredentialRequest``. The provider writes the JWT to the client's spool as `<request>.jwt`.
public struct IdentityRequest: SignedURLMessage {
    /// `jwt`.
    public static let path = "jwt"
    /// The asking client.
    public var client: ClientID
    /// The id of the answer in the spool.
    public var request: RequestID
    /// The relying party.
    public var audience: ClaimText
    /// What the token is for.
    public var scope: ClaimText
    /// When it was asked, in seconds since 1970.
    public var time: Int64
    /// The client's signature.
    public var signature: SignatureHex?

    enum CodingKeys: String, CodingKey {
        case client, request, audience, scope, time
        case signature = "sig"
    }

    /// An unsigned request.
    public init(
        client: ClientID, request: RequestID, audience: ClaimText, scope: ClaimText, time: Int64,
        signature: SignatureHex? = nil
    ) {
        (self.client, self.request, self.audience, self.scope, self.time, self.signature) =
            (client, request, audience, scope, time, signature)
    }
}

/// An identity request's audience or scope: 1–200 bytes of printable ASCII with no space at either
/// end, written in URLs as unpadded base64url.
public struct ClaimText: Identifier, URLParameterValue {
    /// The text.
    public let text: String
    /// `claim`.
    public static let kind = "claim"
    /// The length and characters.
    public static let rule = "use 1-200 printable ASCII characters, without a space at either end"

    /// `text`, when it keeps the rule.
    public init?(validating text: String) {
        guard !text.isEmpty, text.utf8.count <= 200, text.utf8.allSatisfy({ (32...126).contains($0) }),
            text.utf8.first != 32, text.utf8.last != 32
        else { return nil }
        self.text = text
    }

    /// The text `parameter` encodes as unpadded base64url, when it keeps the rule.
    public init?(parameter: String) {
        guard let decoded = PolicyText.decode(parameter) else { return nil }
        self.init(validating: decoded)
    }

    /// The text as unpadded base64url.
    public var parameter: String { PolicyText.encode(text) }
}

/// The status a client's ``DeliveryResult`` carries: `ok`, or why the credential was not installed.
/// The provider's ledger records it as a request's outcome, beside two outcomes of its own
/// (``notSent``, ``expired``).
public struct ResultStatus: Identifier, URLParameterValue {
    /// The status word.
    public let text: String
    /// `result status`.
    public static let kind = "result status"
    /// The characters.
    public static let rule = "use 1-64 lowercase letters, digits and '-', not starting with '-'"

    /// `text`, when it is a status word.
    public init?(validating text: String) {
        guard ClientID(validating: text) != nil else { return nil }
        self.text = text
    }

    private init(word: String) { text = word }

    /// The credential was installed.
    public static let ok = ResultStatus(word: "ok")
    /// The credential failed the client's validation; nothing was installed.
    public static let invalid = ResultStatus(word: "invalid")
    /// The delivery was older than the installed credential (its sequence number was not above
    /// the installed one's); the client kept what it had.
    public static let stale = ResultStatus(word: "stale")
    /// Not a client's answer: the provider's outcome for a client's request it could not answer
    /// (issuing or sending failed).
    public static let notSent = ResultStatus(word: "not-sent")
    /// Not a client's answer: the provider's outcome for a request that got no answer within its
    /// time limit.
    public static let expired = ResultStatus(word: "expired")
}

/// A message a client signs with the key the provider pinned when they paired: what
/// `CredentialService.authenticate(_:now:)` checks before anything is done.
public protocol ClientSignedMessage: SignedURLMessage {
    /// The signing client.
    var client: ClientID { get }
    /// When it was signed, in seconds since 1970.
    var time: Int64 { get }
}

/// Signed by the asking client.
extension CredentialRequest: ClientSignedMessage {}
/// Signed by the client whose services became available.
extension AvailabilityNotice: ClientSignedMessage {}
/// Signed by the acknowledging client.
extension Acknowledgement: ClientSignedMessage {}
/// Signed by the client asking for an identity JWT.
extension IdentityRequest: ClientSignedMessage {}
