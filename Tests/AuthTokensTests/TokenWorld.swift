import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// A fixed moment for the tests: 2026-01-01T00:00:00Z.
let t0 = Date(timeIntervalSince1970: 1_767_225_600)
let t0Seconds: Int64 = 1_767_225_600

/// A provider's issuing key, a client's token key, a delegation and a token made with them, and
/// a verifier that trusts the issuing key.
struct TokenWorld {
    let issuingKey: TokenSigningKey
    let tokenKey: TokenSigningKey
    let delegation: Delegation
    let token: AuthToken
    var issuers: TrustedIssuers { TrustedIssuers([issuingKey.publicKey]) }

    init(
        now: Date = t0, lifetime: Int64 = 3600, challenge: String = "one-use challenge 42",
        serverName: String = "app.example.com"
    ) throws {
        issuingKey = try Keys.issuing
        tokenKey = try Keys.token
        delegation = try Delegation.issue(
            issuer: "org.example.provider", userID: "alice@example.com", appID: "com.example.mail",
            containerID: "c0ffee00c0ffee00", tokenKey: tokenKey.publicKey, issuingKey: issuingKey, now: now,
            lifetime: lifetime)
        token = try AuthToken.make(
            challenge: challenge, serverName: serverName, delegation: delegation, tokenKey: tokenKey, now: now)
    }

    func verifier(
        revocations: RevocationList = .empty, issuers: TrustedIssuers? = nil, cacheCapacity: Int = 100
    ) -> AuthTokenVerifier {
        AuthTokenVerifier(
            issuers: issuers ?? self.issuers, revocations: revocations, options: .init(cacheCapacity: cacheCapacity))
    }

    /// A delegation JWS with `payload` (JSON text) signed by `key` under the header kid `keyID`.
    func delegation(payload: String, key: TokenSigningKey? = nil, keyID: String? = nil) throws -> String {
        try CompactJWS.sign(
            payload: payload, type: Delegation.type, keyID: keyID ?? issuingKey.publicKey.thumbprint,
            key: key ?? issuingKey
        ).text
    }

    /// A token JWS with `payload` (JSON text) signed by `key` (the client's token key by default).
    func tokenPart(payload: String, key: TokenSigningKey? = nil) throws -> String {
        try CompactJWS.sign(payload: payload, type: AuthTokenClaims.type, keyID: nil, key: key ?? tokenKey).text
    }

    /// The delegation payload's JSON, as the issuing API writes it, with `changes` applied to the text.
    func delegationPayload(
        jti: String? = nil, nbf: Int64? = nil, exp: Int64? = nil, sub: String = "alice@example.com",
        app: String = "com.example.mail", ctr: String = "c0ffee00c0ffee00", key: TokenPublicKey? = nil
    ) -> String {
        let key = key ?? tokenKey.publicKey
        let claims = delegation.claims
        return #"{"v":1,"iss":"org.example.provider","jti":"\#(jti ?? claims.id)","sub":"\#(sub)","app":"\#(app)","#
            + #""ctr":"\#(ctr)","cnf":{"jwk":{"kty":"EC","crv":"P-256","x":"\#(key.jwkX)","y":"\#(key.jwkY)"}},"#
            + #""nbf":\#(nbf ?? claims.notBefore),"exp":\#(exp ?? claims.expires)}"#
    }

    /// The token payload's JSON.
    func tokenPayload(
        dlg: String? = nil, challenge: String = "one-use challenge 42", iat: Int64? = nil, exp: Int64? = nil
    ) -> String {
        #"{"v":1,"dlg":"\#(dlg ?? delegation.claims.id)","ch":"\#(challenge)","srv":"app.example.com","#
            + #""iat":\#(iat ?? token.claims.issuedAt),"exp":\#(exp ?? token.claims.expires)}"#
    }
}

/// Keys made once per test process (generation is quick, but every test needs a few).
enum Keys {
    static let issuingResult = Result { try TokenSigningKey.generate() }
    static let tokenResult = Result { try TokenSigningKey.generate() }
    static let otherResult = Result { try TokenSigningKey.generate() }
    static var issuing: TokenSigningKey { get throws { try issuingResult.get() } }
    static var token: TokenSigningKey { get throws { try tokenResult.get() } }
    static var other: TokenSigningKey { get throws { try otherResult.get() } }
}

/// The code of a verdict: 100 for a genuine token, else the failure's.
func code(_ verdict: TokenVerdict) -> Int {
    switch verdict.outcome {
    case .success: 100
    case .failure(let reason): reason.failure.rawValue
    }
}

/// Runs the PyJWT oracle (`jws_oracle.py`) with `/usr/bin/python3` and returns its JSON answer.
func oracle(_ command: String, _ request: [String: Any]) throws -> [String: Any] {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("jws_oracle.py")
    let input = try JSONSerialization.data(withJSONObject: request)
    let result = try run("/usr/bin/python3", [script.path, command], stdin: Array(input), timeout: 60)
    guard result.status == 0 else {
        throw ProcessFailure(command: ["/usr/bin/python3", script.path, command], result: result)
    }
    return try #require(JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
}
