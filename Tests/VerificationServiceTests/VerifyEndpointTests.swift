import Foundation
import ServiceHarness
import TestSupport
import Testing
import VerificationService

/// `GET /verifyGDAuthToken` through a real `dcverify serve` process, real tokens and real sockets.
@Suite("GET /verifyGDAuthToken: response codes and identity headers", .ownThreads, .timeLimit(.minutes(3)))
struct VerifyEndpointTests {
    @Test("a genuine token: 200, 100 OK and the seven identity headers, names in their exact case")
    func genuine() throws {
        let sandbox = try Sandbox("verify-genuine")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let valid = Tokens.validWithCreationTime
        let response = try #require(
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", valid.token)]))
        #expect(response.status == 200)
        #expect(response.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        #expect(response.values("X-Good-GD-AuthChallenge") == [Tokens.challenge])
        #expect(response.values("X-Good-GD-Server") == ["app.example.com"])
        #expect(response.values("X-Good-GD-UserID") == ["alice@example.com"])
        #expect(response.values("X-Good-GD-AppID") == ["com.example.mail"])
        #expect(response.values("X-Good-GD-ContainerID") == ["c-42"])
        #expect(response.values("X-Good-GD-AuthTokenVersion") == ["1"])
        #expect(response.values("X-Good-GD-AuthTokenCreationTime") == [valid.created])
        // Exactly these eight, each once, and in exactly this case (app servers compare names
        // case-sensitively).
        #expect(
            response.goodFields.sorted()
                == (["X-Good-GD-AuthResponseCode"] + VerificationHeaders.identity).sorted())
        // An IMF-fixdate Date header, as HTTP servers send, within a minute of now.
        let date = try #require(response.values("Date").first)
        let parser = DateFormatter()
        parser.locale = Locale(identifier: "en_US_POSIX")
        parser.timeZone = TimeZone(identifier: "GMT")
        parser.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let sent = try #require(parser.date(from: date), "\(date)")
        #expect(abs(sent.timeIntervalSinceNow) < 60)
        // The sample app server parses the code with /([0-9]+)\s+/: digits, a space, text.
        #expect(response.values("X-Good-GD-AuthResponseCode").first?.firstMatch(of: #/^[0-9]+ /#) != nil)
    }

    @Test("curl sees the same headers; a query string does not change the path")
    func throughCurl() throws {
        let sandbox = try Sandbox("verify-curl")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let result = try curl(
            ["-H", "X-Good-GD-AuthToken: \(Tokens.valid)", service.url("/verifyGDAuthToken?ignored=1")],
            sandbox: sandbox)
        #expect(result.status == 0, "\(result.stderrText)")
        let response = try #require(RawResponse(result.stdout))
        #expect(response.status == 200)
        #expect(response.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        #expect(response.values("X-Good-GD-AuthChallenge") == [Tokens.challenge])
    }

    @Test(
        "an expired, revoked or unknown token: 200 with its code and no identity header",
        arguments: [
            (Tokens.expired, "102 Expired Token"), (Tokens.revoked, "103 Revoked"), ("nope", "101 Invalid Token"),
        ]
    )
    func refused(token: String, code: String) throws {
        let sandbox = try Sandbox("verify-refused")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let response = try #require(
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)]))
        #expect(response.status == 200)
        #expect(response.values("X-Good-GD-AuthResponseCode") == [code])
        #expect(response.goodFields == ["X-Good-GD-AuthResponseCode"])
    }

    @Test("pipelined requests on one connection are answered in the order they came")
    func pipelined() throws {
        // Verifications are answered on the event loop, other paths by Hummingbird's tasks, which
        // answer later: a verification behind one of those must wait its turn.
        let sandbox = try Sandbox("verify-pipelined")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let connection = try RawConnection(port: service.port)
        func request(_ path: String, token: String? = nil, close: Bool = false) -> String {
            "GET \(path) HTTP/1.1\r\nHost: x\r\n" + (token.map { "X-Good-GD-AuthToken: \($0)\r\n" } ?? "")
                + (close ? "Connection: close\r\n" : "") + "\r\n"
        }
        connection.send(
            request("/health") + request("/verifyGDAuthToken", token: Tokens.valid)
                + request("/verifyGDAuthToken", token: Tokens.expired) + request("/nowhere")
                + request("/verifyGDAuthToken", token: Tokens.revoked) + request("/health")
                + request("/verifyGDAuthToken", token: Tokens.valid, close: true))
        let (bytes, closed) = connection.readUntilClosed(timeout: .seconds(20))
        #expect(closed, "the connection stays open after Connection: close")
        let answers = RawResponse.all(in: bytes).map { response in
            response.values("X-Good-GD-AuthResponseCode").first ?? "\(response.status)"
        }
        #expect(answers == ["200", "100 OK", "102 Expired Token", "404", "103 Revoked", "200", "100 OK"])
    }

    @Test("verifying twice gives the same answer (nothing is consumed)")
    func idempotent() throws {
        let sandbox = try Sandbox("verify-twice")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let answers = try (0..<2).map { _ in
            try #require(
                try rawRequest(
                    port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)]))
        }
        #expect(answers[0].values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        #expect(
            answers[0].fields.filter { $0.name != "Date" }.map { "\($0)" }
                == answers[1].fields.filter { $0.name != "Date" }.map { "\($0)" })
    }

    /// A request whose token header is wrong, described briefly in the test's name.
    struct BadHeaders: Sendable, CustomTestStringConvertible {
        var label: String
        var headers: [(String, String)]
        var testDescription: String { label }
    }

    static let badHeaders = [
        BadHeaders(label: "missing", headers: []),
        BadHeaders(
            label: "repeated", headers: [("X-Good-GD-AuthToken", Tokens.valid), ("X-Good-GD-AuthToken", Tokens.valid)]),
        BadHeaders(
            label: "repeated, in another case",
            headers: [("X-Good-GD-AuthToken", Tokens.valid), ("x-good-gd-authtoken", "x")]),
        BadHeaders(label: "4097 bytes", headers: [("X-Good-GD-AuthToken", String(repeating: "a", count: 4097))]),
        BadHeaders(
            label: "20000 bytes (over the decoder's field limit)",
            headers: [("X-Good-GD-AuthToken", String(repeating: "a", count: 20000))]),
    ]

    @Test(
        "a missing, repeated or oversized token header: 400, no identity, the service lives on", arguments: badHeaders)
    func badRequest(_ bad: BadHeaders) throws {
        let (label, headers) = (bad.label, bad.headers)
        let sandbox = try Sandbox("verify-bad")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let response = try #require(try rawRequest(port: service.port, "/verifyGDAuthToken", headers: headers))
        #expect(response.status == 400, "\(label)")
        #expect(response.goodFields.isEmpty, "\(label)")
        let health = try #require(try rawRequest(port: service.port, "/health"))
        #expect(health.status == 200, "still serving after \(label)")
    }

    @Test("a 4096-byte token is within the limit (answered 200, here 101)")
    func largestToken() throws {
        let sandbox = try Sandbox("verify-4096")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        let response = try #require(
            try rawRequest(
                port: service.port, "/verifyGDAuthToken",
                headers: [("X-Good-GD-AuthToken", String(repeating: "a", count: ServiceConfiguration.maximumTokenSize))]
            ))
        #expect(response.status == 200)
        #expect(response.values("X-Good-GD-AuthResponseCode") == ["101 Invalid Token"])
    }

    @Test("the log says the outcome but never the token or the challenge, even at trace level")
    func logsHoldNoSecrets() throws {
        let sandbox = try Sandbox("verify-logs")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox, ["--log-level", "trace"])
        for token in [Tokens.valid, Tokens.expired, "tok-unknown-secret"] {
            _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
        }
        _ = try rawRequest(
            port: service.port, "/verifyGDAuthToken",
            headers: [("X-Good-GD-AuthToken", Tokens.valid), ("X-Good-GD-AuthToken", Tokens.valid)])
        #expect(service.stop() == 0)
        let log = service.logText
        #expect(log.contains("dc.code=100"), "\(log)")
        #expect(log.contains("dc.code=102"))
        #expect(log.contains("dc.status=400"))
        // Not the tokens, nor any of their parts (each signature and payload of a real token).
        let parts = [Tokens.valid, Tokens.expired].flatMap { $0.split(whereSeparator: { "~.".contains($0) }) }
        for secret in [Tokens.valid, Tokens.expired, "tok-unknown-secret", Tokens.challenge, "7f3a"]
            + parts.map(String.init)
        {
            #expect(!log.contains(secret), "the log holds '\(secret)'")
        }
    }
}
