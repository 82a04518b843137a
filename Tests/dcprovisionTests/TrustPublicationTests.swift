import AuthTokens
import CredentialCoding
import Foundation
import ServiceHarness
import TestSupport
import Testing

/// Trust published once and fetched by every verifier: `dcprovision publish` writes the signed
/// list, Debian's nginx serves the directory (its ETag, its 304s and its access log are the
/// oracle), and a real `dcverify serve --trust-url` fetches it while curl asks it about a real
/// `dcclient` token.
@Suite("Trust published by dcprovision, served by nginx, fetched by dcverify", .ownThreads, .timeLimit(.minutes(5)))
struct TrustPublicationTests {
    static let scheme = ["--client-scheme", "org.example.dcclient"]

    /// A managed client paired and authorized (it holds a delegation), the provider's trust
    /// published into the sandbox's `www`.
    static func world(_ label: String) throws -> (tools: Tools, directory: String) {
        let tools = try Tools(label)
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        try tools.check("dcprovision", ["pair", "--user-id", "alice@example.com"] + scheme)
        try tools.check("dcprovision", ["authorize"] + scheme)
        let directory = tools.sandbox.file("www")
        try tools.check("dcprovision", ["publish", "--out-dir", directory])
        return (tools, directory)
    }

    /// Debian's nginx serving the published `directory` on each of `listen` (HOST:PORT), with its
    /// ETags and `Cache-Control: max-age=1`, as the protocol's example configures it; `log` is
    /// its access-log directives (default: none).
    /// With `tls` (a certificate and its key, PEM files), over TLS only.
    static func servePublished(
        _ directory: String, in sandbox: Sandbox, listen: [String], log: String = "access_log off;",
        tls: (certificate: String, key: String)? = nil
    ) async throws -> NginxServer {
        let suffix = tls == nil ? "" : " ssl"
        let certificates = tls.map { "  ssl_certificate \($0.certificate);\n  ssl_certificate_key \($0.key);" } ?? ""
        return try await NginxServer(
            in: sandbox, servesFiles: true,
            http: """
                \(log)
                server {
                \(listen.map { "  listen \($0)\(suffix);" }.joined(separator: "\n"))
                \(certificates)
                  location / {
                    root \(directory);
                    default_type application/jose;
                    add_header Cache-Control "max-age=1";
                  }
                }
                """)
    }

    /// The signed list in `directory`, verified with the key published beside it.
    static func list(in directory: String) throws -> SignedTrustList {
        let key = try #require(try TrustedIssuers.load(from: directory + "/trust-key.jwks").keys.values.first)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: directory + "/trust.jws"))
        return try SignedTrustList(verifying: Array(bytes), with: key)
    }

    @Test(
        "publish writes trust.jws, trust-key.jwks, issuers.jwks and revocations.json (0644, directory 0755); unauthorize publishes the next number with the revocation"
    )
    func publishDirectory() throws {
        let (tools, directory) = try Self.world("publish-dir")
        defer { tools.sandbox.remove() }
        for name in ["trust.jws", "trust-key.jwks", "issuers.jwks", "revocations.json", ""] {
            var info = stat()
            #expect(stat(directory + "/" + name, &info) == 0)
            #expect(info.st_mode & 0o777 == (name.isEmpty ? 0o755 : 0o644), "\(name)")
        }
        let first = try Self.list(in: directory)
        let local = tools.sandbox.stateHome + "/dcprovision/verifier"
        #expect(first.issuers == (try TrustedIssuers.load(from: directory + "/issuers.jwks")))
        #expect(first.issuers == (try TrustedIssuers.load(from: local + "/issuers.jwks")))
        #expect(first.nextUpdate - first.issued == 86_400)
        #expect(first.revocations.revokedDelegations.isEmpty)
        // The trust-signing key is the provider's own: not the issuing key.
        #expect(try TrustedIssuers.load(from: directory + "/trust-key.jwks") != first.issuers)

        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        let second = try Self.list(in: directory)
        #expect(second.number > first.number)
        #expect(!second.revocations.revokedDelegations.isEmpty)
        #expect(
            try RevocationList.load(from: directory + "/revocations.json").revokedDelegations
                == second.revocations.revokedDelegations)
        // The local list's contents, stamped with the publication's time.
        var kept = try RevocationList.load(from: local + "/revocations.json")
        kept.issued = second.issued
        #expect(kept == second.revocations)

