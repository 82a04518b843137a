import Foundation
import TestSupport
import Testing

/// Auth tokens and identity JWTs through the real programs: dcprovision and dcclient launched as
/// each other's scheme handlers, a running `dcverify` reading the provider's files, curl as the
/// application server's HTTP client and PyJWT (Debian `python3-jwt`) as an independent JOSE peer.
@Suite("Auth tokens and identity JWTs through dcclient, dcprovision and dcverify", .ownThreads, .timeLimit(.minutes(5)))
struct AuthTokenCommandTests {
    static let scheme = ["--client-scheme", "org.example.dcclient"]

    /// A managed client paired for `alice@example.com` and authorized (its delegation arrived with
    /// the authorizing policy), and a dcverify serving the provider's files.
    static func world(_ label: String) async throws -> (tools: Tools, verifier: SpawnedProcess, port: Int) {
        let tools = try Tools(label)
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        try tools.check("dcprovision", ["pair", "--user-id", "alice@example.com"] + scheme)
        let authorize = try tools.check("dcprovision", ["authorize"] + scheme)
        #expect((authorize.stdoutText + authorize.stderrText).contains("auth-token delegation"))
        let files = tools.sandbox.stateHome + "/dcprovision/verifier"
        let portFile = tools.sandbox.file("dcverify.port")
        let verifier = try SpawnedProcess(
            Binaries.dcverify,
            [
                "serve", "--listen", "127.0.0.1:0", "--port-file", portFile, "--issuers", files + "/issuers.jwks",
                "--revocations", files + "/revocations.json", "--jwks", files + "/jwks.json",
            ], environment: tools.sandbox.environment, output: tools.sandbox.file("dcverify.log"))
        func port() -> Int? {
            (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap {
                Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        try await eventually(timeout: .seconds(60)) { port() != nil }
        return (tools, verifier, try #require(port()))
    }

    /// The X-Good-GD headers dcverify answers for `token`, by name (curl as the application server).
    static func verify(_ token: String, port: Int, _ tools: Tools) throws -> [String: String] {
        let result = try tools.sandbox.run(
            try which("curl"),
            [
                "-sS", "-D", "-", "-o", "/dev/null", "--max-time", "20", "-H", "X-Good-GD-AuthToken: \(token)",
                "http://127.0.0.1:\(port)/verifyGDAuthToken",
            ], timeout: 40)
        try #require(result.status == 0, "curl: \(result.stderrText)")
        var headers: [String: String] = [:]
        for line in result.stdoutText.split(separator: "\r\n") where line.hasPrefix("X-Good-GD-") {
            let parts = line.split(separator: ":", maxSplits: 1)
            headers[String(parts[0])] = parts.count > 1 ? String(parts[1].dropFirst()) : ""
        }
        return headers
    }

    @Test(
        "dcclient token → dcverify: 100 OK with the challenge, server, user, app, container, version and time; the same twice; unauthorize → 103 without a restart, and dcclient token exits 77"
    )
    func tokenVerifies() async throws {
        let (tools, verifier, port) = try await Self.world("token-e2e")
        defer {
            verifier.kill()
            _ = verifier.wait(timeout: .seconds(10))
            tools.sandbox.remove()
        }
        let before = Int(Date().timeIntervalSince1970)
        let token = try tools.check(
            "dcclient", ["token", "--challenge", "one-use 7f3a", "--server", "mail.example.com"]
        )
        .stdoutText.trimmingCharacters(in: .newlines)
        let headers = try Self.verify(token, port: port, tools)
        #expect(headers["X-Good-GD-AuthResponseCode"] == "100 OK", "\(headers)")
        #expect(headers["X-Good-GD-AuthChallenge"] == "one-use 7f3a")
        #expect(headers["X-Good-GD-Server"] == "mail.example.com")
        #expect(headers["X-Good-GD-UserID"] == "alice@example.com")
        #expect(headers["X-Good-GD-AppID"] == "org.example.dcclient")
        #expect(headers["X-Good-GD-ContainerID"] == "dcclient")
        #expect(headers["X-Good-GD-AuthTokenVersion"] == "1")
        let created = try #require(Int(headers["X-Good-GD-AuthTokenCreationTime"] ?? ""))
        #expect(abs(created - before) < 60)
        #expect(try Self.verify(token, port: port, tools) == headers)
        // An empty challenge is a token too.
        let empty = try tools.check("dcclient", ["token", "--challenge", ""]).stdoutText.trimmingCharacters(
            in: .newlines)
        #expect(try Self.verify(empty, port: port, tools)["X-Good-GD-AuthChallenge"] == "")
        // A challenge that starts with "-" (a random base64url one may) travels joined by "=".
        let dashed = try tools.check("dcclient", ["token", "--challenge=-Xq3"]).stdoutText.trimmingCharacters(
            in: .newlines)
        #expect(try Self.verify(dashed, port: port, tools)["X-Good-GD-AuthChallenge"] == "-Xq3")

        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        // dcverify sees the new revocation list within a second or two, without a restart.
        try await eventually(timeout: .seconds(20)) {
            (try? Self.verify(token, port: port, tools))?["X-Good-GD-AuthResponseCode"] == "103 Revoked"
        }
        #expect(try Self.verify(token, port: port, tools)["X-Good-GD-UserID"] == nil)
        let refused = try tools.run("dcclient", ["token", "--challenge", "c"])
        #expect(refused.status == 77, "\(refused.stderrText)")
        #expect(refused.stdout.isEmpty)
    }

    @Test(
        "dcclient token refuses before signing: a challenge or server outside printable ASCII (64), a locked client (69, says locked); shared-user-id is stable and not the user's name"
    )
    func refusals() async throws {
        let (tools, verifier, _) = try await Self.world("token-refusals")
        defer {
            verifier.kill()
            _ = verifier.wait(timeout: .seconds(10))
            tools.sandbox.remove()
        }
        for arguments in [
            ["--challenge", "caf\u{E9}"], ["--challenge", "line\nbreak"], ["--challenge", " padded"],
            ["--challenge", "c", "--server", "tab\there"],
        ] {
            let result = try tools.run("dcclient", ["token"] + arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderrText)")
            #expect(result.stdout.isEmpty)
        }
        let shared = try tools.check("dcclient", ["shared-user-id"]).stdoutText
        // 43 characters and a newline; an empty line only on a device without a machine id.
        let machineID = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8)) ?? ""
        #expect(shared.count == (machineID.trimmingCharacters(in: .newlines).count == 32 ? 44 : 1), "\(shared)")
        #expect(shared.hasSuffix("\n"))
        #expect(try tools.check("dcclient", ["shared-user-id"]).stdoutText == shared)
        #expect(!shared.contains("alice"))
        try tools.check("dcclient", ["lock"])
        let locked = try tools.run("dcclient", ["token", "--challenge", "c"])
        #expect(locked.status == 69, "\(locked.stderrText)")
        #expect(locked.stderrText.contains("locked"))
    }

    @Test(
        "dcclient jwt: PyJWT verifies it against the JWKS dcverify serves (aud, sub, scope, iss, exp); cached until --refresh; 77 when unauthorized"
    )
    func identityJWT() async throws {
        let (tools, verifier, port) = try await Self.world("jwt-e2e")
        defer {
            verifier.kill()
            _ = verifier.wait(timeout: .seconds(10))
            tools.sandbox.remove()
        }
        let arguments = ["jwt", "--audience", "mail-web", "--scope", "openid mail.read"]
        let jwt = try tools.check("dcclient", arguments).stdoutText.trimmingCharacters(in: .newlines)
        #expect(try tools.check("dcclient", arguments).stdoutText.trimmingCharacters(in: .newlines) == jwt)
        let fresh = try tools.check("dcclient", arguments + ["--refresh"]).stdoutText.trimmingCharacters(
            in: .newlines)
        #expect(fresh != jwt)
        let script = try tools.sandbox.write(
            "verify_jwt.py",
            """
            import json, sys, jwt
            client = jwt.PyJWKClient(sys.argv[1])
            token = sys.stdin.read().strip()
            key = client.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["ES256"], audience=sys.argv[2],
                                options={"require": ["iss", "sub", "aud", "iat", "exp"]})
            print(json.dumps(claims, sort_keys=True))
            """)
        let checked = try tools.sandbox.run(
            "/usr/bin/python3", [script, "http://127.0.0.1:\(port)/.well-known/jwks.json", "mail-web"],
            stdin: Array(fresh.utf8), timeout: 60)
        try #require(checked.status == 0, "PyJWT: \(checked.stderrText)")
        let claims = try #require(
            try JSONSerialization.jsonObject(with: Data(checked.stdout)) as? [String: Any])
        #expect(claims["sub"] as? String == "alice@example.com")
        #expect(claims["aud"] as? String == "mail-web")
        #expect(claims["scope"] as? String == "openid mail.read")
        #expect(claims["iss"] as? String == "org.example.provider")
        let issued = try #require(claims["iat"] as? Int)
        #expect(claims["exp"] as? Int == issued + 3600)
        // A delegation (it names the same issuer and user) finds no key there: the JWKS holds the
        // identity key only, so no delegation passes for an identity JWT.
        let token = try tools.check("dcclient", ["token", "--challenge", "c"]).stdoutText
        let delegation = String(token.split(separator: "~")[0])
        let confused = try tools.sandbox.run(
            "/usr/bin/python3", [script, "http://127.0.0.1:\(port)/.well-known/jwks.json", "mail-web"],
            stdin: Array(delegation.utf8), timeout: 60)
        #expect(confused.status != 0)
        #expect(confused.stderrText.contains("Unable to find a signing key"), "\(confused.stderrText)")
        // The oracle can say no: another audience is refused by PyJWT.
        let wrongAudience = try tools.sandbox.run(
            "/usr/bin/python3", [script, "http://127.0.0.1:\(port)/.well-known/jwks.json", "someone-else"],
            stdin: Array(fresh.utf8), timeout: 60)
        #expect(wrongAudience.status != 0)

        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        let refused = try tools.run("dcclient", arguments)
        #expect(refused.status == 77, "\(refused.stderrText)")
        #expect(refused.stdout.isEmpty)
    }

    @Test(
        "The sample application server (Samples/app-server) grants a fresh challenge's token once; refuses a replay, another server's token, a challenge it never issued, a revoked client's token"
    )
    func sampleAppServer() async throws {
        let (tools, verifier, port) = try await Self.world("app-server")
        let portFile = tools.sandbox.file("app.port")
        let app = try SpawnedProcess(
            "/usr/bin/python3",
            [
                Repository.root + "/Samples/app-server/app-server", "--verifier", "http://127.0.0.1:\(port)",
                "--server-name", "mail.example.com", "--port-file", portFile,
            ], environment: tools.sandbox.environment, output: tools.sandbox.file("app.log"))
        defer {
            for process in [app, verifier] {
                process.kill()
                _ = process.wait(timeout: .seconds(10))
            }
            tools.sandbox.remove()
        }
        try await eventually(timeout: .seconds(60)) { FileManager.default.fileExists(atPath: portFile) }
        let appPort = try #require(Int(try String(contentsOfFile: portFile, encoding: .utf8)))
        func get(_ path: String, token: String? = nil) throws -> (code: Int, body: String) {
            let result = try tools.sandbox.run(
                try which("curl"),
                ["-sS", "--max-time", "20", "-w", "\n%{http_code}"]
                    + (token.map { ["-H", "X-Good-GD-AuthToken: \($0)"] } ?? []) + [
                        "http://127.0.0.1:\(appPort)\(path)"
                    ],
                timeout: 40)
            let lines = result.stdoutText.split(separator: "\n").map(String.init)
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }
        func token(_ challenge: String, server: String = "mail.example.com") throws -> String {
            // `=` joins the value: a random challenge may start with "-" (base64url), which would read as an option.
            try tools.check("dcclient", ["token", "--challenge=\(challenge)", "--server", server]).stdoutText
                .trimmingCharacters(in: .newlines)
        }
        let granted = try token(try get("/challenge").body)
        #expect(try get("/hello", token: granted) == (200, "hello, alice@example.com"))
        #expect(try get("/hello", token: granted).code == 403, "a replay")
        #expect(
            try get("/hello", token: try token(try get("/challenge").body, server: "other.example.com")).code == 403)
        #expect(try get("/hello", token: try token("a challenge it never issued")).code == 403)
        #expect(try get("/hello").code == 403)
        // Made before the provider unauthorizes the client, presented after.
        let early = try token(try get("/challenge").body)
        let probe = try token("probe")
        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        try await eventually(timeout: .seconds(20)) {
            (try? Self.verify(probe, port: port, tools))?["X-Good-GD-AuthResponseCode"] == "103 Revoked"
        }
        #expect(try get("/hello", token: early) == (403, "refused: 103 Revoked"))
    }

