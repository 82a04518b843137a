import CMPTestServer
import Foundation
import TestSupport
import Testing

/// `dcprovision send --provider cmp`, through the real tools, against `openssl cmp -port`
/// (OpenSSL's mock CMP server, which answers with the certificate the openssl CLI made for the
/// key the test made): the credential a client installs came through CMP; each bad set-up is one
/// line, its own exit status, and nothing sent.
@Suite(
    "CMP enrolment through dcprovision send, against openssl's mock CMP server", .ownThreads, .softHSM,
    .timeLimit(.minutes(4)))
struct CMPEnrollmentCommandTests {
    static let send = [
        "send", "--brand", "Example", "--provider-scheme", "org.example.provider", "--client-scheme",
        "org.example.dcclient", "--name", "CMP credential",
    ]

    /// A managed client and a PKI, with the leaf for the authentication tag.
    struct World {
        let tools: Tools
        let pki: CMPTestPKI
        let leaf: IssuedPair

        init(_ label: String, extra: [String: String] = [:]) throws {
            tools = try Tools(label, extra: extra)
            try tools.setUpManagedClient()
            pki = try CMPTestPKI(in: tools.sandbox.directory)
            leaf = try pki.leaf("authentication")
        }

        /// The options of a PBMAC-protected `ir` for the authentication tag to `url`.
        func options(_ url: String, more: [String] = []) -> [String] {
            [
                "server=\(url)", "trust-anchor=\(pki.ca.certificate)", "reference=\(pki.reference)",
                "secret-file=\(pki.secretFile)", "tag=authentication", "new-key=authentication=\(leaf.key)",
                "subject=O=Example CMP Test,CN=Alice",
            ].map { $0 } + more
        }

        func send(_ options: [String]) throws -> ProcessResult {
            try tools.run(
                "dcprovision",
                CMPEnrollmentCommandTests.send + ["--provider", "cmp"] + options.flatMap { ["--option", $0] })
        }

        var spool: [String] {
            let directory = tools.sandbox.dataHome + "/dcclient/apps/dcclient/spool"
            return (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        }

        func fingerprint(_ file: String) throws -> String {
            try run(OpenSSLFixtures.openssl, ["x509", "-in", file, "-noout", "-fingerprint", "-sha256"]).stdoutText
        }
    }

    @Test(
        "send --provider cmp --option server=http://127.0.0.1:PORT/pkix/: the client installs the certificate the CA issued over CMP, with our key; openssl cmp as a client gets the same certificate with the same configuration"
    )
    func sendThroughCMP() throws {
        let world = try World("cmp-send")
        defer { world.tools.sandbox.remove() }
        let server = try CMPMockServer.start(
            world.pki, answering: world.leaf.certificate, caPubs: world.pki.ca.certificate)
        defer { server.stop() }
        let sent = try world.send(world.options(server.url))
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        #expect(sent.stdoutText.contains("installed \"CMP credential\""), "\(sent.stdoutText)")
        let installed = try world.tools.check("dcclient", ["show", "authentication", "--pem"]).stdoutText
        let file = try world.tools.sandbox.write("installed.pem", installed)
        #expect(try world.fingerprint(file) == (try world.fingerprint(world.leaf.certificate)))
        let verified = try run(OpenSSLFixtures.openssl, ["verify", "-CAfile", world.pki.ca.certificate, file])
        #expect(verified.status == 0, "\(verified.stderrText)")
        // The same configuration, as openssl cmp's own client spells it (docs/USING-YOUR-CA.md).
        let out = world.tools.sandbox.file("openssl-client.pem")
        let client = try run(
            OpenSSLFixtures.openssl,
            [
                "cmp", "-cmd", "ir", "-server", "127.0.0.1:\(server.port)", "-path", "pkix/", "-ref",
                world.pki.reference, "-secret", "file:" + world.pki.secretFile, "-trusted", world.pki.ca.certificate,
                "-newkey", world.leaf.key, "-subject", "/O=Example CMP Test/CN=Alice", "-certout", out,
            ])
        #expect(client.status == 0, "\(client.stderrText)")
        #expect(try world.fingerprint(out) == (try world.fingerprint(file)))
    }

