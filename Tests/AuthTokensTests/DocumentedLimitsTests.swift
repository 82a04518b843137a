import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The numbers docs/PROTOCOL.md and docs/SECURITY.md promise about auth tokens, each written out
/// here as the documents write it, never computed from the constant that holds it: a constant
/// changed without the documents fails these tests.
@Suite("Documented limits: delegation lifetime, clock skew", .ownThreads, .timeLimit(.minutes(1)))
struct DocumentedLimitsTests {
    /// The response code `text` gets at `now` from a verifier that trusts the world's issuing key.
    func code(_ world: TokenWorld, _ text: String, now: Date) -> Int {
        let verdict = world.verifier(cacheCapacity: 0).verify(text, now: now)
        switch verdict.outcome {
        case .success: return 100
        case .failure(let reason): return reason.failure.rawValue
        }
    }

    @Test(
        "A delegation is valid at most a day: the provider issues 86400 s and refuses 86401 s; the verifier answers 100 and 101"
    )
    func delegationLifetime() throws {
        let world = try TokenWorld()
        let day = try Delegation.issue(
            issuer: "org.example.provider", userID: "alice@example.com", appID: "com.example.mail",
            containerID: "c0ffee00c0ffee00", tokenKey: world.tokenKey.publicKey, issuingKey: world.issuingKey, now: t0,
            lifetime: 86_400)
        #expect(day.claims.expires - day.claims.notBefore == 86_400)
        let refused = try #require(throws: DCError.self) {
            try Delegation.issue(
                issuer: "org.example.provider", userID: "alice@example.com", appID: "com.example.mail",
                containerID: "c0ffee00c0ffee00", tokenKey: world.tokenKey.publicKey, issuingKey: world.issuingKey,
                now: t0, lifetime: 86_401)
        }
        #expect(refused.code == .invalid)
        // Signed by the trusted issuing key with exp − nbf written out, the world's token under it.
        for (lifetime, expected) in [(86_400, 100), (86_401, 101)] {
            let delegation = try world.delegation(
                payload: world.delegationPayload(nbf: t0Seconds, exp: t0Seconds + Int64(lifetime)))
            #expect(code(world, delegation + "~" + world.token.jws.text, now: t0 + 10) == expected, "\(lifetime) s")
        }
    }

    @Test("A token or delegation made up to a minute (60 s) ahead of the verifier's clock is 100; 61 s ahead is 102")
    func clockSkew() throws {
        let world = try TokenWorld()
        let now = t0 + 10
        let seconds = t0Seconds + 10
        for (ahead, expected) in [(60, 100), (61, 102)] {
            let token = try world.tokenPart(
                payload: world.tokenPayload(iat: seconds + Int64(ahead), exp: seconds + Int64(ahead) + 300))
            #expect(
                code(world, world.delegation.compact + "~" + token, now: now) == expected, "a token \(ahead) s ahead")
            let delegation = try world.delegation(
                payload: world.delegationPayload(nbf: seconds + Int64(ahead), exp: seconds + 3000))
            let tokenUnder = try world.tokenPart(payload: world.tokenPayload(iat: seconds, exp: seconds + 300))
            #expect(code(world, delegation + "~" + tokenUnder, now: now) == expected, "a delegation \(ahead) s ahead")
        }
    }
}
