import CredentialCoding
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// The test CA revokes, publishes CRLs and answers OCSP; `inspect`, `send` and `--derive` check
/// revocation. OpenSSL is the peer on both sides: its `crl`, `verify` and `ocsp` tools judge what
/// the test CA makes, and `openssl ca -gencrl` and `openssl ocsp -index` make what we judge.
@Suite("Revocation: the test CA's CRLs and OCSP, checked as OpenSSL checks them", .ownThreads, .timeLimit(.minutes(5)))
struct RevocationTests {
    /// A sandbox with a test CA (`ca`) that issued two credentials as PEM files (`a`, `b`), and
    /// `chain.pem` (its root and issuing CA).
    struct World {
        let sandbox: Sandbox
        var root: String { sandbox.root }

        init(_ label: String, ocspURL: String? = nil) throws {
            sandbox = try Sandbox(label)
            try sandbox.runTool("dcprovision", ["testca", "init", "ca"] + (ocspURL.map { ["--ocsp-url", $0] } ?? []))
            for name in ["a", "b"] {
                try sandbox.runTool("dcprovision", ["testca", "issue", "ca", "--out-dir", name, "--format", "pem"])
            }
            let chain = try readText(sandbox.file("ca/root.pem")) + readText(sandbox.file("ca/issuing.pem"))
            try sandbox.write("chain.pem", chain)
        }

        func remove() { sandbox.remove() }

        func openssl(_ arguments: [String]) throws -> ProcessResult {
            try sandbox.run(OpenSSLFixtures.openssl, arguments, timeout: 60)
        }

        func serial(_ certificate: String) throws -> String {
            let text = try openssl(["x509", "-in", sandbox.file(certificate), "-noout", "-serial"]).stdoutText
            return String(text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "=")[1])
        }