    @Test(
        "Attack: 1000 GET /challenge from one address shut no one out of the sample application server: another address is served and let in; the flooder keeps its newest 100 open; a full server drops the oldest, never refuses"
    )
    func sampleAppServerFlood() async throws {
        let (tools, verifier, port) = try await Self.world("app-server-flood")
        let portFile = tools.sandbox.file("app.port")
        // A memory bound of 300 in all, so that a few addresses fill it.
        let app = try SpawnedProcess(
            "/usr/bin/python3",
            [
                Repository.root + "/Samples/app-server/app-server", "--verifier", "http://127.0.0.1:\(port)",
                "--server-name", "mail.example.com", "--port-file", portFile, "--max-challenges", "300",
            ], environment: tools.sandbox.environment, output: tools.sandbox.file("app.log"))
        defer {
            for process in [app, verifier] {
                process.kill()
                _ = process.wait(timeout: .seconds(10))
            }
            tools.sandbox.remove()
        }
        try await eventually(timeout: .seconds(60)) { FileManager.default.fileExists(atPath: portFile) }
        let appPort = try #require(Int(try String(contentsOfFile: portFile, encoding: .utf8)))
        /// `count` GET /challenge from the client address `source` (python3's http.client, one
        /// connection each, as a flooding script would): the challenges, in order; every answer must be 200.
        func flood(from source: String, _ count: Int) throws -> [String] {
            let script = """
                import http.client, sys
                port, source, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
                for _ in range(count):
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=(source, 0))
                    connection.request("GET", "/challenge")
                    response = connection.getresponse()
                    print(response.status, response.read().decode().strip())
                    connection.close()
                """
            let result = try tools.sandbox.run(
                "/usr/bin/python3", ["-c", script, String(appPort), source, String(count)], timeout: 120)
            try #require(result.status == 0, "\(result.stderrText)")
            let lines = result.stdoutText.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            #expect(lines.count == count)
            #expect(lines.allSatisfy { $0.count == 2 && $0[0] == "200" }, "every request answered 200")
            return lines.map { $0.last ?? "" }
        }
        func get(_ path: String, token: String? = nil, from source: String = "127.0.0.1") throws -> (
            code: Int, body: String
        ) {
            let result = try tools.sandbox.run(
                try which("curl"),
                ["-sS", "--max-time", "20", "--interface", source, "-w", "\n%{http_code}"]
                    + (token.map { ["-H", "X-Good-GD-AuthToken: \($0)"] } ?? []) + [
                        "http://127.0.0.1:\(appPort)\(path)"
                    ],
                timeout: 40)
            let lines = result.stdoutText.split(separator: "\n").map(String.init)
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }
        func token(_ challenge: String) throws -> String {
            try tools.check("dcclient", ["token", "--challenge=\(challenge)", "--server", "mail.example.com"])
                .stdoutText.trimmingCharacters(in: .newlines)
        }
        let welcome = (200, "hello, alice@example.com")
        let stale = (403, "refused: not a fresh challenge of this server")

        let flooded = try flood(from: "127.0.0.1", 1000)
        // Another address is served, and its challenge lets its app in.
        let other = try get("/challenge", from: "127.0.0.2")
        #expect(other.code == 200)
        #expect(try get("/hello", token: try token(other.body), from: "127.0.0.2") == welcome)
        // The flooder holds exactly its newest 100: the 900th is dropped, the 901st open; and it is served too.
        #expect(try get("/hello", token: try token(flooded[899])) == stale)
        #expect(try get("/hello", token: try token(flooded[900])) == welcome)
        let again = try get("/challenge")
        #expect(again.code == 200)
        #expect(try get("/hello", token: try token(again.body)) == welcome)
        // Three more addresses ask for 100 each: 300 in all is full, so the oldest anywhere (the
        // flooder's) are dropped, and no one is refused.
        for address in ["127.0.0.3", "127.0.0.4", "127.0.0.5"] { _ = try flood(from: address, 100) }
        #expect(try get("/hello", token: try token(flooded[999])) == stale)
    }