    @Test(
        "Attack: a wrong secret exits 77, a server signing with another certificate than the pinned one 78, an answer signed by a key no anchor vouches for 65, a server that is down 69, a CA still waiting at total-timeout 75: one line each, nothing sent"
    )
    func badSetUps() throws {
        let world = try World("cmp-bad")
        defer { world.tools.sandbox.remove() }
        let pki = world.pki
        let wrong = try world.tools.sandbox.write("wrong-secret.txt", "not the secret")
        let signed = [
            "certificate=\(world.leaf.certificate)", "key=\(world.leaf.key)", "request=cr",
        ]
        func refused(_ result: ProcessResult, _ status: Int32, _ words: String, _ what: String) {
            #expect(result.status == status, "\(what): \(result.status) \(result.stdoutText)\(result.stderrText)")
            let lines = result.stderrText.split(separator: "\n")
            #expect(lines.count == 1, "\(what): \(result.stderrText)")
            #expect(result.stderrText.contains(words), "\(what): \(result.stderrText)")
            #expect(world.spool.isEmpty, "\(what): something was spooled")
        }
        func withoutSecret(_ options: [String]) -> [String] {
            options.filter { !$0.hasPrefix("reference=") && !$0.hasPrefix("secret-file=") }
        }

        let mac = try CMPMockServer.start(pki, answering: world.leaf.certificate)
        refused(
            try world.send(world.options(mac.url).filter { !$0.hasPrefix("secret-file=") } + ["secret-file=\(wrong)"]),
            77, "does not verify with our shared secret", "wrong secret")
        mac.stop()

        let genuine = try CMPMockServer.start(
            pki, answering: world.leaf.certificate, secret: false, signer: pki.server, clientTrust: pki.ca.certificate)
        refused(
            try world.send(
                withoutSecret(world.options(genuine.url)) + signed + ["server-certificate=\(pki.rogue.certificate)"]),
            78, "not signed by the configured server certificate", "pinned server certificate")
        genuine.stop()

        let rogue = try CMPMockServer.start(
            pki, answering: world.leaf.certificate, secret: false, signer: pki.rogue, clientTrust: pki.ca.certificate)
        refused(
            try world.send(withoutSecret(world.options(rogue.url)) + signed), 65,
            "not signed by a server the trust anchors vouch for",
            "untrusted signer")
        rogue.stop()

        let down = "http://127.0.0.1:\(try freeLocalPort())/pkix/"
        refused(
            try world.send(world.options(down, more: ["message-timeout=2"])), 69, "no answer from the CA's CMP server",
            "server down")

        let slow = try CMPMockServer.start(
            pki, answering: world.leaf.certificate, more: ["-poll_count", "5", "-check_after", "2"])
        refused(
            try world.send(world.options(slow.url, more: ["total-timeout=2"])), 75, "still answers 'waiting'",
            "waiting")
        slow.stop()

        // Secrets never on the command line: there is no option for one.
        refused(
            try world.send(world.options(down) + ["secret=correct pbm secret"]), 64, "has no option 'secret'",
            "secret on argv")
        refused(
            try world.send(world.options(down, more: ["tls-trust=\(pki.ca.certificate)"])), 64,
            "tls-trust is for an https server", "tls-trust with http")
        #expect(try world.tools.run("dcclient", ["show", "authentication"]).status != 0, "a credential was installed")
    }
}

extension CMPEnrollmentCommandTests {
    @Test(
        "send --provider cmp without a tag option: four fresh keys, one enrolment each, each certificate for its own key with its tag's key usage and the subject asked for (openssl x509), chaining to the CA (openssl verify)"
    )
    func fourTags() throws {
        let world = try World("cmp-four-tags")
        defer { world.tools.sandbox.remove() }
        // OpenSSL's generic CMP server as the CA: the mock answers one fixed certificate, so it
        // cannot certify four fresh keys.
        let ca = try CMPTestServer(
            caCertificate: world.pki.ca.certificate, caKey: world.pki.ca.key, reference: world.pki.reference,
            secretFile: world.pki.secretFile)
        defer { ca.stop() }
        let sent = try world.send([
            "server=\(ca.url)", "trust-anchor=\(world.pki.ca.certificate)", "reference=\(world.pki.reference)",
            "secret-file=\(world.pki.secretFile)", "subject=O=Example CMP Test,CN=Alice {tag}",
        ])
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        #expect(ca.certified == 4 && ca.confirmed == 4, "\(ca.certified) issued, \(ca.confirmed) confirmed")
        var keys: Set<String> = []
        for (tag, usage) in [
            ("authentication", "Digital Signature"), ("signing", "Non Repudiation"), ("encryption", "Key Agreement"),
            ("escrow", "Key Agreement"),
        ] {
            let file = try world.tools.sandbox.write(
                "\(tag).pem", try world.tools.check("dcclient", ["show", tag, "--pem"]).stdoutText)
            let verified = try run(OpenSSLFixtures.openssl, ["verify", "-CAfile", world.pki.ca.certificate, file])
            #expect(verified.status == 0, "\(tag): \(verified.stderrText)")
            let text = try run(
                OpenSSLFixtures.openssl, ["x509", "-in", file, "-noout", "-subject", "-ext", "keyUsage"]
            ).stdoutText
            #expect(text.contains(usage) && text.contains("CN = Alice \(tag)"), "\(tag): \(text)")
            keys.insert(try run(OpenSSLFixtures.openssl, ["x509", "-in", file, "-noout", "-pubkey"]).stdoutText)
        }
        #expect(keys.count == 4, "the four tags share a key")
    }

