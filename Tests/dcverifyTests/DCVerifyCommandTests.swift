import AuthTokens
import CredentialCoding
import Foundation
import ServiceHarness
import TestSupport
import Testing

/// `dcverify` as an operator runs it: flags, the configuration file, the paths, TLS, errors.
@Suite("dcverify serve: flags, the config file, exit statuses", .ownThreads, .timeLimit(.minutes(3)))
struct DCVerifyCommandTests {
    @Test("--help documents every option and the configuration file")
    func help() throws {
        let sandbox = try Sandbox("dcverify-help")
        defer { sandbox.remove() }
        let result = try sandbox.run(Binaries.dcverify, ["serve", "--help"])
        #expect(result.status == 0)
        let help = result.stdoutText
        for option in [
            "--config", "--issuers", "--revocations", "--jwks", "--listen", "--tls-certificate", "--tls-key",
            "--port-file", "--threads", "--request-timeout", "--max-connections", "--log-level", "SIGHUP", "SIGTERM",
            "\"tls-certificate\"", "X-Good-GD-AuthToken", "--trust-url", "--trust-key", "--trust-max-age",
        ] {
            #expect(help.contains(option), "serve --help does not mention \(option)")
        }
        let top = try sandbox.run(Binaries.dcverify, ["--help"])
        #expect(top.status == 0)
        #expect(top.stdoutText.contains("serve"))
        #expect(try sandbox.run(Binaries.dcverify, ["--version"]).status == 0)
    }