    @Test(
        "A client set up afresh and paired again: the old store's tokens answer 103, the new client's 100 — also after a retire of the same client id"
    )
    func setUpAfresh() async throws {
        let (tools, verifier, port) = try await Self.world("token-afresh")
        defer {
            verifier.kill()
            _ = verifier.wait(timeout: .seconds(10))
            tools.sandbox.remove()
        }
        func token() throws -> String {
            try tools.check("dcclient", ["token", "--challenge", "c"]).stdoutText.trimmingCharacters(in: .newlines)
        }
        func code(_ token: String) throws -> String? {
            try Self.verify(token, port: port, tools)["X-Good-GD-AuthResponseCode"]
        }
        func afresh() throws {
            try FileManager.default.removeItem(atPath: tools.sandbox.dataHome + "/dcclient")
            try tools.setUpClient()
            try tools.check("dcprovision", ["pair", "--user-id", "alice@example.com"] + Self.scheme)
            try tools.check("dcprovision", ["authorize"] + Self.scheme)
        }
        let old = try token()
        try afresh()
        let renewed = try token()
        try await eventually(timeout: .seconds(20)) { (try? code(old)) == "103 Revoked" }
        #expect(try code(renewed) == "100 OK")
        try tools.check("dcprovision", ["retire"] + Self.scheme)
        try await eventually(timeout: .seconds(20)) { (try? code(renewed)) == "103 Revoked" }
        try afresh()
        let third = try token()
        try await eventually(timeout: .seconds(20)) { (try? code(third)) == "100 OK" }
        #expect(try code(renewed) == "103 Revoked")
        #expect(try code(old) == "103 Revoked")
    }
}
