import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import IdentityTokens
import TestSupport
import Testing

/// Identity JWTs are compact ES256 JWS made and read by the same code as auth tokens (`CompactJWS`
/// over OpenSSL). PyJWT is the peer that says whether they are what a relying party expects; the
/// refusals are the ones jwt-kit, which made them before, did not make (docs/BENCHMARKS.md).
@Suite("Identity JWTs: our ES256 JWS, strict, PyJWT as the peer", .ownThreads, .timeLimit(.minutes(2)))
struct IdentityTokenTests {
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    static func sign(_ key: TokenSigningKey, scope: String = "openid", now: Date = now) throws -> IdentityToken {
        try IdentityToken.sign(
            issuer: "org.example.provider", userID: "alice@example.com", audience: "mail-web", scope: scope, key: key,
            now: now)
    }

    static func text(_ part: some StringProtocol) throws -> String {
        String(decoding: try #require(Base64URL.decode(String(part))), as: UTF8.self)
    }

    /// Whether ours takes `token` as an identity JWT signed by `key`.
    static func accepted(_ token: String, by key: TokenSigningKey) -> Bool {
        (try? IdentityToken(parsing: token))?.isSigned(by: key.publicKey) == true
    }

    @Test("The header is alg ES256, kid the key's thumbprint, typ JWT; the claims aud, exp, iat, iss, scope, sub")
    func wireFormat() throws {
        let key = try TokenSigningKey.generate()
        let token = try Self.sign(key, now: Self.now + 0.7)
        let parts = token.compact.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        #expect(try Self.text(parts[0]) == #"{"alg":"ES256","kid":"\#(key.publicKey.thumbprint)","typ":"JWT"}"#)
        #expect(
            try Self.text(parts[1])
                == #"{"aud":"mail-web","exp":1795003600,"iat":1795000000,"iss":"org.example.provider","scope":"openid","sub":"alice@example.com"}"#
        )
        #expect(token.keyID == key.publicKey.thumbprint)
        #expect(token.claims.issuedAt == Self.now && token.claims.expires == Self.now + 3600)
        #expect(token.isSigned(by: key.publicKey))
        #expect(!token.isSigned(by: try TokenSigningKey.generate().publicKey))
        #expect(try IdentityToken(parsing: token.compact) == token)
    }

    /// Made by `IdentityToken.sign` when it went through jwt-kit (the one-off Benchmarks/jwsbench
    /// printed it): what a client's cache may hold from before. Its JSONEncoder wrote `/` as `\/`.
    static let jwtKitToken =
        "eyJhbGciOiJFUzI1NiIsImtpZCI6IjloNFluZ2dhbmFFa2d4cTZKdFZqY1NVNWlYTk9JTnVUTUJfWE13UWtSVFEiLCJ0eXAiOiJKV1QifQ"
        + ".eyJhdWQiOiJtYWlsLXdlYiIsImV4cCI6MTc5NTAwMzYwMCwiaWF0IjoxNzk1MDAwMDAwLCJpc3MiOiJvcmcuZXhhbXBsZS5wcm92aWRlciIsInNjb3BlIjoib3BlbmlkIGh0dHBzOlwvXC9tYWlsLmV4YW1wbGVcL3JlYWQiLCJzdWIiOiJhbGljZUBleGFtcGxlLmNvbSJ9"
        + ".O4FrksV-ZibllcvYFSvO37onzfaJU02PnZo92oGtu3s0ihZhlPv2bTMXPgWjKuPzSmiOgGI-ApANRA1J616yjA"
    static let jwtKitKey = (
        x: "HULlWTwJIhUBX3mHcE51EWY89mOBpmAPGF55bryvrfc", y: "kaefsj5KT9N3mwAvu03yKHnoEnQbbQ5sabJCNikVHvg"
    )

