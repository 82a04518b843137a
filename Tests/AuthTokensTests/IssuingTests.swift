import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("Issuing delegations and making tokens", .ownThreads, .timeLimit(.minutes(2)))
struct IssuingTests {
    @Test("A delegation and a token round-trip through their text, with the documented headers and members")
    func roundTrip() throws {
        let world = try TokenWorld()
        let parsed = try AuthToken(parsing: world.token.compact)
        #expect(parsed == world.token)
        #expect(try Delegation(parsing: world.delegation.compact) == world.delegation)
        #expect(
            try Delegation.received(world.delegation.compact, issuer: world.issuingKey.publicKey, now: t0 + 1)
                == world.delegation)
        let compact = world.token.compact
        #expect(
            compact.utf8.allSatisfy { byte in
                (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte)
                    || [0x2D, 0x5F, 0x2E, 0x7E].contains(byte)
            })
        #expect(compact.utf8.count < 1400)
        let header = { (jws: String) in
            String(decoding: Base64URL.decode(String(jws.split(separator: ".")[0]))!, as: UTF8.self)
        }
        #expect(
            header(world.delegation.compact)
                == #"{"alg":"ES256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt"}"#)
        #expect(header(world.token.jws.text) == #"{"alg":"ES256","typ":"dc-auth+jwt"}"#)
        #expect(String(decoding: world.delegation.jws.payload, as: UTF8.self) == world.delegationPayload())
        #expect(String(decoding: world.token.jws.payload, as: UTF8.self) == world.tokenPayload())
        let claims = world.delegation.claims
        #expect(claims.notBefore == t0Seconds && claims.expires == t0Seconds + 3600)
        #expect(claims.id.count == 32 && claims.tokenKey == world.tokenKey.publicKey)
        #expect(world.token.claims.issuedAt == t0Seconds && world.token.claims.expires == t0Seconds + 600)
        #expect(world.delegation.keyID == world.issuingKey.publicKey.thumbprint)
    }

    @Test("A token is redacted when printed")
    func redaction() throws {
        let world = try TokenWorld()
        var dumped = ""
        dump(world.token, to: &dumped)
        let signature = String(world.token.jws.text.split(separator: ".")[2])
        for text in [String(describing: world.token), String(reflecting: world.token), dumped] {
            #expect(!text.contains(signature))
            #expect(text.contains("redacted"))
        }
    }

    @Test(
        "A challenge or server name outside printable ASCII, with a space at either end, or too long is refused",
        arguments: [
            "tab\there", "new\nline", "caf\u{e9}", "\u{7f}", " leading", "trailing ", " ", "emoji \u{1F600}",
            "nul\u{0}", String(repeating: "x", count: 1025),
        ])
    func challengeRules(_ value: String) throws {
        let world = try TokenWorld()
        let challengeError = try #require(throws: DCError.self) {
            try AuthToken.make(
                challenge: value, serverName: "s", delegation: world.delegation, tokenKey: world.tokenKey, now: t0)
        }
        #expect(challengeError.code == .invalidChallenge)
        #expect(challengeError.code.category == .usage)
        #expect(challengeError.message.contains("the challenge"))
        let serverError = try #require(throws: DCError.self) {
            try AuthToken.make(
                challenge: "c", serverName: value, delegation: world.delegation, tokenKey: world.tokenKey, now: t0)
        }
        #expect(serverError.code == .invalidChallenge)
        #expect(serverError.message.contains("the server name"))
    }

    @Test("Every printable ASCII character, an empty challenge and inner spaces are accepted and come back")
    func challengeAccepted() throws {
        let world = try TokenWorld()
        let everything = String(decoding: Array(33...126) + [0x20, 0x41], as: UTF8.self)
        for (challenge, server) in [(everything, "a b"), ("", ""), ("a  b", "x\"y\\z")] {
            let token = try AuthToken.make(
                challenge: challenge, serverName: server, delegation: world.delegation, tokenKey: world.tokenKey,
                now: t0)
            let identity = try world.verifier().verify(token.compact, now: t0 + 1).outcome.get()
            #expect(identity.challenge == challenge)
            #expect(identity.serverName == server)
        }
    }

    @Test("A token that would exceed 4096 bytes is refused, with a hint")
    func tooLong() throws {
        let world = try TokenWorld()
        let error = try #require(throws: DCError.self) {
            try AuthToken.make(
                challenge: String(repeating: "\"", count: 1024), serverName: String(repeating: "\\", count: 255),
                delegation: world.delegation, tokenKey: world.tokenKey, now: t0)
        }
        #expect(error.code == .invalidChallenge)
        #expect(error.message.contains("4096"))
    }

    @Test("The client refuses an expired delegation, one for another key, or one not signed by its provider")
    func clientSide() throws {
        let world = try TokenWorld()
        let expired = try #require(throws: DCError.self) {
            try AuthToken.make(
                challenge: "c", serverName: "", delegation: world.delegation, tokenKey: world.tokenKey, now: t0 + 3600)
        }
        #expect(expired.code == .delegationNotValid)
        let otherKey = try #require(throws: DCError.self) {
            try AuthToken.make(
                challenge: "c", serverName: "", delegation: world.delegation, tokenKey: try Keys.other, now: t0)
        }
        #expect(otherKey.code == .delegationNotValid)
        let forged = try #require(throws: DCError.self) {
            try Delegation.received(world.delegation.compact, issuer: try Keys.other.publicKey, now: t0)
        }
        #expect(forged.code == .invalid)
        #expect(throws: DCError.self) {
            try Delegation.received(world.delegation.compact, issuer: world.issuingKey.publicKey, now: t0 + 3600)
        }
        // A token never outlives its delegation: 100 s left means exp = now + 100.
        let token = try AuthToken.make(
            challenge: "c", serverName: "", delegation: world.delegation, tokenKey: world.tokenKey, now: t0 + 3500)
        #expect(token.claims.expires == t0Seconds + 3600)
    }

    @Test("The provider refuses an identity that cannot travel in a header, and a lifetime over 24 h")
    func issuingRules() throws {
        let key = try Keys.issuing
        let tokenKey = try Keys.token.publicKey
        for (user, lifetime) in [("", Int64(3600)), ("caf\u{e9}", 3600), ("ok", 86_401), ("ok", 0), (" x", 3600)] {
            let error = try #require(throws: DCError.self) {
                try Delegation.issue(
                    issuer: "p", userID: user, appID: "a", containerID: "c", tokenKey: tokenKey, issuingKey: key,
                    now: t0,
                    lifetime: lifetime)
            }
            #expect(error.code == .invalid)
        }
    }
}