        // publish without --out-dir signs afresh into the remembered directory.
        try tools.check("dcprovision", ["publish", "--next-update", "2h"])
        let third = try Self.list(in: directory)
        #expect(third.number == second.number + 1)
        #expect(third.nextUpdate - third.issued == 7200)
        #expect(try tools.run("dcprovision", ["publish", "--next-update", "5s"]).status == 64)
    }

    @Test(
        "dcverify --trust-url through nginx: 304 to its conditional requests; unauthorize answers 103 within max-age + 1 s; another key, an older number and a malformed list are refused; the source down serves the last good list until the bound, then 101; back, it recovers"
    )
    func fetchedThroughNginx() async throws {
        let (tools, directory) = try Self.world("trust-url")
        let sandbox = tools.sandbox
        defer { sandbox.remove() }
        let port = try freeLocalPort()
        let accessLog = sandbox.file("nginx/logs/access.log")
        func startNginx() async throws -> NginxServer {
            try await Self.servePublished(
                directory, in: sandbox, listen: ["127.0.0.1:\(port)"],
                log: "log_format trust '$status $request_uri';\naccess_log \(accessLog) trust;")
        }
        var nginx = try await startNginx()
        defer { nginx.stop() }
        let bound = 4
        let service = try RunningService.start(
            Binaries.dcverify,
            [
                "serve", "--listen", "127.0.0.1:0", "--trust-over-http", "--trust-url", "http://127.0.0.1:\(port)/",
                "--trust-key",
                directory + "/trust-key.jwks", "--trust-max-age", "\(bound)s", "--log-level", "debug",
            ], in: sandbox, name: "dcverify")
        defer { service.stop() }
        func code(_ token: String) -> String? {
            (try? AuthTokenCommandTests.verify(token, port: service.port, tools))?["X-Good-GD-AuthResponseCode"]
        }
        func fetches(_ status: Int) -> Int {
            ((try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? "").split(separator: "\n")
                .filter { $0 == "\(status) /trust.jws" }.count
        }
        func refusals() -> Int { service.logText.components(separatedBy: "refused the trust list").count - 1 }
        let token = try tools.check("dcclient", ["token", "--challenge", "trust 1"]).stdoutText
            .trimmingCharacters(in: .newlines)
        #expect(code(token) == "100 OK", "\(service.logText)")
        // Ready, and /health says from where and which number.
        func probe(_ path: String) -> (status: Int, body: String)? {
            (try? rawRequest(port: service.port, path)).map { ($0.status, String(decoding: $0.body, as: UTF8.self)) }
        }
        #expect(probe("/ready")?.status == 200, "\(String(describing: probe("/ready")))")
        #expect(probe("/health")?.body.hasPrefix("ok: trust list number ") == true)
        // It names no URL: the public port says where the trust stands, not where it comes from.
        #expect(probe("/health")?.body.contains("127.0.0.1") == false)
        // Conditional requests: the ETag nginx gave comes back as If-None-Match, and nginx answers 304.
        try await eventually(timeout: .seconds(10)) { fetches(304) >= 2 }

        // The source down: the last good list serves until the bound, then every token is 101.
        nginx.stop()
        let down = ContinuousClock.now
        #expect(code(token) == "100 OK")
        try await eventually(timeout: .seconds(20)) { code(token) == "101 Invalid Token" }
        let servedStale = ContinuousClock.now - down
        #expect(servedStale >= .seconds(bound - 2) && servedStale <= .seconds(bound + 3), "\(servedStale)")
        try await eventually(timeout: .seconds(5)) { service.logText.contains("the trust is stale") }
        // Failing closed, and saying so: not ready (503), and /health (still 200: the process
        // serves) tells why.
        let stale = probe("/ready")
        #expect(stale?.status == 503 && stale?.body.contains("failing closed") == true, "\(String(describing: stale))")
        let health = probe("/health")
        #expect(
            health?.status == 200 && health?.body.contains("failing closed") == true, "\(String(describing: health))")
        // Back: it recovers.
        nginx = try await startNginx()
        try await eventually(timeout: .seconds(20)) { code(token) == "100 OK" }
        #expect(probe("/ready")?.status == 200)
        try await eventually(timeout: .seconds(5)) { service.logText.contains("the trust is fresh again") }

        // A revocation by the provider reaches the verifier within max-age (1 s) + 1 s.
        let older = try Data(contentsOf: URL(fileURLWithPath: directory + "/trust.jws"))
        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        let revoked = ContinuousClock.now
        try await eventually(timeout: .seconds(10)) { code(token) == "103 Revoked" }
        let propagation = ContinuousClock.now - revoked
        print("revocation propagation through nginx: \(propagation)")
        #expect(propagation <= .seconds(2), "\(propagation)")

        // Attacks on the served directory: each document is fetched (nginx's 200 is the oracle),
        // refused, and the revocation in force stays; the good list is put back after each.
        let inForce = try Self.list(in: directory)
        let attacker = try TokenSigningKey.generate()
        let forged = try SignedTrustList.sign(
            number: inForce.number + 100, issued: inForce.issued, nextUpdate: inForce.nextUpdate,
            issuers: inForce.issuers, revocations: .empty, key: attacker)
        let attacks: [(what: String, bytes: [UInt8])] = [
            ("signed by another key", forged.bytes), ("an older number", Array(older)),
            ("malformed", Array(#"{"v":1,"number":999}"#.utf8)),
        ]
        func serve(_ bytes: [UInt8]) throws {
            try Data(bytes).write(to: URL(fileURLWithPath: directory + "/.next.jws"))
            #expect(rename(directory + "/.next.jws", directory + "/trust.jws") == 0)
        }
        for attack in attacks {
            let (served, refused) = (fetches(200), refusals())
            try serve(attack.bytes)
            try await eventually(timeout: .seconds(10)) { fetches(200) > served && refusals() > refused }
            #expect(code(token) == "103 Revoked", "\(attack.what)")
            try serve(inForce.bytes)
            try await eventually(timeout: .seconds(10)) { fetches(200) > served + 1 }
        }
        #expect(code(token) == "103 Revoked")
        try tools.check("dcprovision", ["publish"])
        try await eventually(timeout: .seconds(10)) {
            service.logText.contains("accepted trust list \(inForce.number + 1)")
        }
        #expect(code(token) == "103 Revoked")
        #expect(!service.logText.contains(token))
    }

    /// A certificate authority and a server certificate it issued for 127.0.0.1, made with the
    /// openssl command; returns the paths of the CA's certificate, the server's and its key.
    static func serverCertificate(in sandbox: Sandbox, named name: String) throws -> (
        authority: String, certificate: String, key: String
    ) {
        let prefix = sandbox.file("tls-" + name)
        try FileManager.default.createDirectory(atPath: prefix, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try OpenSSLFixtures.openssl(
            ["req", "-x509"] + ec + [
                "-subj", "/CN=Trust Server CA \(name)", "-days", "2", "-keyout", prefix + "/ca.key", "-out",
                prefix + "/ca.pem", "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ])
        try OpenSSLFixtures.openssl(
            ["req", "-new"] + ec + [
                "-subj", "/CN=127.0.0.1", "-keyout", prefix + "/server.key", "-out", prefix + "/server.csr",
            ])
        try "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n".write(
            toFile: prefix + "/server.ext", atomically: true, encoding: .utf8)
        try OpenSSLFixtures.openssl([
            "x509", "-req", "-in", prefix + "/server.csr", "-CA", prefix + "/ca.pem", "-CAkey", prefix + "/ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", prefix + "/server.ext", "-out", prefix + "/server.pem",
        ])
        return (prefix + "/ca.pem", prefix + "/server.pem", prefix + "/server.key")
    }

    @Test(
        "dcverify --trust-url https:// without --trust-key takes trust-key.jwks over TLS from a server --trust-ca vouches for, and then trusts only lists that key signs; an unvouched server, a key file of two keys, or plain http without a key stop it before it listens"
    )
    func keyTakenOverTLS() async throws {
        let (tools, directory) = try Self.world("trust-tls")
        let sandbox = tools.sandbox
        defer { sandbox.remove() }
        let server = try Self.serverCertificate(in: sandbox, named: "good")
        let stranger = try Self.serverCertificate(in: sandbox, named: "stranger")
        let port = try freeLocalPort()
        let nginx = try await Self.servePublished(
            directory, in: sandbox, listen: ["127.0.0.1:\(port)"], tls: (server.certificate, server.key))
        defer { nginx.stop() }
        let url = "https://127.0.0.1:\(port)/"
        let service = try RunningService.start(
            Binaries.dcverify,
            [
                "serve", "--listen", "127.0.0.1:0", "--trust-url", url, "--trust-ca", server.authority,
                "--trust-max-age", "4s",
            ],
            in: sandbox, name: "dcverify")
        defer { service.stop() }
        func code(_ token: String) -> String? {
            (try? AuthTokenCommandTests.verify(token, port: service.port, tools))?["X-Good-GD-AuthResponseCode"]
        }
        let published = try #require(try TrustedIssuers.load(from: directory + "/trust-key.jwks").keys.values.first)
        #expect(service.logText.contains("took the trust key \(published.thumbprint)"), "\(service.logText)")
        let token = try tools.check("dcclient", ["token", "--challenge", "over TLS"]).stdoutText
            .trimmingCharacters(in: .newlines)
        #expect(code(token) == "100 OK", "\(service.logText)")
        // The key taken decides from then on: a list signed by another key, served by the same
        // vouched-for server, is refused and the revocation below still arrives.
        let inForce = try Self.list(in: directory)
        let forged = try SignedTrustList.sign(
            number: inForce.number + 100, issued: inForce.issued, nextUpdate: inForce.nextUpdate,
            issuers: inForce.issuers, revocations: .empty, key: try TokenSigningKey.generate())
        try Data(forged.bytes).write(to: URL(fileURLWithPath: directory + "/trust.jws"))
        try await eventually(timeout: .seconds(10)) { service.logText.contains("refused the trust list") }
        try Data(inForce.bytes).write(to: URL(fileURLWithPath: directory + "/trust.jws"))
        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        try await eventually(timeout: .seconds(10)) { code(token) == "103 Revoked" }

        // Each refusal: one line, its exit status, and no port ever bound (no port file written).
        func refused(_ arguments: [String]) throws -> (status: Int32, line: String) {
            let portFile = sandbox.file("refused.port")
            let result = try sandbox.run(
                Binaries.dcverify, ["serve", "--listen", "127.0.0.1:0", "--port-file", portFile] + arguments,
                timeout: 30)
            #expect(!FileManager.default.fileExists(atPath: portFile))
            let lines = result.stderrText.split(separator: "\n").filter {
                !$0.contains("\"dc.") && !$0.contains(" notice ")
            }
            return (result.status, lines.last.map(String.init) ?? "")
        }
        let unvouched = try refused(["--trust-url", url, "--trust-ca", stranger.authority])
        #expect(
            unvouched.status == 69 && unvouched.line.contains("cannot take the trust key from \(url)trust-key.jwks"),
            "\(unvouched)")
        let plain = try refused(["--trust-url", "http://127.0.0.1:\(port)/", "--trust-over-http"])
        #expect(plain.status == 64 && plain.line.contains("needs --trust-key"), "\(plain)")
        let twoKeys = TrustedIssuers([published, try TokenSigningKey.generate().publicKey])
        try Data(twoKeys.jwks()).write(to: URL(fileURLWithPath: directory + "/trust-key.jwks"))
        let doubled = try refused(["--trust-url", url, "--trust-ca", server.authority])
        #expect(doubled.status == 69 && doubled.line.contains("2 keys, not one"), "\(doubled)")
    }

    @Test(
        "A publication stopped after its files but before its record never lets the next one reuse the number: the next list is numbered above the one served"
    )
    func numberNeverReused() throws {
        let (tools, directory) = try Self.world("publish-number")
        defer { tools.sandbox.remove() }
        let record = tools.sandbox.stateHome + "/dcprovision/publication.json"
        let first = try Self.list(in: directory)
        let recordAfterFirst = try Data(contentsOf: URL(fileURLWithPath: record))
        try tools.check("dcprovision", ["publish"])
        let second = try Self.list(in: directory)
        #expect(second.number == first.number + 1)
        // As if the second publication had stopped between writing its files and its record.
        try recordAfterFirst.write(to: URL(fileURLWithPath: record))
        try tools.check("dcprovision", ["unauthorize"] + Self.scheme)
        let third = try Self.list(in: directory)
        #expect(third.number > second.number, "list \(third.number) after list \(second.number) was served")
        #expect(!third.revocations.revokedDelegations.isEmpty)
    }
}
