import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// What a client's token states: the challenge and server name it is bound to, for which
/// delegation, and when. The payload of the token JWS.
///
/// Header `{"alg":"ES256","typ":"dc-auth+jwt"}` (no `kid`: the key is the delegation's
/// `cnf.jwk`); payload, members in this order:
/// `{"v":1,"dlg":"<the delegation's jti>","ch":"…","srv":"…","iat":N,"exp":N}`. Every member is
/// required and no other is allowed; `ch` and `srv` follow ``HeaderText`` and may be empty, and
/// `exp` is after `iat` by at most ``maximumLifetime``.
public struct AuthTokenClaims: Sendable, Equatable {
    /// The JWS `typ` of a token.
    public static let type = "dc-auth+jwt"
    /// The longest a token may be valid: ten minutes.
    public static let maximumLifetime: Int64 = 600
    /// The only format version.
    public static let version = 1

    /// `v`: the format version, 1.
    public var version: Int
    /// `dlg`: the `jti` of the delegation the token is made under.
    public var delegationID: String
    /// `ch`: the challenge the application server chose.
    public var challenge: String
    /// `srv`: the server name the client named.
    public var serverName: String
    /// `iat`: when the client made the token, in seconds since 1970.
    public var issuedAt: Int64
    /// `exp`: valid until (excluded), in seconds since 1970.
    public var expires: Int64

    /// Claims from their parts (checked when a token is made or parsed).
    public init(
        version: Int = AuthTokenClaims.version, delegationID: String, challenge: String, serverName: String,
        issuedAt: Int64, expires: Int64
    ) {
        self.version = version
        self.delegationID = delegationID
        self.challenge = challenge
        self.serverName = serverName
        self.issuedAt = issuedAt
        self.expires = expires
    }

    /// The payload JSON, members in the documented order.
    var json: String {
        JSONText.object([
            ("v", String(version)), ("dlg", JSONText.string(delegationID)), ("ch", JSONText.string(challenge)),
            ("srv", JSONText.string(serverName)), ("iat", String(issuedAt)), ("exp", String(expires)),
        ])
    }

    init(json: [UInt8]) throws(FormatError) {
        let fields = try JSONFields(
            StrictJSON.parse(json), required: ["v", "dlg", "ch", "srv", "iat", "exp"], what: "the token")
        let version = try fields.integer("v")
        guard version == Int64(AuthTokenClaims.version) else { throw FormatError("an unknown token version") }
        self.init(
            version: Int(version), delegationID: try fields.string("dlg"), challenge: try fields.string("ch"),
            serverName: try fields.string("srv"), issuedAt: try fields.integer("iat"),
            expires: try fields.integer("exp"))
        try check()
    }

    /// The rules every token follows, whoever made it.
    func check() throws(FormatError) {
        guard version == AuthTokenClaims.version else { throw FormatError("an unknown token version") }
        guard HeaderText.isValid(challenge, maximumLength: HeaderText.maximumChallengeLength) else {
            throw FormatError("ch breaks the header rules")
        }
        guard HeaderText.isValid(serverName, maximumLength: HeaderText.maximumServerNameLength) else {
            throw FormatError("srv breaks the header rules")
        }
        guard !delegationID.isEmpty, delegationID.utf8.count <= 64 else {
            throw FormatError("dlg is empty or too long")
        }
        guard (0...latestTimestamp).contains(issuedAt), (0...latestTimestamp).contains(expires) else {
            throw FormatError("iat or exp is out of range")
        }
        guard issuedAt < expires, expires - issuedAt <= AuthTokenClaims.maximumLifetime else {
            throw FormatError("exp is not after iat by at most \(AuthTokenClaims.maximumLifetime) s")
        }
    }
}