    @Test("An identity JWT jwt-kit signed for the provider before still reads and verifies")
    func jwtKitMade() throws {
        let key = try TokenPublicKey(jwkX: Self.jwtKitKey.x, jwkY: Self.jwtKitKey.y)
        let token = try IdentityToken(parsing: Self.jwtKitToken)
        #expect(token.isSigned(by: key))
        #expect(token.keyID == key.thumbprint)
        #expect(
            token.claims
                == IdentityClaims(
                    issuer: "org.example.provider", subject: "alice@example.com", audience: "mail-web",
                    scope: "openid https://mail.example/read", issuedAt: Self.now, expires: Self.now + 3600))
    }

    @Test("PyJWT verifies an identity JWT we sign, for its audience and issuer, and refuses it for another audience")
    func pyjwtVerifiesOurs() throws {
        // Real time: PyJWT checks iat and exp against its own clock.
        let key = try TokenSigningKey.generate()
        let token = try Self.sign(key, scope: "openid mail/read", now: Date())
        let jwk = ["x": key.publicKey.jwkX, "y": key.publicKey.jwkY]
        let answer = try oracle(
            "identity-verify",
            ["token": token.compact, "jwk": jwk, "audience": "mail-web", "issuer": "org.example.provider"])
        let header = try #require(answer["header"] as? [String: Any])
        let claims = try #require(answer["claims"] as? [String: Any])
        #expect(header["alg"] as? String == "ES256" && header["typ"] as? String == "JWT")
        #expect(header["kid"] as? String == key.publicKey.thumbprint)
        #expect(claims["sub"] as? String == "alice@example.com" && claims["scope"] as? String == "openid mail/read")
        #expect((claims["exp"] as? NSNumber)?.int64Value == Int64(token.claims.expires.timeIntervalSince1970))
        // The oracle can say no.
        #expect(throws: ProcessFailure.self) {
            try oracle(
                "identity-verify",
                ["token": token.compact, "jwk": jwk, "audience": "another-app", "issuer": "org.example.provider"])
        }
    }

    @Test("An identity JWT PyJWT signs reads and verifies in ours; with one claim changed it does not")
    func oursVerifiesPyjwt() throws {
        let claims: [String: Any] = [
            "iss": "org.example.python", "sub": "bob@example.com", "aud": "mail-web", "scope": "openid",
            "iat": 1_795_000_000, "exp": 1_795_003_600,
        ]
        let made = try oracle("identity-make", ["claims": claims])
        let text = try #require(made["token"] as? String)
        let key = try TokenPublicKey(jwkX: try #require(made["x"] as? String), jwkY: try #require(made["y"] as? String))
        let token = try IdentityToken(parsing: text)
        #expect(token.isSigned(by: key))
        #expect(
            token.claims
                == IdentityClaims(
                    issuer: "org.example.python", subject: "bob@example.com", audience: "mail-web", scope: "openid",
                    issuedAt: Self.now, expires: Self.now + 3600))
        let parts = text.split(separator: ".").map(String.init)
        let altered = try Self.text(parts[1]).replacingOccurrences(of: "bob@", with: "eve@")
        let forged = try IdentityToken(parsing: parts[0] + "." + Base64URL.encode(Array(altered.utf8)) + "." + parts[2])
        #expect(!forged.isSigned(by: key))
    }

    /// Tokens another party could hand a verifier. Each is signed with the right key where a
    /// signature applies, so that only the rule named can refuse it.
    static let refusals = [
        "a claim twice (aud, first another audience)", "a header member twice (alg none, then ES256)",
        "alg none and no signature", "alg HS256 keyed with the public key's bytes", "alg ES384 over an ES256 signature",
        "the high-S twin (r, n − s) of a genuine token", "a crit header member", "a jku header member",
        "an unknown header member", "no kid", "another kid", "another typ (dc-auth+jwt)",
        "a padded base64url signature", "an unknown claim", "no sub claim", "exp not an integer",
    ]

    @Test(
        "Refused although signed: duplicate members, alg other than ES256, high-S, extra header members",
        arguments: refusals)
    func refused(_ rule: String) throws {
        let key = try TokenSigningKey.generate()
        let kid = key.publicKey.thumbprint
        let header = #"{"alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#
        let claims =
            #"{"aud":"mail-web","exp":1795003600,"iat":1795000000,"iss":"org.example.provider","scope":"openid","sub":"alice@example.com"}"#
        func b64(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }
        func signed(_ header: String, _ claims: String) throws -> String {
            let input = b64(header) + "." + b64(claims)
            return input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
        }
        func claimsWith(_ from: String, _ to: String) -> String { claims.replacingOccurrences(of: from, with: to) }
        // The rule is the only thing wrong: the genuine token is accepted.
        let genuine = try signed(header, claims)
        try #require(Self.accepted(genuine, by: key))
        let token: String
        switch rule {
        case "a claim twice (aud, first another audience)":
            token = try signed(header, claimsWith(#"{"aud":"#, #"{"aud":"evil","aud":"#))
        case "a header member twice (alg none, then ES256)":
            token = try signed(#"{"alg":"none","alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#, claims)
        case "alg none and no signature":
            token = b64(#"{"alg":"none","kid":"\#(kid)","typ":"JWT"}"#) + "." + b64(claims) + "."
        case "alg HS256 keyed with the public key's bytes":
            let input = b64(#"{"alg":"HS256","kid":"\#(kid)","typ":"JWT"}"#) + "." + b64(claims)
            let mac = Digests.hmacSHA256(key: SecretBytes(key.publicKey.uncompressedPoint), message: Array(input.utf8))
            token = input + "." + Base64URL.encode(mac)
        case "alg ES384 over an ES256 signature":
            token = try signed(#"{"alg":"ES384","kid":"\#(kid)","typ":"JWT"}"#, claims)
        case "the high-S twin (r, n − s) of a genuine token":
            // The oracle shows first that PyJWT and pyca/cryptography take the twin as a valid ES256 signature.
            let answer = try oracle(
                "twin", ["jws": genuine, "jwk": ["x": key.publicKey.jwkX, "y": key.publicKey.jwkY]])
            #expect(answer["differs"] as? Bool == true && answer["highS"] as? Bool == true)
            token = try #require(answer["twin"] as? String)
        case "a crit header member":
            token = try signed(#"{"alg":"ES256","crit":["exp"],"kid":"\#(kid)","typ":"JWT"}"#, claims)
        case "a jku header member":
            token = try signed(
                #"{"alg":"ES256","jku":"https://evil.example/jwks","kid":"\#(kid)","typ":"JWT"}"#, claims)
        case "an unknown header member":
            token = try signed(#"{"alg":"ES256","kid":"\#(kid)","typ":"JWT","x":1}"#, claims)
        case "no kid": token = try signed(#"{"alg":"ES256","typ":"JWT"}"#, claims)
        case "another kid": token = try signed(#"{"alg":"ES256","kid":"another-key","typ":"JWT"}"#, claims)
        case "another typ (dc-auth+jwt)":
            token = try signed(#"{"alg":"ES256","kid":"\#(kid)","typ":"dc-auth+jwt"}"#, claims)
        case "a padded base64url signature": token = genuine + "=="
        case "an unknown claim": token = try signed(header, claimsWith(#""sub":"#, #""nonce":"n","sub":"#))
        case "no sub claim": token = try signed(header, claimsWith(#","sub":"alice@example.com""#, ""))
        case "exp not an integer": token = try signed(header, claimsWith("1795003600", "1795003600.5"))
        default: throw DCError(.usage, "no such rule: \(rule)")
        }
        #expect(!Self.accepted(token, by: key))
    }
}
