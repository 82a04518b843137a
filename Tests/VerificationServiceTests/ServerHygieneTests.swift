import Foundation
import ServiceHarness
import TestSupport
import Testing

/// What a real server needs: TLS, limits on slow clients, graceful shutdown.
@Suite(
    "dcverify as a real server: TLS, limits, slow clients, SIGTERM, reload, logs", .ownThreads, .timeLimit(.minutes(3)))
struct ServerHygieneTests {
    /// A self-signed certificate for localhost and 127.0.0.1, made by the openssl CLI.
    static func certificate(in sandbox: Sandbox) throws -> (certificate: String, key: String) {
        let key = sandbox.file("server.key")
        let certificate = sandbox.file("server.pem")
        try runChecked(
            try which("openssl"),
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", certificate, "-subj", "/CN=localhost", "-days", "2",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ])
        return (certificate, key)
    }

    @Test("HTTPS from a PEM certificate and key (curl --cacert trusts it); plain HTTP and TLS 1.1 are refused")
    func tls() throws {
        let sandbox = try Sandbox("dcverify-tls")
        defer { sandbox.remove() }
        let (certificate, key) = try Self.certificate(in: sandbox)
        let service = try RunningService.start(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--tls-certificate", certificate, "--tls-key", key]
                + verifierFiles(in: sandbox), in: sandbox)
        defer { service.stop() }
        let health = try curl(["--cacert", certificate, service.url("/health", scheme: "https")], sandbox: sandbox)
        #expect(health.status == 0, "\(health.stderrText)")
        #expect(RawResponse(health.stdout)?.status == 200)
        let verify = try curl(
            [
                "--cacert", certificate, "-H", "X-Good-GD-AuthToken: t",
                service.url("/verifyGDAuthToken", scheme: "https"),
            ],
            sandbox: sandbox)
        #expect(RawResponse(verify.stdout)?.values("X-Good-GD-AuthResponseCode") == ["101 Invalid Token"])
        // Without the CA curl refuses the certificate; plain HTTP gets no HTTP answer.
        #expect(try curl([service.url("/health", scheme: "https")], sandbox: sandbox).status != 0)
        let plain = try curl([service.url("/health")], sandbox: sandbox)
        #expect(RawResponse(plain.stdout)?.status != 200)
        // TLS 1.2 is the minimum: a TLS 1.1 handshake fails, a TLS 1.2 one succeeds.
        let openssl = try which("openssl")
        for (version, succeeds) in [("-tls1_1", false), ("-tls1_2", true), ("-tls1_3", true)] {
            let result = try sandbox.run(
                openssl,
                ["s_client", "-connect", "127.0.0.1:\(service.port)", version, "-CAfile", certificate, "-brief"]
                    + (version == "-tls1_1" ? ["-cipher", "DEFAULT:@SECLEVEL=0"] : []),
                stdin: Array("Q\n".utf8), timeout: 30)
            #expect((result.status == 0) == succeeds, "\(version): \(result.stderrText)")
        }
    }

    @Test(
        "an encrypted TLS key (openssl pkcs8 -v2 aes-256-cbc) opens with --passphrase-file; without it or with a wrong one dcverify exits 77 before listening, and the passphrase is in no log"
    )
    func encryptedTLSKey() throws {
        let sandbox = try Sandbox("dcverify-tls-encrypted")
        defer { sandbox.remove() }
        let (certificate, key) = try Self.certificate(in: sandbox)
        let passphrase = "tls key passphrase 4711"
        let passphraseFile = try sandbox.write("tls.pass", passphrase + "\n")
        chmod(passphraseFile, 0o600)
        let encrypted = sandbox.file("server.enc.key")
        try runChecked(
            try which("openssl"),
            [
                "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", key, "-out", encrypted, "-passout",
                "file:" + passphraseFile,
            ])
        let base = ["serve", "--listen", "127.0.0.1:0", "--tls-certificate", certificate, "--tls-key", encrypted]
        let service = try RunningService.start(
            Binaries.dcverify, base + ["--passphrase-file", passphraseFile] + verifierFiles(in: sandbox), in: sandbox)
        let health = try curl(["--cacert", certificate, service.url("/health", scheme: "https")], sandbox: sandbox)
        #expect(RawResponse(health.stdout)?.status == 200, "\(health.stderrText)")
        service.stop()
        #expect(!service.logText.contains(passphrase))
        let wrong = try sandbox.write("wrong.pass", "not it\n")
        chmod(wrong, 0o600)
        for extra in [[], ["--passphrase-file", wrong]] {
            let refused = try sandbox.run(
                Binaries.dcverify, base + extra + verifierFiles(in: sandbox) + ["--port-file", sandbox.file("p")],
                timeout: 60)
            #expect(refused.status == 77, "\(extra): \(refused.stderrText)")
            #expect(refused.stderrText.split(separator: "\n").count == 1, "\(refused.stderrText)")
            #expect(!FileManager.default.fileExists(atPath: sandbox.file("p")))
        }
        // A passphrase with nothing to open is a usage error.
        let stray = try sandbox.run(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--passphrase-file", passphraseFile] + verifierFiles(in: sandbox),
            timeout: 60)
        #expect(stray.status == 64, "\(stray.stderrText)")
    }

    @Test("the key and certificate may be one PKCS#12 file (read by our conversion engine)")
    func tlsFromPKCS12() throws {
        let sandbox = try Sandbox("dcverify-p12")
        defer { sandbox.remove() }
        let (certificate, key) = try Self.certificate(in: sandbox)
        let bundle = sandbox.file("server.p12")
        try runChecked(
            try which("openssl"),
            ["pkcs12", "-export", "-in", certificate, "-inkey", key, "-out", bundle, "-passout", "pass:"])
        let service = try RunningService.start(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--tls-certificate", bundle, "--tls-key", bundle]
                + verifierFiles(in: sandbox), in: sandbox)
        defer { service.stop() }
        let health = try curl(["--cacert", certificate, service.url("/health", scheme: "https")], sandbox: sandbox)
        #expect(RawResponse(health.stdout)?.status == 200, "\(health.stderrText)")
    }

    @Test("a key that is not the certificate's is refused before listening (exit 65)")
    func mismatchedKey() throws {
        let sandbox = try Sandbox("dcverify-mismatch")
        defer { sandbox.remove() }
        let (certificate, _) = try Self.certificate(in: sandbox)
        let other = sandbox.file("other.key")
        try runChecked(
            try which("openssl"), ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other])
        let result = try sandbox.run(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--tls-certificate", certificate, "--tls-key", other]
                + verifierFiles(in: sandbox), timeout: 30)
        #expect(result.status == 65, "\(result.stderrText)")
    }