/// An auth token: `<delegation JWS>~<token JWS>`, what a client hands its application server and
/// the server hands the verification service.
///
/// Only `A–Z a–z 0–9 - _ . ~` appear in it, and it is at most ``maximumLength`` bytes. It is a
/// bearer credential until it expires: it is redacted when printed.
public struct AuthToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The longest token accepted, in bytes (under every common HTTP header limit).
    public static let maximumLength = 4096

    /// The delegation the token is made under.
    public let delegation: Delegation
    /// The token JWS, signed by the delegation's token key.
    public let jws: CompactJWS
    /// What the token states.
    public let claims: AuthTokenClaims

    /// The token as it travels: `<delegation>~<token JWS>`.
    public var compact: String { delegation.compact + "~" + jws.text }

    /// Makes a token on the client: binds `challenge` and `serverName` (both may be empty) to the
    /// current `delegation`, signed with the client's `tokenKey`, made at `now` and valid for
    /// `lifetime` seconds (at most ``AuthTokenClaims/maximumLifetime``, and never past the
    /// delegation's expiry).
    ///
    /// Throws `DCError.Code.invalidChallenge` when the challenge or server name breaks
    /// ``HeaderText`` (a character outside 32–126, a space at either end, too long) or the token
    /// would exceed ``maximumLength``; `DCError.Code.delegationNotValid` when the delegation is not
    /// valid at `now` or certifies another key than `tokenKey`'s.
    public static func make(
        challenge: String, serverName: String, delegation: Delegation, tokenKey: TokenSigningKey, now: Date,
        lifetime: Int64 = AuthTokenClaims.maximumLifetime
    ) throws -> AuthToken {
        try HeaderText.check(challenge, what: "the challenge", maximumLength: HeaderText.maximumChallengeLength)
        try HeaderText.check(serverName, what: "the server name", maximumLength: HeaderText.maximumServerNameLength)
        guard tokenKey.publicKey == delegation.claims.tokenKey else {
            throw DCError(.delegationNotValid, "the delegation certifies another token key than this client's")
        }
        try delegation.checkValid(at: now)
        guard (1...AuthTokenClaims.maximumLifetime).contains(lifetime) else {
            throw DCError(.usage, "a token lives 1 to \(AuthTokenClaims.maximumLifetime) seconds")
        }
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        let claims = AuthTokenClaims(
            delegationID: delegation.claims.id, challenge: challenge, serverName: serverName, issuedAt: issuedAt,
            expires: min(issuedAt + lifetime, delegation.claims.expires))
        let jws = try CompactJWS.sign(payload: claims.json, type: AuthTokenClaims.type, keyID: nil, key: tokenKey)
        let token = AuthToken(delegation: delegation, jws: jws, claims: claims)
        guard token.compact.utf8.count <= maximumLength else {
            throw DCError(
                .invalidChallenge, "the token would be longer than \(maximumLength) bytes",
                hint: "use a shorter challenge or server name")
        }
        return token
    }

    /// Parses a token strictly, without checking any signature. Throws `DCError.Code.invalid`.
    public init(parsing compact: String) throws {
        do throws(FormatError) {
            self = try AuthToken(bytes: Array(compact.utf8))
        } catch {
            throw DCError(.invalid, "not a valid auth token: \(error.description)")
        }
    }

    init(delegation: Delegation, jws: CompactJWS, claims: AuthTokenClaims) {
        self.delegation = delegation
        self.jws = jws
        self.claims = claims
    }

    init(bytes: [UInt8]) throws(FormatError) {
        let (delegationPart, tokenPart) = try AuthToken.split(bytes)
        let delegation = try Delegation(bytes: delegationPart)
        let jws = try CompactJWS(bytes: tokenPart, type: AuthTokenClaims.type, keyed: false)
        self.init(delegation: delegation, jws: jws, claims: try AuthTokenClaims(json: jws.payload))
    }

    /// The delegation and token parts of a token's bytes, within the size cap.
    static func split(_ bytes: [UInt8]) throws(FormatError) -> (ArraySlice<UInt8>, ArraySlice<UInt8>) {
        guard bytes.count <= maximumLength else { throw FormatError("longer than \(maximumLength) bytes") }
        guard let tilde = bytes.firstIndex(of: UInt8(ascii: "~")),
            !bytes[(tilde + 1)...].contains(UInt8(ascii: "~"))
        else { throw FormatError("not two parts joined by '~'") }
        return (bytes[..<tilde], bytes[(tilde + 1)...])
    }

    /// `AuthToken(<redacted>)`: a token is a bearer credential until it expires.
    public var description: String { "AuthToken(<redacted>)" }
    /// The same redacted text as ``description``.
    public var debugDescription: String { description }
    /// A mirror that shows only what the token is for, not the token.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "token": "<redacted>", "appID": delegation.claims.appID, "containerID": delegation.claims.containerID,
                "expires": claims.expires,
            ], displayStyle: .struct)
    }
}