    @Test(
        "send --pkcs11 --derive --provider cmp: the card proves possession, each new key goes to the CA over CMP as raVerified and the client installs them; terminate --provider cmp revokes each one (rr), and run again it completes though the CA answers certRevoked"
    )
    func deriveThroughCMP() throws {
        let world = try World("cmp-derive", extra: ["SOFTHSM2_CONF": SoftHSM.shared.configuration])
        defer { world.tools.sandbox.remove() }
        // OpenSSL's generic CMP server as the CA, as the mock cannot certify keys made on the way.
        let ca = try CMPTestServer(
            caCertificate: world.pki.ca.certificate, caKey: world.pki.ca.key, reference: world.pki.reference,
            secretFile: world.pki.secretFile, acceptRAVerified: true)
        defer { ca.stop() }
        let pin = try world.tools.sandbox.write("pin", SoftHSM.userPIN + "\n")
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.tools.sandbox.directory)
        let cmp = [
            "server=\(ca.url)", "trust-anchor=\(world.pki.ca.certificate)", "reference=\(world.pki.reference)",
            "secret-file=\(world.pki.secretFile)", "record=record",
        ].flatMap { ["--option", $0] }
        let sent = try world.tools.run(
            "dcprovision",
            Self.send.filter { $0 != "--name" && $0 != "CMP credential" } + [
                "--pkcs11", "pkcs11:token=PIV%20Card", "--layout", "piv", "--derive", "--provider", "cmp",
                "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", crl, "--pkcs11-module",
                "softhsm2", "--pin-file", pin,
            ] + cmp)
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        #expect(ca.certified == 3 && ca.confirmed == 3, "\(ca.certified) issued, \(ca.confirmed) confirmed")
        let listed = try world.tools.check("dcclient", ["list"]).stdoutText
        for tag in ["authentication", "signing", "encryption"] {
            #expect(listed.contains("\(tag) ") && listed.contains("CN=Alice authentication,"), "\(listed)")
            let file = try world.tools.sandbox.write(
                "\(tag).pem", try world.tools.check("dcclient", ["show", tag, "--pem"]).stdoutText)
            let verified = try run(OpenSSLFixtures.openssl, ["verify", "-CAfile", world.pki.ca.certificate, file])
            #expect(verified.status == 0, "\(tag): \(verified.stderrText)")
        }
        #expect(!listed.contains("escrow"), "\(listed)")
        // The record keeps the three by card; terminate revokes each over CMP.
        let cards = try FileManager.default.contentsOfDirectory(atPath: world.tools.sandbox.file("record"))
        let card = try #require(cards.first)
        #expect(cards.count == 1)
        let kept = try FileManager.default.contentsOfDirectory(atPath: world.tools.sandbox.file("record/\(card)"))
        #expect(kept.count == 3, "\(kept)")
        let terminated = try world.tools.run(
            "dcprovision", ["terminate", "--card-serial", card, "--provider", "cmp"] + cmp)
        #expect(terminated.status == 0, "\(terminated.stdoutText)\(terminated.stderrText)")
        #expect(ca.revoked == 3, "\(ca.revoked) revoked")
        // Run again (as after a terminate that stopped half-way): the CA refuses each revocation
        // as certRevoked, which counts as done.
        let again = try world.tools.run(
            "dcprovision", ["terminate", "--card-serial", card, "--provider", "cmp"] + cmp)
        #expect(again.status == 0, "\(again.stdoutText)\(again.stderrText)")
        #expect(ca.revoked == 3, "\(ca.revoked) revoked")
    }

