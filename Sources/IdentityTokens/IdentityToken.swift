import AuthTokens
import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// The claims of an identity JWT: who the user is (`sub`), for which relying party (`aud`, the
/// OAuth client id the app named), with which `scope`, from which provider (`iss`), from when
/// (`iat`) until when (`exp`).
///
/// On the wire they are one JSON object with exactly these six members, in this order, with no
/// white space: `{"aud":…,"exp":…,"iat":…,"iss":…,"scope":…,"sub":…}` (`aud` a single string,
/// `iat` and `exp` integer seconds since 1970).
public struct IdentityClaims: Sendable, Equatable {
    /// `iss`: the provider's URL scheme.
    public var issuer: String
    /// `sub`: the user id the provider names the client's user by.
    public var subject: String
    /// `aud`: the client id of the relying party the token is for (one audience).
    public var audience: String
    /// `scope`: what the relying party may do, as the app asked.
    public var scope: String
    /// `iat`: when the provider signed it, in whole seconds.
    public var issuedAt: Date
    /// `exp`: when it stops being valid, in whole seconds.
    public var expires: Date

    /// Claims with these values.
    public init(issuer: String, subject: String, audience: String, scope: String, issuedAt: Date, expires: Date) {
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.scope = scope
        self.issuedAt = issuedAt
        self.expires = expires
    }

    /// The JSON text that is signed: the members sorted by name, no white space.
    var jsonText: String {
        JSONText.object([
            ("aud", JSONText.string(audience)),
            ("exp", String(Int64(expires.timeIntervalSince1970))),
            ("iat", String(Int64(issuedAt.timeIntervalSince1970))),
            ("iss", JSONText.string(issuer)),
            ("scope", JSONText.string(scope)),
            ("sub", JSONText.string(subject)),
        ])
    }

    /// Reads the claims from the strict JSON in `json`: the six members, no other, none twice.
    init(json: [UInt8]) throws(FormatError) {
        let fields = try JSONFields(
            StrictJSON.parse(json), required: ["aud", "exp", "iat", "iss", "scope", "sub"], what: "the claims")
        self.init(
            issuer: try fields.string("iss"), subject: try fields.string("sub"), audience: try fields.string("aud"),
            scope: try fields.string("scope"), issuedAt: Date(timeIntervalSince1970: Double(try fields.integer("iat"))),
            expires: Date(timeIntervalSince1970: Double(try fields.integer("exp"))))
    }
}

/// An identity JWT (RFC 7519), ES256, signed by the provider with its identity key: what an app
/// hands a relying party that speaks OAuth / OpenID rather than auth tokens. The relying party
/// checks it against the JWKS a verification service publishes (`/.well-known/jwks.json`), with
/// any JOSE library. The compact form is a bearer credential: it is never logged or printed by
/// `description` or `dump()`.
///
/// It is a compact JWS made and read by `CompactJWS` in AuthTokens, as auth tokens are: the
/// header is exactly `{"alg":"ES256","kid":…,"typ":"JWT"}`, the signature is OpenSSL's ES256 in
/// its low-S form, and reading is strict (no duplicate, unknown or missing member in the header
/// or the claims, `alg` exactly `ES256`, canonical base64url).
public struct IdentityToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// How long an identity JWT is valid: an hour.
    public static let lifetime: TimeInterval = 3600
    /// The longest audience or scope, in bytes.
    public static let maximumValueLength = 200
    /// The longest identity JWT accepted, in bytes (the provider's answer file has the same cap).
    public static let maximumLength = 8192
    /// The header's `typ`.
    static let type = "JWT"

    /// The compact serialization, `header.payload.signature`.
    public var compact: String { jws.text }
    /// Its claims, as signed.
    public let claims: IdentityClaims
    /// The signing key's id (`kid`): the RFC 7638 thumbprint of the provider's identity key.
    public var keyID: String { jws.keyID ?? "" }
    /// The parsed JWS: its header, signing input and signature.
    private let jws: CompactJWS

    /// Signs an identity JWT for `userID`, for the relying party `audience` with `scope`, valid
    /// from `now` (rounded down to the second) for ``lifetime``, with the provider's identity
    /// `key` (ES256 through OpenSSL, the signature low-S: `ES256Signature` in CredentialCoding).
    /// Throws `DCError.Code.usage` for an audience or scope that is empty, longer than
    /// ``maximumValueLength`` or not printable ASCII.
    public static func sign(
        issuer: String, userID: String, audience: String, scope: String, key: TokenSigningKey, now: Date
    ) throws -> IdentityToken {
        try check(audience, what: "the client id")
        try check(scope, what: "the scope")
        let issuedAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = IdentityClaims(
            issuer: issuer, subject: userID, audience: audience, scope: scope, issuedAt: issuedAt,
            expires: issuedAt + lifetime)
        let jws = try CompactJWS.sign(
            payload: claims.jsonText, type: type, keyID: key.publicKey.thumbprint, key: key,
            maximumLength: maximumLength)
        return IdentityToken(jws: jws, claims: claims)
    }

    /// Reads an identity JWT without checking its signature (the client only caches what its
    /// provider signed; relying parties verify, and so does ``isSigned(by:)``). Throws
    /// `DCError.Code.invalid`, naming the rule broken, when it is not one.
    public init(parsing compact: String) throws {
        do throws(FormatError) {
            let jws = try CompactJWS(
                bytes: Array(compact.utf8)[...], type: IdentityToken.type, keyed: true,
                maximumLength: IdentityToken.maximumLength)
            self.init(jws: jws, claims: try IdentityClaims(json: jws.payload))
        } catch {
            throw DCError(.invalid, "not an identity token: \(error.description)")
        }
    }

    private init(jws: CompactJWS, claims: IdentityClaims) {
        self.jws = jws
        self.claims = claims
    }

    /// Whether it is `key`'s ES256 signature, low-S, under `key`'s thumbprint as its `kid`: what
    /// a relying party checks before it looks at the claims.
    public func isSigned(by key: TokenPublicKey) -> Bool {
        keyID == key.thumbprint && jws.isSigned(by: key)
    }

    /// Refuses an audience or scope that is empty, too long or not printable ASCII.
    public static func check(_ value: String, what: String) throws {
        guard !value.isEmpty else { throw DCError(.usage, "\(what) is empty") }
        guard HeaderText.isValid(value, maximumLength: maximumValueLength) else {
            throw DCError(
                .usage,
                "\(what) must be printable ASCII (codes 32-126), at most \(maximumValueLength) bytes, with no space at either end"
            )
        }
    }

    /// Whether it is still valid `margin` seconds after `now`.
    public func isValid(at now: Date, margin: TimeInterval = 0) -> Bool {
        claims.expires > now + margin && claims.issuedAt <= now + 60
    }

    /// `IdentityToken(<redacted>)`: the token is a bearer credential.
    public var description: String { "IdentityToken(<redacted>)" }
    /// The same as ``description``.
    public var debugDescription: String { description }
    /// A mirror that shows the key id and expiry only, so that `dump()` does not print the token.
    public var customMirror: Mirror {
        Mirror(self, children: ["keyID": keyID, "expires": claims.expires], displayStyle: .struct)
    }
}