@Suite("Strict JSON (through signed delegations)", .ownThreads, .timeLimit(.minutes(2)))
struct StrictJSONTests {
    /// A change to an otherwise valid delegation payload, and what the refusal must say.
    struct Case: Sendable, CustomStringConvertible {
        var from: String
        var to: String
        var reason: String
        var description: String { "\(from) → \(to)" }
    }

    @Test(
        "Malformed or ambiguous JSON in a properly signed payload is refused by the parser's own rule",
        arguments: [
            Case(from: #""v":1,"#, to: #""v":1,"v":1,"#, reason: "twice"),
            Case(
                from: #""sub":"alice@example.com","#, to: #""sub":"alice@example.com","\u0073ub":"x","#, reason: "twice"
            ),
            Case(from: #""v":1,"#, to: #""v":01,"#, reason: "leading zero"),
            Case(from: #""v":1,"#, to: #""v":1e0,"#, reason: "only integers"),
            Case(from: #""v":1,"#, to: #""v":1.0,"#, reason: "only integers"),
            Case(from: #""v":1,"#, to: #""v":-0,"#, reason: "-0"),
            Case(from: #""v":1,"#, to: #""v":99999999999999999999,"#, reason: "64 bits"),
            Case(from: #""iss":"org.example.provider""#, to: #""iss":"\ud800""#, reason: "lone surrogate"),
            Case(from: #""iss":"org.example.provider""#, to: #""iss":"\udc00\ud800""#, reason: "lone surrogate"),
            Case(from: #""iss":"org.example.provider""#, to: "\"iss\":\"a\u{1}b\"", reason: "control character"),
            Case(from: #""iss":"org.example.provider""#, to: #""iss":"\x""#, reason: "unknown escape"),
            Case(from: #""iss":"org.example.provider""#, to: #""iss":[[[[[[[[["a"]]]]]]]]]"#, reason: "deeply"),
            Case(from: #""iss":"org.example.provider""#, to: #""iss":tru"#, reason: "not a JSON value"),
            Case(from: #""v":1,"#, to: #""v":1,,"#, reason: "no name"),
            Case(from: #"{"v":1,"#, to: #"{'v':1,"#, reason: "no name"),
            Case(from: #"{"v":1,"#, to: "\u{feff}{\"v\":1,", reason: "not a JSON value"),
            Case(from: #"{"v":1,"#, to: #"[{"v":1,"#, reason: "truncated"),
        ])
    func refused(_ change: Case) throws {
        let world = try TokenWorld()
        let good = world.delegationPayload()
        #expect(good.contains(change.from))
        let payload = good.replacingOccurrences(of: change.from, with: change.to)
        let delegation = try world.delegation(payload: payload)
        let verdict = world.verifier().verify(delegation + "~" + world.token.jws.text, now: t0 + 1)
        let failure = try #require(verdict.failureReason, "accepted \(payload)")
        #expect(failure.failure == .invalid)
        #expect(failure.reason.contains(change.reason), "\(failure.reason)")
    }

    @Test("Bytes that are not UTF-8 in a string, and text after the value, are refused")
    func notUTF8() throws {
        let world = try TokenWorld()
        let good = Array(world.delegationPayload().utf8)
        for (payload, reason) in [
            (good.replacing(Array("alice".utf8), with: [0x61, 0xFF, 0x62]), "UTF-8"),
            (good + Array(" x".utf8), "text after"),
        ] {
            let header = Base64URL.encode(
                Array(#"{"alg":"ES256","kid":"\#(world.issuingKey.publicKey.thumbprint)","typ":"dc-dlg+jwt"}"#.utf8))
            let input = header + "." + Base64URL.encode(payload)
            let jws = input + "." + Base64URL.encode(try world.issuingKey.sign(Array(input.utf8)))
            let verdict = world.verifier().verify(jws + "~" + world.token.jws.text, now: t0 + 1)
            let failure = try #require(verdict.failureReason)
            #expect(failure.reason.contains(reason), "\(failure.reason)")
        }
    }

    @Test("Escapes, surrogate pairs and white space are read as RFC 8259 says")
    func accepted() throws {
        let world = try TokenWorld()
        let payload = world.delegationPayload()
            .replacingOccurrences(
                of: #""iss":"org.example.provider""#, with: #" "iss" : "org.ex\u0061mple.provider\/" "#
            )
            .replacingOccurrences(of: "{\"v\":1,", with: "{\n\t\"v\":1,\r\n")
        let delegation = try world.delegation(payload: payload)
        let parsed = try Delegation(parsing: delegation)
        #expect(parsed.claims.issuer == "org.example.provider/")
        // A non-ASCII user id is valid JSON but cannot travel in a header: refused by the rules, not the parser.
        let emoji = try world.delegation(payload: world.delegationPayload(sub: #"\ud83d\ude00"#))
        let error = try #require(throws: DCError.self) { try Delegation(parsing: emoji) }
        #expect(error.message.contains("sub"))
    }
}