    @Test(
        "a slowloris that dribbles its head, or its body, a byte a second is cut off within the limit",
        arguments: ["head", "body", "tls-handshake"])
    func slowloris(_ phase: String) throws {
        let sandbox = try Sandbox("dcverify-slowloris")
        defer { sandbox.remove() }
        var arguments =
            ["serve", "--listen", "127.0.0.1:0", "--request-timeout", "2"] + (try verifierFiles(in: sandbox))
        if phase == "tls-handshake" {
            let (certificate, key) = try Self.certificate(in: sandbox)
            arguments += ["--tls-certificate", certificate, "--tls-key", key]
        }
        let service = try RunningService.start(Binaries.dcverify, arguments, in: sandbox)
        defer { service.stop() }
        let connection = try RawConnection(port: service.port)
        let head =
            "GET /verifyGDAuthToken HTTP/1.1\r\nHost: x\r\nX-Good-GD-AuthToken: abc\r\nContent-Length: 100\r\n\r\n"
        let dribbled: [UInt8]
        switch phase {
        case "head": dribbled = Array(head.utf8)
        case "body":
            connection.send(head)
            dribbled = Array(repeating: UInt8(ascii: "x"), count: 100)
        default:
            dribbled =
                [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03] + Array(repeating: 0, count: 40)
        }
        let start = ContinuousClock.now
        var cutOff = false
        for byte in dribbled {
            if !connection.send([byte]) {
                cutOff = true
                break
            }
            if connection.readUntilClosed(timeout: .seconds(1)).closed {
                cutOff = true
                break
            }
            if ContinuousClock.now - start > .seconds(15) { break }
        }
        let elapsed = ContinuousClock.now - start
        #expect(cutOff, "\(phase): still connected after \(elapsed)")
        #expect(elapsed < .seconds(6), "\(phase): cut off only after \(elapsed)")
        // The service still answers others.
        #expect(try rawRequest(port: service.port, "/health")?.status == 200 || phase == "tls-handshake")
    }

    @Test("--max-connections: a connection over the limit waits until one closes")
    func connectionLimit() throws {
        let sandbox = try Sandbox("dcverify-max-connections")
        defer { sandbox.remove() }
        let service = try RunningService.start(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:0", "--max-connections", "1"] + verifierFiles(in: sandbox), in: sandbox)
        defer { service.stop() }
        var holder: RawConnection? = try RawConnection(port: service.port)
        holder?.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(holder?.readResponse(timeout: .seconds(10))?.status == 200)
        // The first connection stays open (keep-alive); the second is not served meanwhile.
        let waiting = try RawConnection(port: service.port)
        waiting.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(waiting.readResponse(timeout: .seconds(2)) == nil)
        holder = nil
        #expect(waiting.readResponse(timeout: .seconds(10))?.status == 200)
    }

    @Test("SIGTERM: a request in flight still gets its whole answer, new connections are refused, exit 0")
    func gracefulShutdown() async throws {
        let sandbox = try Sandbox("dcverify-sigterm")
        defer { sandbox.remove() }
        let service = try Tokens.startSlowFixture(in: sandbox)
        let connection = try RawConnection(port: service.port)
        // The fixture takes 2 s to verify this token: the request is in flight when SIGTERM comes.
        connection.send("GET /verifyGDAuthToken HTTP/1.1\r\nHost: x\r\nX-Good-GD-AuthToken: \(Tokens.slow)\r\n\r\n")
        try await Task.sleep(for: .milliseconds(500))
        service.process.kill(SIGTERM)
        try await Task.sleep(for: .milliseconds(500))
        #expect(throws: (any Error).self) { try rawRequest(port: service.port, "/health") }
        let response = try #require(connection.readResponse(timeout: .seconds(20)))
        #expect(response.status == 200)
        #expect(response.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        let status = service.process.wait(timeout: .seconds(30))
        #expect(status.map { SpawnedProcess.wasSignaled($0) } == false)
        #expect(status.map { ($0 >> 8) & 0xFF } == 0)
    }

    @Test("dcverify exits 0 on SIGTERM and on SIGINT")
    func signals() throws {
        let sandbox = try Sandbox("dcverify-signals")
        defer { sandbox.remove() }
        for signal in [SIGTERM, SIGINT] {
            let service = try RunningService.start(
                Binaries.dcverify, ["serve", "--listen", "127.0.0.1:0"] + verifierFiles(in: sandbox), in: sandbox,
                name: "signal-\(signal)")
            #expect(try rawRequest(port: service.port, "/health")?.status == 200)
            service.process.kill(signal)
            let status = service.process.wait(timeout: .seconds(30))
            #expect(status.map { SpawnedProcess.wasSignaled($0) } == false, "signal \(signal)")
            #expect(status.map { ($0 >> 8) & 0xFF } == 0, "signal \(signal)")
        }
    }
}
