import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// The provider's short-lived statement that a client's token key speaks for one user, app and
/// container: a compact JWS signed by the provider's issuing key.
///
/// Header `{"alg":"ES256","kid":K,"typ":"dc-dlg+jwt"}`, where `K` is the issuing key's RFC 7638
/// thumbprint; payload, members in this order:
///
/// ```json
/// {"v":1,"iss":"…","jti":"<32 lower-case hex>","sub":"<user id>","app":"<app id>","ctr":"<container id>",
///  "cnf":{"jwk":{"kty":"EC","crv":"P-256","x":"…","y":"…"}},"nbf":N,"exp":N}
/// ```
///
/// Every member is required and no other is allowed. `iss`, `sub`, `app` and `ctr` follow
/// ``HeaderText`` (they come back to application servers in headers), `sub`, `app` and `ctr` are
/// not empty, and `exp` is after `nbf` by at most ``maximumLifetime``. The identity comes only from
/// the provider's signature: the client holds the token key, never the issuing key.
public struct Delegation: Sendable, Equatable {
    /// The JWS `typ` of a delegation.
    public static let type = "dc-dlg+jwt"
    /// The longest a delegation may be valid: 24 hours.
    public static let maximumLifetime: Int64 = 86_400
    /// The only format version.
    public static let version = 1

    /// What a delegation states.
    public struct Claims: Sendable, Equatable {
        /// `v`: the format version, 1.
        public var version: Int
        /// `iss`: who issued it (the provider's scheme).
        public var issuer: String
        /// `jti`: its unique id, 32 lower-case hex digits; revoking a delegation names it.
        public var id: String
        /// `sub`: the user.
        public var userID: String
        /// `app`: the managed app's id.
        public var appID: String
        /// `ctr`: the app's container (one installation of it).
        public var containerID: String
        /// `cnf.jwk`: the client's token key, which signs the tokens.
        public var tokenKey: TokenPublicKey
        /// `nbf`: valid from, in seconds since 1970.
        public var notBefore: Int64
        /// `exp`: valid until (excluded), in seconds since 1970.
        public var expires: Int64
    }

    /// The JWS.
    public let jws: CompactJWS
    /// The statement.
    public let claims: Claims

    /// The compact serialization, as the client stores it and sends it inside its tokens.
    public var compact: String { jws.text }
    /// The issuing key's id (`kid`): its RFC 7638 thumbprint.
    public var keyID: String { jws.keyID ?? "" }

    /// Signs a delegation with the provider's `issuingKey`, valid from `now` for `lifetime` seconds
    /// (at most ``maximumLifetime``), with a fresh random `jti` unless `id` is given.
    ///
    /// Throws `DCError.Code.invalid` for an identity value that breaks ``HeaderText``, is empty, or a
    /// lifetime out of range.
    public static func issue(
        issuer: String, userID: String, appID: String, containerID: String, tokenKey: TokenPublicKey,
        issuingKey: TokenSigningKey, now: Date, lifetime: Int64 = maximumLifetime, id: RequestID? = nil
    ) throws -> Delegation {
        let notBefore = Int64(now.timeIntervalSince1970.rounded(.down))
        let jti = (id ?? RequestID.random()).text
        let claims = Claims(
            version: version, issuer: issuer, id: jti, userID: userID, appID: appID, containerID: containerID,
            tokenKey: tokenKey, notBefore: notBefore, expires: notBefore + lifetime)
        do throws(FormatError) {
            try claims.check()
        } catch {
            throw DCError(.invalid, "cannot issue the delegation: \(error.description)")
        }
        let jws = try CompactJWS.sign(
            payload: claims.json, type: type, keyID: issuingKey.publicKey.thumbprint, key: issuingKey)
        return Delegation(jws: jws, claims: claims)
    }

    /// Parses a delegation strictly, without checking its signature. Throws `DCError.Code.invalid`.
    public init(parsing compact: String) throws {
        do throws(FormatError) {
            self = try Delegation(bytes: Array(compact.utf8)[...])
        } catch {
            throw DCError(.invalid, "not a valid delegation: \(error.description)")
        }
    }

    /// A delegation the client receives from its provider: parsed strictly, signed by `issuer` (the
    /// issuing key pinned at pairing, whose thumbprint must be its `kid`), and valid at `now`.
    /// Throws `DCError.Code.invalid` when it is malformed or not signed by `issuer`, and
    /// `DCError.Code.delegationNotValid` when it is not valid at `now`.
    public static func received(_ compact: String, issuer: TokenPublicKey, now: Date) throws -> Delegation {
        let delegation = try Delegation(parsing: compact)
        guard delegation.keyID == issuer.thumbprint, delegation.jws.isSigned(by: issuer) else {
            throw DCError(.invalid, "the delegation is not signed by the provider's issuing key")
        }
        try delegation.checkValid(at: now)
        return delegation
    }