        /// `inspect` of credential `name`'s PEM files with the CA's chain, plus `extra`.
        func inspect(_ name: String, _ extra: [String], expect status: Int32?) throws -> ProcessResult {
            var sources: [String] = []
            for tag in ["authentication", "signing", "encryption", "escrow"] {
                sources += ["--pem", "\(tag)=\(name)/\(tag).pem"]
            }
            return try sandbox.runTool(
                "dcprovision",
                ["inspect"] + sources + ["--trust-anchor", "chain.pem", "--json"] + extra, expect: status)
        }
    }

    /// The findings of one `inspect --json` report, as `code` → severity.
    static func findings(_ result: ProcessResult) throws -> [(code: String, severity: String)] {
        let report = try #require(try jsonPayload(result.stdout, "report") as? [String: Any])
        let rows = try #require(report["rows"] as? [[String: Any]])
        return rows.flatMap { ($0["findings"] as? [[String: Any]]) ?? [] }.map {
            (($0["code"] as? String) ?? "", ($0["severity"] as? String) ?? "")
        }
    }

    @Test(
        "testca revoke and crl: openssl crl -verify accepts the CRL, openssl verify -crl_check refuses the revoked certificate and passes the others"
    )
    func crlAcceptedByOpenSSL() throws {
        let world = try World("revocation-crl")
        defer { world.remove() }
        let revoked = try world.serial("a/authentication.pem")
        let said = try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", revoked, "--reason", "keyCompromise"])
        #expect(said.stdoutText.contains("revoked \(revoked) (keyCompromise)"), "\(said.stdoutText)")
        // Again: nothing changes, and it says so.
        let again = try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", revoked.lowercased()])
        #expect(again.stdoutText.contains("was revoked already"), "\(again.stdoutText)")
        try world.sandbox.runTool("dcprovision", ["testca", "revoke", "ca", "--serial", "0BADC0DE"], expect: 66)
        try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", revoked, "--reason", "lunch"], expect: 64)
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "crl.pem"])

        let verified = try world.openssl(["crl", "-in", "crl.pem", "-noout", "-verify", "-CAfile", "ca/issuing.pem"])
        #expect(verified.status == 0 && verified.stderrText.contains("verify OK"), "\(verified.stderrText)")
        let text = try world.openssl(["crl", "-in", "crl.pem", "-noout", "-text"]).stdoutText
        #expect(text.contains("Serial Number: \(revoked)") && text.contains("Key Compromise"), "\(text)")
        #expect(text.contains("X509v3 CRL Number: \n                1"), "\(text)")
        for (certificate, good) in [
            ("a/authentication.pem", false), ("a/signing.pem", true), ("b/authentication.pem", true),
        ] {
            let result = try world.openssl([
                "verify", "-crl_check", "-CAfile", "chain.pem", "-CRLfile", "crl.pem", certificate,
            ])
            #expect((result.status == 0) == good, "\(certificate): \(result.stdoutText)\(result.stderrText)")
            if !good { #expect(result.stderrText.contains("certificate revoked"), "\(result.stderrText)") }
        }
        // DER too, and the number goes up.
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "crl.der", "--format", "der"])
        let der = try world.openssl(["crl", "-inform", "DER", "-in", "crl.der", "-noout", "-crlnumber"])
        #expect(der.stdoutText.contains("crlNumber=0x02"), "\(der.stdoutText)")
    }

    /// The status lines `openssl ocsp` prints for each certificate asked about, without the
    /// update times (two responders answer seconds apart).
    static func statusLines(_ output: String) -> [String] {
        output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.hasPrefix("This Update") && !$0.hasPrefix("Next Update") && !$0.isEmpty
        }
    }

    @Test(
        "testca ocsp answers as openssl ocsp -index does on the same index.txt: good, revoked with reason and time, unknown for a stranger; GET works too"
    )
    func ocspMatchesOpenSSL() throws {
        let world = try World("revocation-ocsp")
        defer { world.remove() }
        try world.sandbox.runTool(
            "dcprovision",
            [
                "testca", "revoke", "ca", "--serial", try world.serial("a/authentication.pem"), "--reason",
                "superseded",
            ])
        try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", try world.serial("a/signing.pem")])
        // A stranger: a certificate of another CA, asked about as if ours issued it.
        try world.sandbox.runTool("dcprovision", ["testca", "init", "other"])
        try world.sandbox.runTool(
            "dcprovision", ["testca", "issue", "other", "--out-dir", "stranger", "--format", "pem"])

        let ours = try RunningService.start(
            Binaries.dcprovision, ["testca", "ocsp", world.sandbox.file("ca"), "--listen", "127.0.0.1:0"],
            in: world.sandbox, name: "ours")
        defer { ours.stop() }
        let peerLog = world.sandbox.file("peer.log")
        let peer = try SpawnedProcess(
            OpenSSLFixtures.openssl,
            [
                "ocsp", "-index", world.sandbox.file("ca/index.txt"), "-port", "0", "-CA",
                world.sandbox.file("ca/issuing.pem"), "-rsigner", world.sandbox.file("ca/issuing.pem"), "-rkey",
                world.sandbox.file("ca/issuing.key"), "-nmin", "60",
            ], environment: world.sandbox.environment, output: peerLog)
        defer {
            peer.kill()
            _ = peer.wait(timeout: .seconds(10))
        }
        var peerPort: Int?
        let deadline = ContinuousClock.now + .seconds(30)
        while peerPort == nil, ContinuousClock.now < deadline {
            let log = RunningService.readLog(peerLog)
            if let range = log.range(of: "ACCEPT [::]:") {
                peerPort = Int(log[range.upperBound...].prefix { $0.isNumber })
            }
            if peerPort == nil { usleep(20_000) }
        }
        let openSSLPort = try #require(
            peerPort, "openssl ocsp -index did not start: \(RunningService.readLog(peerLog))")

        var answers: [[String]] = []
        for url in ["http://127.0.0.1:\(ours.port)/", "http://127.0.0.1:\(openSSLPort)/"] {
            let asked = try world.openssl([
                "ocsp", "-issuer", "ca/issuing.pem", "-CAfile", "chain.pem", "-url", url, "-cert",
                "a/authentication.pem", "-cert", "a/signing.pem", "-cert", "b/authentication.pem", "-cert",
                "stranger/authentication.pem",
            ])
            #expect(asked.status == 0, "\(url): \(asked.stderrText)")
            #expect(asked.stderrText.contains("Response verify OK"), "\(url): \(asked.stderrText)")
            answers.append(Self.statusLines(asked.stdoutText))
        }
        #expect(answers[0] == answers[1], "ours: \(answers[0])\nopenssl: \(answers[1])")
        #expect(answers[0].contains("a/authentication.pem: revoked") && answers[0].contains("Reason: superseded"))
        #expect(answers[0].contains("a/signing.pem: revoked") && answers[0].contains("b/authentication.pem: good"))
        #expect(answers[0].contains("stranger/authentication.pem: unknown"), "\(answers[0])")

        // RFC 6960 A.1 GET: the URL-encoded base64 of the request.
        _ = try world.openssl([
            "ocsp", "-issuer", "ca/issuing.pem", "-cert", "b/signing.pem", "-reqout", "request.der", "-no_nonce",
        ])
        let request = try Data(contentsOf: URL(fileURLWithPath: world.sandbox.file("request.der")))
            .base64EncodedString()
        let path = try #require(request.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        let got = try world.sandbox.run(
            "/usr/bin/curl", ["-sS", "-o", "got.der", "http://127.0.0.1:\(ours.port)/\(path)"], timeout: 30)
        #expect(got.status == 0, "\(got.stderrText)")
        let read = try world.openssl([
            "ocsp", "-respin", "got.der", "-issuer", "ca/issuing.pem", "-cert", "b/signing.pem", "-CAfile", "chain.pem",
            "-no_nonce",
        ])
        #expect(read.stdoutText.contains("b/signing.pem: good"), "\(read.stdoutText)\(read.stderrText)")
        // Garbage is answered malformedRequest, and the responder stays up.
        let garbage = try world.sandbox.run(
            "/usr/bin/curl",
            [
                "-sS", "-o", "bad.der", "--data-binary", "not ocsp", "-H", "Content-Type: application/ocsp-request",
                "http://127.0.0.1:\(ours.port)/",
            ], timeout: 30)
        #expect(garbage.status == 0)
        let bad = try world.openssl(["ocsp", "-respin", "bad.der", "-resp_text", "-noverify"])
        #expect(bad.stdoutText.contains("malformedrequest"), "\(bad.stdoutText)\(bad.stderrText)")
    }

    @Test(
        "testca ocsp on a port in use: exit 69 and one line saying the address is in use and naming --listen HOST:0; on [::1] it answers over IPv6, and [::] takes IPv4 too (openssl ocsp as the client)"
    )
    func ocspListens() throws {
        let world = try World("revocation-ocsp-listen")
        defer { world.remove() }
        let first = try RunningService.start(
            Binaries.dcprovision, ["testca", "ocsp", world.sandbox.file("ca"), "--listen", "127.0.0.1:0"],
            in: world.sandbox, name: "first")
        defer { first.stop() }
        let busy = try world.sandbox.runTool(
            "dcprovision", ["testca", "ocsp", "ca", "--listen", "127.0.0.1:\(first.port)"], expect: 69)
        #expect(
            busy.stderrText
                == "dcprovision: 127.0.0.1:\(first.port): the address is in use; try --listen 127.0.0.1:0 for any free port, or stop what uses it\n",
            "\(busy.stderrText)")
        for (index, (listen, host)) in [("[::1]:0", "[::1]"), ("[::]:0", "[::1]"), ("[::]:0", "127.0.0.1")].enumerated()
        {
            let server = try RunningService.start(
                Binaries.dcprovision, ["testca", "ocsp", world.sandbox.file("ca"), "--listen", listen],
                in: world.sandbox, name: "v6-\(index)")
            defer { server.stop() }
            let asked = try world.openssl([
                "ocsp", "-issuer", "ca/issuing.pem", "-CAfile", "chain.pem", "-url", "http://\(host):\(server.port)/",
                "-cert", "a/authentication.pem",
            ])
            #expect(
                asked.stdoutText.contains("a/authentication.pem: good"), "\(listen) via \(host): \(asked.stderrText)")
        }
    }

    @Test(
        "inspect --crl / --ocsp: a revoked certificate is exit 79 naming it; a good credential passes and says how it was checked; --ocsp aia asks the responder the certificates name"
    )
    func inspectChecksRevocation() throws {
        let port = try freeLocalPort()
        let world = try World("revocation-inspect", ocspURL: "http://127.0.0.1:\(port)/ocsp")
        defer { world.remove() }
        let revoked = try world.serial("a/signing.pem")
        try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", revoked, "--reason", "keyCompromise"])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "crl.pem"])

        let refused = try world.inspect("a", ["--crl", "crl.pem"], expect: 79)
        #expect(refused.stderrText.contains("[signing] revoked: revoked"), "\(refused.stderrText)")
        #expect(refused.stderrText.contains("keyCompromise"), "\(refused.stderrText)")
        let good = try world.inspect("b", ["--crl", "crl.pem"], expect: 0)
        let checked = try Self.findings(good).filter { $0.code == "revocation-good" }
        #expect(checked.count == 4 && checked.allSatisfy { $0.severity == "info" }, "\(checked)")

        let responder = try RunningService.start(
            Binaries.dcprovision, ["testca", "ocsp", world.sandbox.file("ca"), "--listen", "127.0.0.1:\(port)"],
            in: world.sandbox,
            name: "ocsp")
        defer { responder.stop() }
        try world.inspect("a", ["--ocsp", "http://127.0.0.1:\(port)/"], expect: 79)
        try world.inspect("a", ["--ocsp", "aia"], expect: 79)
        let viaAIA = try world.inspect("b", ["--ocsp", "aia"], expect: 0)
        #expect(
            try Self.findings(viaAIA).filter { $0.code == "revocation-good" }.count == 4, "\(viaAIA.stdoutText)")
        // Without a source, nothing is checked and nothing is said.
        let unchecked = try world.inspect("a", [], expect: 0)
        #expect(try Self.findings(unchecked).allSatisfy { !$0.code.hasPrefix("revo") })
    }

    @Test(
        "A CRL that is malformed, badly signed, stale or from another issuer is never good: exit 75 (65 for a file that is no CRL); --allow-unchecked-revocation goes on with a warning"
    )
    func badCRLsAreRefused() throws {
        let world = try World("revocation-bad-crl")
        defer { world.remove() }
        try world.sandbox.write("garbage.pem", "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n")
        try world.inspect("b", ["--crl", "garbage.pem"], expect: 65)
        // Another CA's CRL says nothing about ours.
        try world.sandbox.runTool("dcprovision", ["testca", "init", "foreign", "--organization", "Someone Else"])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "foreign", "--out", "foreign.pem"])
        // A CA with the very same names but other keys: its CRL names our issuer and is forged.
        try world.sandbox.runTool("dcprovision", ["testca", "init", "twin"])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "twin", "--out", "forged.pem"])
        // A CRL of ours whose nextUpdate has passed.
        let stale = try TestCA(directory: world.sandbox.file("ca")).makeCRL(
            now: Date().addingTimeInterval(-10 * 86400), validity: 86400)
        try Data(stale.pem).write(to: URL(fileURLWithPath: world.sandbox.file("stale.pem")))

        for (file, reason) in [
            ("foreign.pem", "no CRL from"), ("forged.pem", "signature does not verify"), ("stale.pem", "stale"),
        ] {
            let refused = try world.inspect("b", ["--crl", file], expect: 75)
            #expect(
                refused.stderrText.contains("revocation-unknown") && refused.stdoutText.contains(reason),
                "\(file): \(refused.stdoutText)\(refused.stderrText)")
            let allowed = try world.inspect("b", ["--crl", file, "--allow-unchecked-revocation"], expect: 0)
            let findings = try Self.findings(allowed).filter { $0.code.hasPrefix("revocation") }
            #expect(
                findings.count == 4 && findings.allSatisfy { $0 == ("revocation-unknown", "warning") },
                "\(file): \(findings)")
            // Strict still refuses: a warning fails strict validation.
            try world.inspect("b", ["--crl", file, "--allow-unchecked-revocation", "--strict"], expect: 65)
        }
        // Revoked in a good CRL wins over a bad one.
        try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", try world.serial("b/escrow.pem")])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "good.pem"])
        try world.inspect("b", ["--crl", "forged.pem", "--crl", "good.pem"], expect: 79)
    }

    @Test(
        "An OCSP answer that cannot be had, is signed by another CA, is stale or answers another request is never good (a canned responder serves the last two: no real responder makes them on demand)"
    )
    func badOCSPAnswersAreRefused() throws {
        let world = try World("revocation-bad-ocsp")
        defer { world.remove() }
        let ca = try TestCA(directory: world.sandbox.file("ca"))
        let certificate = try CredentialReader().read(file: world.sandbox.file("b/authentication.pem")).certificates[0]
        let policy = { (url: String) in
            RevocationPolicy(sources: RevocationSources(ocspURLs: [url], timeout: .seconds(5)))
        }
        func status(_ url: String) -> RevocationStatus {
            policy(url).status(of: certificate, issuers: [ca.issuingCertificate])
        }
        // Nobody listening.
        let closed = try freeLocalPort()
        #expect(status("http://127.0.0.1:\(closed)/").description.contains("not checked"))

        // The twin CA (same names, other keys) answers for our certificate: refused.
        try world.sandbox.runTool("dcprovision", ["testca", "init", "twin"])
        let twin = try RunningService.start(
            Binaries.dcprovision, ["testca", "ocsp", world.sandbox.file("twin"), "--listen", "127.0.0.1:0"],
            in: world.sandbox, name: "twin")
        defer { twin.stop() }
        let forged = status("http://127.0.0.1:\(twin.port)/")
        #expect(forged.description.contains("is not signed by"), "\(forged)")

        // Our own CA's answers, served as they are: one made two hours ago (past its nextUpdate),
        // one to a request with another nonce (a replay).
        _ = try world.openssl([
            "ocsp", "-issuer", "ca/issuing.pem", "-cert", "b/authentication.pem", "-reqout", "no-nonce.der",
            "-no_nonce",
        ])
        _ = try world.openssl([
            "ocsp", "-issuer", "ca/issuing.pem", "-cert", "b/authentication.pem", "-reqout", "nonce.der",
        ])
        let responder = try ca.ocspResponder()
        let read = { (name: String) in Array(try Data(contentsOf: URL(fileURLWithPath: world.sandbox.file(name)))) }
        let staleAnswer = responder.respond(to: try read("no-nonce.der"), at: Date().addingTimeInterval(-7200)) {
            _ in .good
        }
        let replayed = responder.respond(to: try read("nonce.der")) { _ in .good }
        let fresh = responder.respond(to: try read("no-nonce.der")) { _ in .good }
        for (answer, expected) in [
            (staleAnswer, "stale"), (replayed, "nonce is not the request's"), (fresh, "good"),
            ([UInt8]("x".utf8), "no answer"),
        ] {
            let server = try CannedHTTPServer(answer)
            defer { server.stop() }
            let got = status("http://127.0.0.1:\(server.port)/")
            #expect(got.description.contains(expected), "\(expected): \(got)")
        }
    }

}

