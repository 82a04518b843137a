import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization
import TestSupport
import Testing

@Suite("The verifier: each check in order, with its code", .ownThreads, .timeLimit(.minutes(3)))
struct VerifierTests {
    @Test("A genuine token is 100 OK with the identity, twice, with and without the cache")
    func genuine() throws {
        let world = try TokenWorld()
        for verifier in [world.verifier(), world.verifier(cacheCapacity: 0)] {
            let first = verifier.verify(world.token.compact, now: t0 + 10)
            let second = verifier.verify(world.token.compact, now: t0 + 10)
            #expect(first == second)
            #expect(first.responseCode == "100 OK")
            #expect(
                try first.outcome.get()
                    == TokenVerdict.Identity(
                        challenge: "one-use challenge 42", serverName: "app.example.com", userID: "alice@example.com",
                        appID: "com.example.mail", containerID: "c0ffee00c0ffee00", version: 1,
                        creationTime: t0Seconds))
        }
    }

    /// A token made of `delegation` and `token` parts, judged at `now` by `verifier`.
    func judge(
        _ world: TokenWorld, delegation: String? = nil, token: String? = nil, now: Date = t0 + 10,
        revocations: RevocationList = .empty, issuers: TrustedIssuers? = nil
    ) -> (code: Int, reason: String) {
        let text = (delegation ?? world.delegation.compact) + "~" + (token ?? world.token.jws.text)
        // The cached and the uncached verifier must agree, and a second call must too.
        let verifiers = [
            world.verifier(revocations: revocations, issuers: issuers),
            world.verifier(revocations: revocations, issuers: issuers, cacheCapacity: 0),
        ]
        let verdicts = verifiers.flatMap { [$0.verify(text, now: now), $0.verify(text, now: now)] }
        #expect(Set(verdicts.map(\.responseCode)).count == 1)
        let reason: String
        switch verdicts[0].outcome {
        case .success: reason = "valid"
        case .failure(let failure): reason = failure.reason
        }
        return (code(verdicts[0]), reason)
    }

    @Test("Step 1: junk, oversize, alg none or HS256, unknown or duplicate members are 101 Invalid Token")
    func strictParsing() throws {
        let world = try TokenWorld()
        let verifier = world.verifier()
        for junk in [
            "", "~", "a~b", "..~..", world.delegation.compact, world.token.compact + "~", "~" + world.token.compact,
            world.token.compact.replacingOccurrences(of: "~", with: "."), String(repeating: "A", count: 5000),
            world.token.compact + String(repeating: "A", count: 4096 - world.token.compact.utf8.count + 1),
            world.token.compact + " ", "\u{0}", "é~é",
        ] {
            #expect(code(verifier.verify(junk, now: t0 + 10)) == 101, "\(junk.prefix(40))")
        }
        // alg none: a header that says none, an empty signature.
        let noneHeader = Base64URL.encode(
            Array(#"{"alg":"none","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt"}"#.utf8))
        let parts = world.delegation.compact.split(separator: ".")
        let unsigned = noneHeader + "." + parts[1] + "."
        #expect(judge(world, delegation: unsigned).code == 101)
        #expect(judge(world, delegation: noneHeader + "." + parts[1] + "." + parts[2]).reason.contains("alg none"))
        // HS256 and a header member we do not know (crit) are refused too.
        for header in [
            #"{"alg":"HS256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt"}"#,
            #"{"alg":"ES256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt","crit":["x"]}"#,
            #"{"alg":"ES256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"JWT"}"#,
            #"{"alg":"ES256","alg":"ES256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt"}"#,
        ] {
            let input = Base64URL.encode(Array(header.utf8)) + "." + parts[1]
            let signature = try world.issuingKey.sign(Array(input.utf8))
            #expect(judge(world, delegation: input + "." + Base64URL.encode(signature)).code == 101, "\(header)")
        }
    }

    @Test("Step 1: a properly signed token over 4096 bytes is 101")
    func oversize() throws {
        let world = try TokenWorld()
        let long = String(repeating: "x", count: 256)
        let delegation = try world.delegation(
            payload: world.delegationPayload(sub: long, app: long, ctr: long))
        let challenge = String(repeating: "\\\"", count: 1024)  // 1024 quotes, each escaped in the JSON
        let token = try world.tokenPart(payload: world.tokenPayload(challenge: challenge))
        #expect((delegation + "~" + token).utf8.count > 4096)
        #expect(delegation.utf8.count < 4096 && token.utf8.count < 4096)
        let result = judge(world, delegation: delegation, token: token)
        #expect(result.code == 101)
        #expect(result.reason == "longer than 4096 bytes")
        let parseError = try #require(throws: DCError.self) { try AuthToken(parsing: delegation + "~" + token) }
        #expect(parseError.message.contains("longer than 4096 bytes"))
        // The same parts with a short challenge verify: only the size was wrong.
        let short = try world.tokenPart(payload: world.tokenPayload(challenge: "short"))
        #expect(judge(world, delegation: delegation, token: short).code == 100)
    }

    @Test("Step 1: a properly signed payload with a duplicate, unknown or missing member is 101")
    func strictPayloads() throws {
        let world = try TokenWorld()
        let good = world.delegationPayload()
        #expect(judge(world, delegation: try world.delegation(payload: good)).code == 100)
        let duplicate = good.replacingOccurrences(
            of: #""sub":"alice@example.com","#, with: #""sub":"alice@example.com","sub":"mallory@example.com","#)
        let result = judge(world, delegation: try world.delegation(payload: duplicate))
        #expect(result.code == 101)
        #expect(result.reason.contains("twice"))
        let escapedDuplicate = good.replacingOccurrences(
            of: #""sub":"alice@example.com","#, with: #""sub":"alice@example.com","\u0073ub":"mallory","#)
        #expect(judge(world, delegation: try world.delegation(payload: escapedDuplicate)).code == 101)
        let unknown = good.replacingOccurrences(of: #""v":1,"#, with: #""v":1,"admin":true,"#)
        #expect(judge(world, delegation: try world.delegation(payload: unknown)).code == 101)
        let missing = good.replacingOccurrences(of: #""sub":"alice@example.com","#, with: "")
        #expect(judge(world, delegation: try world.delegation(payload: missing)).code == 101)
        let version2 = good.replacingOccurrences(of: #""v":1,"#, with: #""v":2,"#)
        #expect(judge(world, delegation: try world.delegation(payload: version2)).code == 101)
        let float = good.replacingOccurrences(of: #""v":1,"#, with: #""v":1.0,"#)
        #expect(judge(world, delegation: try world.delegation(payload: float)).code == 101)
        // A delegation longer than 24 h, or whose identity cannot travel in a header.
        let long = world.delegationPayload(exp: world.delegation.claims.notBefore + 86_401)
        #expect(judge(world, delegation: try world.delegation(payload: long)).code == 101)
        let spaced = world.delegationPayload(sub: " alice")
        #expect(judge(world, delegation: try world.delegation(payload: spaced)).code == 101)
        // The token's payload follows the same rules.
        let tokenDuplicate = world.tokenPayload().replacingOccurrences(
            of: #""ch":"one-use challenge 42","#, with: #""ch":"one-use challenge 42","ch":"other","#)
        #expect(judge(world, token: try world.tokenPart(payload: tokenDuplicate)).code == 101)
        #expect(judge(world, token: try world.tokenPart(payload: world.tokenPayload())).code == 100)
        let tokenLong = world.tokenPayload(iat: t0Seconds, exp: t0Seconds + 601)
        #expect(judge(world, token: try world.tokenPart(payload: tokenLong)).code == 101)
    }

    @Test("Step 2: an untrusted kid is 101, a revoked one 103")
    func issuingKey() throws {
        let world = try TokenWorld()
        let other = try Keys.other
        let untrusted = judge(world, issuers: TrustedIssuers([other.publicKey]))
        #expect(untrusted.code == 101)
        #expect(untrusted.reason == "the issuing key is not trusted")
        #expect(judge(world, issuers: .empty).code == 101)
        // A delegation that names a key id nobody trusts, signed by that key.
        let foreign = try world.delegation(
            payload: world.delegationPayload(), key: other, keyID: other.publicKey.thumbprint)
        #expect(judge(world, delegation: foreign).code == 101)
        let revoked = RevocationList(revokedIssuerKeys: [world.issuingKey.publicKey.thumbprint])
        let result = judge(world, revocations: revoked)
        #expect(result.code == 103)
        #expect(result.reason == "the issuing key is revoked")
        // Untrusted comes first: an untrusted and revoked key is 101.
        #expect(judge(world, revocations: revoked, issuers: TrustedIssuers([other.publicKey])).code == 101)
    }

    @Test("Step 3: a forged or altered delegation is 101; outside nbf..exp it is 102")
    func delegationSignatureAndTime() throws {
        let world = try TokenWorld()
        // Forged: signed by another key but claiming the trusted kid.
        let forged = try world.delegation(payload: world.delegationPayload(), key: try Keys.other)
        let result = judge(world, delegation: forged)
        #expect(result.code == 101)
        #expect(result.reason == "the delegation's signature does not verify")
        // Altered: another user in the payload, the original signature kept.
        let parts = world.delegation.compact.split(separator: ".").map(String.init)
        let altered = Base64URL.encode(Array(world.delegationPayload(sub: "mallory@example.com").utf8))
        #expect(judge(world, delegation: parts[0] + "." + altered + "." + parts[2]).code == 101)
        // Expired and not yet valid (beyond the minute of skew).
        let expires = world.delegation.claims.expires
        let atExpiry = judge(world, now: Date(timeIntervalSince1970: TimeInterval(expires)))
        #expect(atExpiry.code == 102)
        #expect(atExpiry.reason == "the delegation has expired")
        let early = judge(world, now: Date(timeIntervalSince1970: TimeInterval(world.delegation.claims.notBefore - 61)))
        #expect(early.code == 102)
        #expect(early.reason == "the delegation is not valid yet")
        // Expiry comes before revocation of the delegation (step 3 before step 4).
        let revokedJTI = RevocationList(revokedDelegations: [world.delegation.claims.id])
        #expect(
            judge(world, now: Date(timeIntervalSince1970: TimeInterval(expires)), revocations: revokedJTI).code == 102)
    }

    @Test("Step 4: a revoked jti or a retired container is 103")
    func revocations() throws {
        let world = try TokenWorld()
        let jti = judge(world, revocations: RevocationList(revokedDelegations: [world.delegation.claims.id]))
        #expect(jti.code == 103)
        #expect(jti.reason == "the delegation is revoked")
        let retired = RevocationList(
            retiredContainers: [.init(appID: "com.example.mail", containerID: "c0ffee00c0ffee00")])
        #expect(judge(world, revocations: retired).reason == "the container is retired")
        #expect(judge(world, revocations: retired).code == 103)
        // Another container of the same app, or the same container id of another app, is not retired.
        let others = RevocationList(
            revokedDelegations: ["0123456789abcdef0123456789abcdef"],
            retiredContainers: [
                .init(appID: "com.example.mail", containerID: "other"),
                .init(appID: "other", containerID: "c0ffee00c0ffee00"),
            ])
        #expect(judge(world, revocations: others).code == 100)
        // Revocation comes before the token's own checks (step 4 before step 5).
        let badToken = try world.tokenPart(payload: world.tokenPayload(), key: try Keys.other)
        #expect(judge(world, token: badToken, revocations: retired).code == 103)
    }

    @Test("Step 5: another key's token, an altered token, dlg ≠ jti, or a token outliving its delegation is 101")
    func tokenSignatureAndBinding() throws {
        let world = try TokenWorld()
        // Signed by a key the delegation does not certify.
        let stranger = judge(world, token: try world.tokenPart(payload: world.tokenPayload(), key: try Keys.other))
        #expect(stranger.code == 101)
        #expect(stranger.reason == "the token's signature does not verify under the delegated key")
        // The challenge altered after signing.
        let parts = world.token.jws.text.split(separator: ".").map(String.init)
        let altered = Base64URL.encode(Array(world.tokenPayload(challenge: "another challenge").utf8))
        #expect(judge(world, token: parts[0] + "." + altered + "." + parts[2]).code == 101)
        // Properly signed, but naming another delegation.
        let other = judge(
            world, token: try world.tokenPart(payload: world.tokenPayload(dlg: String(repeating: "ab", count: 16))))
        #expect(other.code == 101)
        #expect(other.reason == "the token names another delegation")
        // A token of a delegation that expires in 100 s, claiming 600 s.
        let short = try TokenWorld(lifetime: 100)
        let outliving = try short.tokenPart(payload: short.tokenPayload(iat: t0Seconds, exp: t0Seconds + 600))
        #expect(judge(short, token: outliving).reason == "the token outlives its delegation")
    }

    @Test(
        "Steps 3 and 5: the high-S twin (r, n − s) of a genuine delegation or token, which PyJWT and pyca/cryptography accept as ES256, is 101; the client refuses the twin delegation"
    )
    func highSTwins() throws {
        let world = try TokenWorld()
        /// The twin the oracle makes with integer arithmetic on the P-256 order, after PyJWT and
        /// pyca/cryptography showed it is a valid ES256 signature of the same bytes (the attack is real).
        func twin(_ jws: String, _ key: TokenPublicKey) throws -> String {
            let answer = try oracle("twin", ["jws": jws, "jwk": ["x": key.jwkX, "y": key.jwkY]])
            #expect(answer["differs"] as? Bool == true)
            #expect(answer["highS"] as? Bool == true)
            return try #require(answer["twin"] as? String)
        }
        let delegationTwin = try twin(world.delegation.compact, world.issuingKey.publicKey)
        let tokenTwin = try twin(world.token.jws.text, world.tokenKey.publicKey)
        #expect(judge(world).code == 100)
        let forgedDelegation = judge(world, delegation: delegationTwin)
        #expect(forgedDelegation == (101, "the delegation's signature does not verify"))
        let forgedToken = judge(world, token: tokenTwin)
        #expect(forgedToken == (101, "the token's signature does not verify under the delegated key"))
        #expect(judge(world, delegation: delegationTwin, token: tokenTwin).code == 101)
        // A verifier that already holds the genuine delegation in its cache: the twin's text is another key.
        let verifier = world.verifier()
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        #expect(code(verifier.verify(delegationTwin + "~" + world.token.jws.text, now: t0 + 10)) == 101)
        // The client keeps no twin of its provider's delegation either.
        #expect(throws: DCError.self) {
            try Delegation.received(delegationTwin, issuer: world.issuingKey.publicKey, now: t0 + 10)
        }
        #expect(
            try Delegation.received(world.delegation.compact, issuer: world.issuingKey.publicKey, now: t0 + 10)
                == world.delegation)
    }

    @Test("Step 6: an expired token, or one made more than a minute in the future, is 102")
    func tokenTime() throws {
        let world = try TokenWorld()
        let expires = world.token.claims.expires
        #expect(judge(world, now: Date(timeIntervalSince1970: TimeInterval(expires - 1))).code == 100)
        let expired = judge(world, now: Date(timeIntervalSince1970: TimeInterval(expires)))
        #expect(expired.code == 102)
        #expect(expired.reason == "the token has expired")
        let future = try world.tokenPart(payload: world.tokenPayload(iat: t0Seconds + 100, exp: t0Seconds + 400))
        #expect(judge(world, token: future, now: t0).reason == "the token is from the future")
        #expect(judge(world, token: future, now: t0 + 39).code == 102)
        #expect(judge(world, token: future, now: t0 + 40).code == 100)  // within the minute of skew
    }

    @Test("Changing any one character of a token never gives 100")
    func everyCharacter() throws {
        let world = try TokenWorld()
        let verifier = world.verifier()
        let text = Array(world.token.compact)
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        var accepted: [Int] = []
        for index in text.indices {
            var changed = text
            changed[index] = text[index] == "A" ? "B" : "A"
            if code(verifier.verify(String(changed), now: t0 + 10)) == 100 { accepted.append(index) }
        }
        #expect(accepted.isEmpty)
    }

    @Test("Fuzz seeds of every harness and hostile strings are refused without a crash")
    func hostileInputs() throws {
        let world = try TokenWorld()
        let verifier = world.verifier()
        var inputs = ["FuzzDeliveryURL", "FuzzDeliveryPayload", "FuzzPolicyMessage"].flatMap { FuzzInputs.all($0) }
            .map { String(decoding: $0.bytes, as: UTF8.self) }
        inputs += [
            String(repeating: "~", count: 4096), String(repeating: ".", count: 4096),
            String(repeating: "eyJ", count: 1365), world.token.compact.uppercased(),
        ]
        #expect(!inputs.isEmpty)
        for input in inputs { #expect(code(verifier.verify(input, now: t0 + 10)) == 101) }
    }
}

@Suite("The delegation cache and reloaded trust", .ownThreads, .timeLimit(.minutes(2)))
struct VerifierStateTests {
    @Test("A cached delegation is still checked against the current trust and revocations")
    func cacheDoesNotSkipChecks() throws {
        let world = try TokenWorld()
        let trust = MutableTrust(issuers: world.issuers)
        let verifier = AuthTokenVerifier(issuers: { trust.issuers }, revocations: { trust.revocations })
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        trust.revocations = RevocationList(revokedDelegations: [world.delegation.claims.id])
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 103)
        trust.revocations = RevocationList(revokedIssuerKeys: [world.issuingKey.publicKey.thumbprint])
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 103)
        trust.revocations = .empty
        trust.issuers = .empty
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 101)
        trust.issuers = world.issuers
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        let expires = Date(timeIntervalSince1970: TimeInterval(world.delegation.claims.expires))
        #expect(code(verifier.verify(world.token.compact, now: expires)) == 102)
    }

    @Test("Many threads verify through one verifier, with the cache overflowing, and get the right verdicts")
    func concurrent() async throws {
        let world = try TokenWorld()
        let verifier = world.verifier(cacheCapacity: 4)
        // Delegations for eight containers, so the four-entry cache keeps evicting.
        var tokens: [String] = []
        for index in 0..<8 {
            let delegation = try Delegation.issue(
                issuer: "org.example.provider", userID: "user\(index)", appID: "com.example.mail",
                containerID: "ctr\(index)", tokenKey: world.tokenKey.publicKey, issuingKey: world.issuingKey, now: t0)
            tokens.append(
                try AuthToken.make(
                    challenge: "c\(index)", serverName: "", delegation: delegation, tokenKey: world.tokenKey, now: t0
                )
                .compact)
        }
        let all = tokens
        let wrong = await withTaskGroup(of: Int.self) { group in
            for task in 0..<6 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<40 {
                        let index = (round + task) % all.count
                        let identity = verifier.verify(all[index], now: t0 + 5).identity
                        if identity?.userID != "user\(index)" || identity?.challenge != "c\(index)" { wrong += 1 }
                        if code(verifier.verify(all[index] + "x", now: t0 + 5)) != 101 { wrong += 1 }
                    }
                    return wrong
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }

    @Test("With the default check interval, a revocation written on disk is in force 20 ms later, without a restart")
    func revocationInForceAtOnce() async throws {
        let world = try TokenWorld()
        let dir = try TemporaryDirectory("reload-default")
        defer { dir.remove() }
        let path = dir.file("revocations.json")
        try RevocationList.empty.write(to: path)
        try world.issuers.write(to: dir.file("issuers.json"))
        let verifier = AuthTokenVerifier(
            issuers: try Reloading(issuersAt: dir.file("issuers.json")), revocations: try Reloading(revocationsAt: path)
        )
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        try RevocationList(issued: 1, revokedDelegations: [world.delegation.claims.id]).write(to: path)
        try await Task.sleep(for: .milliseconds(20))
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 103)
    }

    @Test(
        "A revocation file replaced on disk takes effect within the check interval; a broken one keeps the last good list"
    )
    func reloading() async throws {
        let world = try TokenWorld()
        let dir = try TemporaryDirectory("reload")
        defer { dir.remove() }
        let path = dir.file("revocations.json")
        try RevocationList.empty.write(to: path)
        try world.issuers.write(to: dir.file("issuers.json"))
        let revocations = try Reloading(revocationsAt: path, checkInterval: .milliseconds(100))
        let issuers = try Reloading(issuersAt: dir.file("issuers.json"), checkInterval: .milliseconds(100))
        let verifier = AuthTokenVerifier(issuers: issuers, revocations: revocations)
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)

        try RevocationList(issued: 1, revokedDelegations: [world.delegation.claims.id]).write(to: path)
        try await Task.sleep(for: .milliseconds(150))
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 103)
        #expect(revocations.lastError == nil)

        // A broken file: the last good list stays in force, and the error is reported.
        _ = try dir.write("revocations.json.new", "{\"v\":1,")
        #expect(rename(dir.file("revocations.json.new"), path) == 0)
        try await Task.sleep(for: .milliseconds(150))
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 103)
        #expect(revocations.lastError?.code == .invalid)
        #expect(throws: DCError.self) { try revocations.reload() }

        // Fixed again, and read at once by an explicit reload.
        try RevocationList(issued: 2).write(to: path)
        try revocations.reload()
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 100)
        #expect(revocations.lastError == nil)

        // The issuing key removed from the trusted set: refused without a restart.
        try TrustedIssuers([try Keys.other.publicKey]).write(to: dir.file("issuers.json"))
        try await Task.sleep(for: .milliseconds(150))
        #expect(code(verifier.verify(world.token.compact, now: t0 + 10)) == 101)
    }

    @Test("A changed file is read on its own thread: the value never waits for the reading, and changes whole")
    func readingOffTheCaller() async throws {
        let dir = try TemporaryDirectory("reload-thread")
        defer { dir.remove() }
        let path = try dir.write("trust", "first")
        let gate = DispatchSemaphore(value: 0)
        let readers = ThreadNames()
        let file = try Reloading<String>(path: path, checkInterval: .milliseconds(5)) { path in
            let text = try String(contentsOfFile: path, encoding: .utf8)
            if text == "second" {
                readers.append(Thread.current.name)
                gate.wait()  // a slow disk, or a parser that takes its time
            }
            return text
        }
        _ = try dir.write("trust.new", "second")
        #expect(rename(dir.file("trust.new"), path) == 0)
        try await eventually { !readers.all.isEmpty }
        // The reading is stuck; the caller is not, and sees the last value whole.
        let start = ContinuousClock.now
        #expect(file.value == "first")
        #expect(ContinuousClock.now - start < .milliseconds(100))
        gate.signal()
        try await eventually { file.value == "second" }
        #expect(readers.all == ["trust-file"])
    }

    @Test("A missing or malformed file is refused when the verifier starts")
    func startupErrors() throws {
        let dir = try TemporaryDirectory("reload-start")
        defer { dir.remove() }
        let missing = try #require(throws: DCError.self) { try Reloading(revocationsAt: dir.file("none.json")) }
        #expect(missing.code == .fileNotFound)
        let broken = try #require(throws: DCError.self) {
            try Reloading(issuersAt: try dir.write("keys.json", #"{"keys":[{"kty":"RSA"}]}"#))
        }
        #expect(broken.code == .invalid)
        #expect(broken.subject == dir.file("keys.json"))
    }
}

/// The names of the threads a reading ran on.
final class ThreadNames: Sendable {
    private let names = Mutex<[String?]>([])
    func append(_ name: String?) { names.withLock { $0.append(name) } }
    var all: [String?] { names.withLock { $0 } }
}

/// Trust that a test changes between calls.
final class MutableTrust: @unchecked Sendable {
    // Only touched under `lock`.
    private let lock = NSLock()
    private var _issuers: TrustedIssuers
    private var _revocations = RevocationList.empty
    init(issuers: TrustedIssuers) { _issuers = issuers }
    var issuers: TrustedIssuers {
        get { lock.withLock { _issuers } }
        set { lock.withLock { _issuers = newValue } }
    }
    var revocations: RevocationList {
        get { lock.withLock { _revocations } }
        set { lock.withLock { _revocations = newValue } }
    }
}