    /// Throws `DCError.Code.delegationNotValid` unless `nbf ≤ now < exp`.
    public func checkValid(at now: Date) throws {
        let seconds = Int64(now.timeIntervalSince1970.rounded(.down))
        guard claims.notBefore <= seconds else {
            throw DCError(.delegationNotValid, "the delegation is not valid yet (the clocks may differ)")
        }
        guard seconds < claims.expires else { throw DCError(.delegationNotValid, "the delegation has expired") }
    }

    init(jws: CompactJWS, claims: Claims) {
        self.jws = jws
        self.claims = claims
    }

    init(bytes: ArraySlice<UInt8>) throws(FormatError) {
        let jws = try CompactJWS(bytes: bytes, type: Delegation.type, keyed: true)
        self.init(jws: jws, claims: try Claims(json: jws.payload))
    }
}

/// Timestamps are whole seconds from 1970 to the end of 9999.
let latestTimestamp: Int64 = 253_402_300_799

extension Delegation.Claims {
    /// The payload JSON, members in the documented order.
    var json: String {
        let jwk = JSONText.object([
            ("kty", JSONText.string("EC")), ("crv", JSONText.string("P-256")),
            ("x", JSONText.string(tokenKey.jwkX)), ("y", JSONText.string(tokenKey.jwkY)),
        ])
        return JSONText.object([
            ("v", String(version)), ("iss", JSONText.string(issuer)), ("jti", JSONText.string(id)),
            ("sub", JSONText.string(userID)), ("app", JSONText.string(appID)),
            ("ctr", JSONText.string(containerID)), ("cnf", JSONText.object([("jwk", jwk)])),
            ("nbf", String(notBefore)), ("exp", String(expires)),
        ])
    }

    init(json: [UInt8]) throws(FormatError) {
        let fields = try JSONFields(
            StrictJSON.parse(json), required: ["v", "iss", "jti", "sub", "app", "ctr", "cnf", "nbf", "exp"],
            what: "the delegation")
        let confirmation = try JSONFields(fields.member("cnf"), required: ["jwk"], what: "cnf")
        let jwk = try JSONFields(confirmation.member("jwk"), required: ["kty", "crv", "x", "y"], what: "cnf.jwk")
        guard try jwk.string("kty") == "EC", try jwk.string("crv") == "P-256" else {
            throw FormatError("the token key is not an EC P-256 key")
        }
        guard let tokenKey = try? TokenPublicKey(jwkX: jwk.string("x"), jwkY: jwk.string("y")) else {
            throw FormatError("the token key is not a P-256 point")
        }
        let version = try fields.integer("v")
        guard version == Int64(Delegation.version) else { throw FormatError("an unknown delegation version") }
        self.init(
            version: Int(version), issuer: try fields.string("iss"), id: try fields.string("jti"),
            userID: try fields.string("sub"), appID: try fields.string("app"),
            containerID: try fields.string("ctr"), tokenKey: tokenKey, notBefore: try fields.integer("nbf"),
            expires: try fields.integer("exp"))
        try check()
    }

    /// The rules every delegation follows, whoever made it.
    func check() throws(FormatError) {
        guard version == Delegation.version else { throw FormatError("an unknown delegation version") }
        let limit = HeaderText.maximumIdentityLength
        guard HeaderText.isValid(issuer, maximumLength: limit) else { throw FormatError("iss breaks the header rules") }
        for (name, value) in [("sub", userID), ("app", appID), ("ctr", containerID)] {
            guard !value.isEmpty, HeaderText.isValid(value, maximumLength: limit) else {
                throw FormatError("\(name) is empty or breaks the header rules")
            }
        }
        guard RequestID(validating: id) != nil else { throw FormatError("jti is not 32 lower-case hex digits") }
        guard (0...latestTimestamp).contains(notBefore), (0...latestTimestamp).contains(expires) else {
            throw FormatError("nbf or exp is out of range")
        }
        guard notBefore < expires, expires - notBefore <= Delegation.maximumLifetime else {
            throw FormatError("exp is not after nbf by at most \(Delegation.maximumLifetime) s")
        }
    }
}