    @Test(
        "send --provider cmp --option server=https://…: through nginx terminating TLS in front of the mock CA, the server's TLS certificate checked against tls-trust and the host; attack: a TLS certificate from another CA, for another host, or not in the system's CAs exits 77, one line, nothing sent"
    )
    func sendOverHTTPS() async throws {
        let world = try World("cmp-https")
        defer { world.tools.sandbox.remove() }
        let server = try CMPMockServer.start(world.pki, answering: world.leaf.certificate)
        defer { server.stop() }
        let front = try await CMPTLSFront(in: world.tools.sandbox, pki: world.pki, upstream: server)
        defer { front.stop() }
        func refused(_ options: [String], _ words: String, _ what: String) throws {
            let result = try world.send(options)
            #expect(result.status == 77, "\(what): \(result.status) \(result.stdoutText)\(result.stderrText)")
            #expect(result.stderrText.split(separator: "\n").count == 1, "\(what): \(result.stderrText)")
            #expect(
                result.stderrText.contains("TLS certificate is not trusted: \(words)"), "\(what): \(result.stderrText)")
            #expect(world.spool.isEmpty, "\(what): something was spooled")
        }
        // The CMP CA did not issue nginx's certificate; the system's CAs know neither.
        try refused(
            world.options(front.url, more: ["tls-trust=\(world.pki.ca.certificate)"]),
            "unable to get local issuer certificate", "another CA")
        try refused(world.options(front.url), "unable to get local issuer certificate", "system CAs")
        try refused(
            world.options(front.wrongHostURL, more: ["tls-trust=\(front.tlsCA.certificate)"]), "IP address mismatch",
            "another host")
        try refused(
            world.options(front.wrongLocalhostURL, more: ["tls-trust=\(front.tlsCA.certificate)"]), "hostname mismatch",
            "another host, by name")
        #expect(!front.accessLogText.contains("/pkix/"), "a refused server was sent a request: \(front.accessLogText)")
        #expect(!server.logText.contains("POST /pkix/"), "\(server.logText)")
        #expect(try world.tools.run("dcclient", ["show", "authentication"]).status != 0, "a credential was installed")

