import CredentialCoding
import DerivedCredentials
import Foundation
import IdentityTokens
import TestSupport
import Testing

/// Half of all ECDSA signatures are high-S; the project gives every ES256 signature it makes one
/// encoding, low-S, identity JWTs included.
@Suite("Identity JWTs: one encoding of the signature", .ownThreads, .timeLimit(.minutes(1)))
struct IdentityTokenSignatureTests {
    @Test("Every identity JWT is signed low-S (s ≤ n/2) and verifies under the identity key")
    func lowS() throws {
        let key = try TokenSigningKey.generate()
        // ⌊n / 2⌋ for the P-256 order n, written out (equal-length lower-case hex compares as the numbers do).
        let halfOrder = "7fffffff800000007fffffffffffffffde737d56d38bcf4279dce5617e3192a8"
        // Half of all ECDSA signatures are high-S: 32 low-S ones in a row by chance is 1 in 2^32.
        for index in 0..<32 {
            let token = try IdentityToken.sign(
                issuer: "org.example.provider", userID: "alice@example.com", audience: "mail-web",
                scope: "openid \(index)", key: key, now: Date())
            let parts = token.compact.split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            let signature = try #require(Base64URL.decode(parts[2]))
            try #require(signature.count == 64)
            #expect(Digests.hex(Array(signature[32...])) <= halfOrder, "token \(index)")
            #expect(key.publicKey.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8)))
            #expect(try IdentityToken(parsing: token.compact).claims == token.claims)
        }
    }
}