    @Test("health, JWKS, 404 and 405; a genuine token is 100 OK and junk 101 from dcverify itself")
    func paths() throws {
        let sandbox = try Sandbox("dcverify-paths")
        defer { sandbox.remove() }
        let jwks = try sandbox.write("published.jwks", #"{"keys":[{"kty":"EC","crv":"P-256","kid":"one"}]}"#)
        let service = try RunningService.start(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--jwks", jwks, "--threads", "1"] + verifierFiles(in: sandbox),
            in: sandbox)
        defer { service.stop() }

        let health = try #require(try rawRequest(port: service.port, "/health"))
        #expect(health.status == 200)
        let published = try #require(try rawRequest(port: service.port, "/.well-known/jwks.json"))
        #expect(published.status == 200)
        #expect(published.valuesIgnoringCase("Content-Type") == ["application/json"])
        #expect(published.body == Array(#"{"keys":[{"kty":"EC","crv":"P-256","kid":"one"}]}"#.utf8))
        #expect(try rawRequest(port: service.port, "/nothing")?.status == 404)
        #expect(try rawRequest(port: service.port, "/verifyGDAuthToken/")?.status == 404)
        for method in ["POST", "PUT", "DELETE"] {
            let response = try #require(try rawRequest(port: service.port, "/verifyGDAuthToken", method: method))
            #expect(response.status == 405, "\(method)")
            #expect(response.valuesIgnoringCase("Allow") == ["GET"])
        }
        let genuine = try #require(
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)]))
        #expect(genuine.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        let verify = try #require(
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", "abc")]))
        #expect(verify.status == 200)
        #expect(verify.values("X-Good-GD-AuthResponseCode") == ["101 Invalid Token"])
        #expect(verify.goodFields == ["X-Good-GD-AuthResponseCode"])
        #expect(try rawRequest(port: service.port, "/verifyGDAuthToken")?.status == 400)
    }

    @Test("the JWKS file is re-read when it changes, and on SIGHUP; a broken edit keeps the last good one")
    func jwksReload() async throws {
        let sandbox = try Sandbox("dcverify-jwks")
        defer { sandbox.remove() }
        let jwks = try sandbox.write("published.jwks", #"{"keys":[]}"#)
        let service = try RunningService.start(
            Binaries.dcverify, ["serve", "--listen", "127.0.0.1:0", "--jwks", jwks] + verifierFiles(in: sandbox),
            in: sandbox)
        defer { service.stop() }
        func served() throws -> String {
            String(decoding: try rawRequest(port: service.port, "/.well-known/jwks.json")?.body ?? [], as: UTF8.self)
        }
        #expect(try served() == #"{"keys":[]}"#)
        let second = #"{"keys":[{"kid":"two"}]}"#
        try sandbox.write("next.jwks", second)
        #expect(rename(sandbox.file("next.jwks"), jwks) == 0)
        try await eventually(timeout: .seconds(10)) { try served() == second }
        // A broken file is not served; the last good one stays.
        try sandbox.write("broken.jwks", "{not json")
        #expect(rename(sandbox.file("broken.jwks"), jwks) == 0)
        try await Task.sleep(for: .milliseconds(1500))
        #expect(try served() == second)
        #expect(service.logText.contains("cannot re-read"))
        // SIGHUP re-reads at once (and calls the verifier's reload hook).
        let third = #"{"keys":[{"kid":"three"}]}"#
        try sandbox.write("third.jwks", third)
        #expect(rename(sandbox.file("third.jwks"), jwks) == 0)
        service.process.kill(SIGHUP)
        try await eventually(timeout: .seconds(10)) { try served() == third }
        #expect(service.logText.contains("SIGHUP"))
        #expect(service.stop() == 0)
    }

    @Test(
        "the revocation list is re-read without a restart: a revoked delegation, a retired container, a revoked issuing key each turn a genuine token into 103; a broken list keeps the last good one"
    )
    func revocationReload() async throws {
        let sandbox = try Sandbox("dcverify-revocations")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        func code() throws -> String? {
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])?
                .values("X-Good-GD-AuthResponseCode").first
        }
        let token = try AuthToken(parsing: Tokens.valid)
        let path = sandbox.file("revocations.json")
        func publish(_ list: RevocationList) throws {
            try list.write(to: path)  // atomically, as the provider writes it
        }
        #expect(try code() == "100 OK")
        let lists = [
            RevocationList(issued: 1, revokedDelegations: [token.delegation.claims.id]),
            RevocationList(
                issued: 2,
                retiredContainers: [
                    .init(appID: token.delegation.claims.appID, containerID: token.delegation.claims.containerID)
                ]),
            RevocationList(issued: 3, revokedIssuerKeys: [token.delegation.keyID]),
        ]
        for list in lists {
            try publish(.empty)
            try await eventually(timeout: .seconds(10)) { try code() == "100 OK" }
            try publish(list)
            try await eventually(timeout: .seconds(10)) { try code() == "103 Revoked" }
        }
        // A broken list does not empty the revocations: the last good one stays in force.
        try sandbox.write("broken.json", "{\"v\":1,")
        #expect(rename(sandbox.file("broken.json"), path) == 0)
        try await Task.sleep(for: .milliseconds(1500))
        service.process.kill(SIGHUP)
        try await eventually(timeout: .seconds(10)) { service.logText.contains("kept the last good revocations") }
        #expect(try code() == "103 Revoked")
        #expect(service.stop() == 0)
    }

    @Test("a configuration file gives the same settings; flags win; unknown keys are refused")
    func configurationFile() throws {
        let sandbox = try Sandbox("dcverify-config")
        defer { sandbox.remove() }
        _ = try verifierFiles(in: sandbox)
        try sandbox.write("published.jwks", #"{"keys":["from the config"]}"#)
        let config = try sandbox.write(
            "dcverify.json",
            """
            {"issuers": "issuers.jwks", "revocations": "revocations.json", "jwks": "published.jwks",
             "listen": "127.0.0.1:1", "threads": 1, "request-timeout": 5, "max-connections": 16, "log-level": "debug"}
            """)
        // The flag --listen wins over the file's unusable port 1.
        let service = try RunningService.start(
            Binaries.dcverify, ["serve", "--config", config, "--listen", "127.0.0.1:0"], in: sandbox)
        defer { service.stop() }
        #expect(
            try rawRequest(port: service.port, "/.well-known/jwks.json")?.body
                == Array(#"{"keys":["from the config"]}"#.utf8))
        #expect(service.logText.contains("debug"))

        let unknown = try sandbox.write("unknown.json", #"{"issuers": "issuers.jwks", "listn": "127.0.0.1:0"}"#)
        let refused = try sandbox.run(Binaries.dcverify, ["serve", "--config", unknown])
        #expect(refused.status == 64)
        #expect(refused.stderrText.contains("listn"))
        let wrongType = try sandbox.write("type.json", #"{"threads": "two"}"#)
        #expect(try sandbox.run(Binaries.dcverify, ["serve", "--config", wrongType]).status == 64)
    }

    @Test(
        "SIGHUP re-reads the configuration file's log level: warning writes no request line, debug then writes each; a broken file keeps the level"
    )
    func reloadedLogLevel() async throws {
        let sandbox = try Sandbox("dcverify-reload-level")
        defer { sandbox.remove() }
        _ = try verifierFiles(in: sandbox)
        func settings(_ level: String) -> String {
            #"{"issuers": "issuers.jwks", "revocations": "revocations.json", "log-level": "\#(level)"}"#
        }
        let config = try sandbox.write("dcverify.json", settings("warning"))
        let service = try RunningService.start(Binaries.dcverify, ["serve", "--config", config], in: sandbox)
        defer { service.stop() }
        func verify() throws {
            _ = try rawRequest(
                port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])
        }
        func verifiedLines() -> Int { service.logText.split(separator: "\n").filter { $0.contains(" verified") }.count }
        try verify()
        #expect(verifiedLines() == 0, "\(service.logText)")
        try sandbox.write("dcverify.json", settings("debug"))
        service.process.kill(SIGHUP)
        try await eventually(timeout: .seconds(10)) { service.logText.contains("log level debug") }
        try verify()
        try await eventually(timeout: .seconds(10)) { verifiedLines() == 1 }
        // A file that no longer reads keeps the level in force, and says so.
        try sandbox.write("dcverify.json", "{broken")
        service.process.kill(SIGHUP)
        try await eventually(timeout: .seconds(10)) { service.logText.contains("kept the configuration in force") }
        try verify()
        try await eventually(timeout: .seconds(10)) { verifiedLines() == 2 }
    }

    /// A command line that must fail, and the exit status it must fail with.
    struct Failing: Sendable, CustomTestStringConvertible {
        var arguments: [String]
        var status: Int32
        var testDescription: String { "\(arguments.joined(separator: " ")) → \(status)" }
    }

    static let failing: [Failing] = [
        Failing(arguments: ["serve"], status: 64),
        Failing(arguments: ["serve", "--listen", "nonsense"], status: 64),
        Failing(arguments: ["serve", "--listen", "::1:80"], status: 64),
        Failing(arguments: ["serve", "--threads", "0"], status: 64),
        Failing(arguments: ["serve", "--request-timeout", "0"], status: 64),
        Failing(arguments: ["serve", "--log-level", "loud"], status: 64),
        Failing(arguments: ["serve", "--tls-certificate", "only.pem"], status: 64),
        Failing(
            arguments: ["serve", "--issuers", "/nonexistent/i.jwks", "--revocations", "/nonexistent/r.json"], status: 66
        ),
        Failing(arguments: ["serve", "--jwks", "/nonexistent/published.jwks"], status: 66),
        Failing(arguments: ["serve", "--trust-url", "ftp://trust.example/"], status: 64),
        Failing(arguments: ["serve", "--trust-url", "https://user@trust.example/"], status: 64),
        // With --issuers and --revocations (added below): one trust source or the other.
        Failing(arguments: ["serve", "--trust-url", "http://127.0.0.1:1/"], status: 64),
        Failing(arguments: ["serve", "--trust-max-age", "60"], status: 64),
        Failing(
            arguments: ["serve", "--tls-certificate", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"],
            status: 66),
    ]

    @Test("An http:// trust URL is refused without --trust-over-http: one line, exit 64, before anything is fetched")
    func plainHTTPTrust() throws {
        let sandbox = try Sandbox("dcverify-http-trust")
        defer { sandbox.remove() }
        let key = try sandbox.write("trust-key.jwks", #"{"keys":[]}"#)
        let refused = try sandbox.run(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--trust-url", "http://127.0.0.1:1/", "--trust-key", key],
            timeout: 30)
        #expect(refused.status == 64, "\(refused.stderrText)")
        #expect(refused.stderrText.split(separator: "\n").count == 1, "\(refused.stderrText)")
        #expect(refused.stderrText.contains("--trust-over-http"), "\(refused.stderrText)")
        // With the flag it goes on to read the key (an empty key set: refused as such, 65).
        let allowed = try sandbox.run(
            Binaries.dcverify,
            [
                "serve", "--listen", "127.0.0.1:0", "--trust-url", "http://127.0.0.1:1/", "--trust-key", key,
                "--trust-over-http",
            ], timeout: 30)
        #expect(allowed.status != 64 && allowed.status != 0, "\(allowed.status): \(allowed.stderrText)")
        #expect(allowed.stderrText.contains("key"), "\(allowed.stderrText)")
    }

    @Test(
        "A trust server that sends its body a byte a second holds no fetch past its limit: dcverify listens within seconds, not ready, and answers 101"
    )
    func slowTrustServer() throws {
        let sandbox = try Sandbox("dcverify-slow-trust")
        defer { sandbox.remove() }
        let key = try TokenSigningKey.generate()
        let keyFile = try sandbox.write(
            "trust-key.jwks", String(decoding: TrustedIssuers([key.publicKey]).jwks(), as: UTF8.self))
        // A server of our own (Python's socket module): the head at once, then one byte a second of
        // a body it says is 100 000 bytes long, for as long as the connection stays.
        let port = try freeLocalPort()
        let server = try SpawnedProcess(
            "/usr/bin/python3",
            [
                "-c",
                """
                import socket, sys, threading, time
                listener = socket.socket(); listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", int(sys.argv[1]))); listener.listen(8)
                def dribble(connection):
                    try:
                        connection.recv(65536)
                        connection.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 100000\\r\\n\\r\\n")
                        while True:
                            connection.sendall(b"e"); time.sleep(1)
                    except OSError:
                        pass
                while True:
                    connection, _ = listener.accept()
                    threading.Thread(target=dribble, args=(connection,), daemon=True).start()
                """, String(port),
            ], environment: sandbox.environment, output: sandbox.file("server.log"))
        defer {
            server.kill()
            _ = server.wait(timeout: .seconds(5))
        }
        usleep(300_000)
        let started = ContinuousClock.now
        let service = try RunningService.start(
            Binaries.dcverify,
            [
                "serve", "--listen", "127.0.0.1:0", "--trust-over-http", "--trust-url", "http://127.0.0.1:\(port)/",
                "--trust-key", keyFile, "--trust-max-age", "4s",
            ], in: sandbox)
        defer { service.stop() }
        // The first fetch (before listening) gives up at half the bound, 2 s.
        #expect(ContinuousClock.now - started < .seconds(8), "\(ContinuousClock.now - started)")
        #expect(try rawRequest(port: service.port, "/ready")?.status == 503)
        let answer = try rawRequest(
            port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])
        #expect(answer?.values("X-Good-GD-AuthResponseCode") == ["101 Invalid Token"])
        #expect(service.logText.contains("no whole answer within"), "\(service.logText)")
    }

    @Test("usage errors exit 64, missing files 66", arguments: failing)
    func errors(_ failing: Failing) throws {
        let sandbox = try Sandbox("dcverify-errors")
        defer { sandbox.remove() }
        let status = failing.status
        var arguments = failing.arguments
        // `serve` alone lacks the verifier's files; every other case has them, so that it fails
        // for its own reason.
        if arguments.count > 1 && !arguments.contains("--issuers") { arguments += try verifierFiles(in: sandbox) }
        if !arguments.contains("--listen") { arguments += ["--listen", "127.0.0.1:0"] }
        let result = try sandbox.run(Binaries.dcverify, arguments, timeout: 30)
        #expect(result.status == status, "\(arguments): \(result.stderrText)")
        #expect(!result.stderrText.isEmpty)
    }

    @Test(
        "an address already in use, the service's or the metrics': exit 69 and one line that says so and names --listen or --metrics-listen HOST:0, no NIO internals"
    )
    func addressInUse() throws {
        let sandbox = try Sandbox("dcverify-in-use")
        defer { sandbox.remove() }
        let first = try RunningService.start(
            Binaries.dcverify, ["serve", "--listen", "127.0.0.1:0"] + verifierFiles(in: sandbox), in: sandbox)
        defer { first.stop() }
        for (arguments, flag) in [
            (["--listen", "127.0.0.1:\(first.port)"], "--listen"),
            (["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:\(first.port)"], "--metrics-listen"),
        ] {
            let second = try sandbox.run(
                Binaries.dcverify, ["serve"] + arguments + verifierFiles(in: sandbox), timeout: 30)
            #expect(second.status == 69, "\(second.stderrText)")
            let lines = second.stderrText.split(separator: "\n").filter { $0.hasPrefix("dcverify: ") }
            #expect(
                lines == [
                    "dcverify: 127.0.0.1:\(first.port): the address is in use; try \(flag) 127.0.0.1:0 for any free port, or stop what uses it"
                ], "\(second.stderrText)")
            #expect(
                !second.stderrText.contains("errno") && !second.stderrText.contains("bind("), "\(second.stderrText)")
        }
    }

    @Test("the log holds neither a token nor its parts at trace level")
    func logsHoldNoToken() throws {
        let sandbox = try Sandbox("dcverify-logs")
        defer { sandbox.remove() }
        let service = try RunningService.start(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--log-level", "trace"] + verifierFiles(in: sandbox), in: sandbox)
        let token = "eyJhbGciOiJFUzI1NiJ9.c2VjcmV0LXRva2VuLXBhcnQ.c2lnbmF0dXJl~eyJ0eXAiOiJ4In0.Y2hhbGxlbmdl.c2ln"
        _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
        _ = try rawRequest(
            port: service.port, "/verifyGDAuthToken",
            headers: [("X-Good-GD-AuthToken", token), ("X-Good-GD-AuthToken", token)])
        _ = try rawRequest(
            port: service.port, "/verifyGDAuthToken",
            headers: [("X-Good-GD-AuthToken", token + String(repeating: "A", count: 5000))])
        #expect(service.stop() == 0)
        let log = service.logText
        #expect(log.contains("dc.code=101"), "\(log)")
        for part in token.split(whereSeparator: { $0 == "." || $0 == "~" }) {
            #expect(!log.contains(part), "the log holds '\(part)'")
        }
    }
}