        // By name: the certificate is checked for the name, which the handshake carries (SNI).
        let sent = try world.send(world.options(front.localhostURL, more: ["tls-trust=\(front.tlsCA.certificate)"]))
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        let installed = try world.tools.check("dcclient", ["show", "authentication", "--pem"]).stdoutText
        let file = try world.tools.sandbox.write("installed.pem", installed)
        #expect(try world.fingerprint(file) == (try world.fingerprint(world.leaf.certificate)))
        // Both messages (ir, certConf) went through nginx's TLS port.
        #expect(
            front.accessLogText.components(separatedBy: "200 /pkix/ localhost").count - 1 == 2, "\(front.accessLogText)"
        )
    }

    @Test(
        "send --provider cmp to an https server through a proxy (https_proxy, tinyproxy): the tunnel is asked for with CONNECT and TLS runs inside it, checked as without one; a proxy that is down is exit 69, one line, nothing sent"
    )
    func sendThroughAProxy() async throws {
        let proxyPort = try freeLocalPort()
        let world = try World("cmp-proxy", extra: ["https_proxy": "http://127.0.0.1:\(proxyPort)"])
        defer { world.tools.sandbox.remove() }
        let server = try CMPMockServer.start(world.pki, answering: world.leaf.certificate)
        defer { server.stop() }
        let front = try await CMPTLSFront(in: world.tools.sandbox, pki: world.pki, upstream: server)
        defer { front.stop() }
        let options = world.options(front.url, more: ["tls-trust=\(front.tlsCA.certificate)"])

        // No proxy listens yet: nothing reaches the server.
        let down = try world.send(options)
        #expect(down.status == 69, "\(down.stdoutText)\(down.stderrText)")
        #expect(down.stderrText.split(separator: "\n").count == 1, "\(down.stderrText)")
        #expect(down.stderrText.contains("no answer from the CA's CMP server"), "\(down.stderrText)")
        #expect(world.spool.isEmpty && !front.accessLogText.contains("/pkix/"))

        let proxy = try TinyProxy(in: world.tools.sandbox, port: proxyPort)
        defer { proxy.stop() }
        let sent = try world.send(options)
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        #expect(try world.tools.run("dcclient", ["show", "authentication"]).status == 0)
        // Both messages went through the tunnel, to nginx's TLS port.
        #expect(proxy.logText.contains("CONNECT 127.0.0.1:\(front.port)"), "\(proxy.logText)")
        #expect(front.accessLogText.components(separatedBy: "200 /pkix/").count - 1 == 2, "\(front.accessLogText)")
    }

    @Test(
        "terminate --provider cmp: a revocation request (rr) per certificate the cmp provider's record kept for the card, answered by the mock CA; a server that is down is exit 69, a card with no record exit 66"
    )
    func terminateRevokesOverCMP() throws {
        let world = try World("cmp-terminate")
        defer { world.tools.sandbox.remove() }
        // The record as certify keeps it after a derivation. Written here by hand: the mock CA
        // answers with one fixed certificate, so it cannot certify the fresh keys a derivation makes.
        let card = "0A1B2C"
        let serial = try run(OpenSSLFixtures.openssl, ["x509", "-in", world.leaf.certificate, "-noout", "-serial"])
            .stdoutText.split(separator: "=")[1].trimmingCharacters(in: .whitespacesAndNewlines)
        try FileManager.default.createDirectory(
            atPath: world.tools.sandbox.file("record/\(card)"), withIntermediateDirectories: true)
        try world.tools.sandbox.write("record/\(card)/\(serial).pem", try readText(world.leaf.certificate))
        let server = try CMPMockServer.start(world.pki, answering: world.leaf.certificate)
        defer { server.stop() }
        func terminate(_ url: String, card: String, more: [String] = []) throws -> ProcessResult {
            let options =
                [
                    "server=\(url)", "trust-anchor=\(world.pki.ca.certificate)", "reference=\(world.pki.reference)",
                    "secret-file=\(world.pki.secretFile)", "record=record",
                ] + more
            return try world.tools.run(
                "dcprovision",
                ["terminate", "--card-serial", card, "--provider", "cmp"] + options.flatMap { ["--option", $0] })
        }
        let down = try terminate(
            "http://127.0.0.1:\(try freeLocalPort())/pkix/", card: card, more: ["message-timeout=2"])
        #expect(down.status == 69, "\(down.stdoutText)\(down.stderrText)")
        #expect(down.stderrText.contains("no answer from the CA's CMP server"), "\(down.stderrText)")
        let none = try terminate(server.url, card: "FFFF")
        #expect(none.status == 66, "\(none.stderrText)")
        let revoked = try terminate(server.url, card: card)
        #expect(revoked.status == 0, "\(revoked.stdoutText)\(revoked.stderrText)")
        #expect(revoked.stdoutText.contains("card \(card): 1 certificate(s) revoked by the CA over CMP"))
        #expect(server.logText.contains("POST /pkix/"), "\(server.logText)")
    }
}