/// An HTTP server that answers every request with the same body (`application/ocsp-response`),
/// on a thread of its own: a fake, for the answers no real responder gives on demand (stale,
/// replayed, malformed).
final class CannedHTTPServer: @unchecked Sendable {
    let port: Int
    private let socket: Int32
    private let body: [UInt8]

    init(_ body: [UInt8]) throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && listen(socket, 8) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard listening else {
            close(socket)
            throw POSIXError(.EADDRINUSE)
        }
        self.body = body
        self.socket = socket
        port = Int(UInt16(bigEndian: address.sin_port))
        let response =
            Array(
                "HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\nContent-Length: \(body.count)\r\n\r\n"
                    .utf8)
            + body
        Thread.detachNewThread {
            while true {
                let connection = accept(socket, nil, nil)
                // The thread closes the socket itself, once stop() has shut it down: closed from
                // stop(), its descriptor number could be reused by the next server's socket before
                // this loop calls accept again, and this server would answer for that one.
                guard connection >= 0 else {
                    close(socket)
                    return
                }
                var buffer = [UInt8](repeating: 0, count: 65536)
                var timeout = timeval(tv_sec: 1, tv_usec: 0)
                setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                // One read takes the request (small, on loopback); what it says does not matter.
                _ = recv(connection, &buffer, buffer.count, 0)
                _ = response.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                close(connection)
            }
        }
    }

    func stop() {
        shutdown(socket, Int32(SHUT_RDWR))
    }
}
