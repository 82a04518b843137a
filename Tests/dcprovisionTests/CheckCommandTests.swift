import CredentialCoding
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// `dcclient check`: the credential's lifetime, the renewal it asks for when due (through the real
/// scheme handlers), revocation through the client's trust anchors, the exit status at use; and the
/// systemd user units that run it daily, judged by `systemd-analyze verify`.
@Suite("dcclient check and its daily timer", .ownThreads, .timeLimit(.minutes(5)))
struct CheckCommandTests {
    /// A client and a provider (answering with the test CA `ca`) set up through the tools.
    struct World {
        let sandbox: Sandbox

        init() throws {
            sandbox = try Sandbox("dcclient-check")
            try sandbox.runTool("dcprovision", ["testca", "init", "ca"])
            let chain = try readText(sandbox.file("ca/root.pem")) + readText(sandbox.file("ca/issuing.pem"))
            try sandbox.write("chain.pem", chain)
            let passphrase = try sandbox.write("client-passphrase", "client passphrase\n")
            try sandbox.runTool(
                "dcclient",
                [
                    "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                    "--passphrase-file", passphrase, "--trust-anchor", "chain.pem",
                ])
            try sandbox.runTool("dcclient", ["register"])
            try sandbox.runTool(
                "dcprovision",
                [
                    "register", "--provider-scheme", "org.example.dcprovision", "--brand", "Renewing Provider",
                    "--testca", "ca",
                ])
            try sandbox.runTool("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        }

        static let send = [
            "send", "--brand", "Renewing Provider", "--provider-scheme", "org.example.dcprovision", "--client-scheme",
            "org.example.dcclient",
        ]

        /// `dcclient check --json`'s payload.
        func check(_ extra: [String] = [], expect status: Int32 = 0) throws -> [String: Any] {
            let result = try sandbox.runTool("dcclient", ["check", "--json"] + extra, expect: status)
            return try #require(try jsonPayload(result.stdout, "check") as? [String: Any])
        }

        func states(_ report: [String: Any]) -> [String] {
            ((report["lifetime"] as? [String: Any])?["certificates"] as? [[String: Any]] ?? []).map {
                "\($0["tag"] ?? "")\(($0["historyIndex"] as? Int).map { " \($0)" } ?? ""): \($0["state"] ?? "")"
            }
        }
    }

    @Test(
        "check --renew-within: a credential ending in 3 days is renewed through the provider's handler (the authenticated new); a window it is not within asks for nothing; --json reports every certificate"
    )
    func renewsWhenDue() throws {
        let world = try World()
        defer { world.sandbox.remove() }
        try world.sandbox.runTool("dcprovision", World.send + ["--testca", "ca", "--option", "validity-days=3"])
        let before = try world.check()
        // Within the report's default window of 30 days: due, but only --renew-within asks.
        #expect(
            world.states(before) == [
                "authentication: expires-soon", "signing: expires-soon", "encryption: expires-soon",
                "escrow: expires-soon",
            ], "\(before)")
        #expect(before["usable"] as? Bool == true && before["renewalDue"] as? Bool == true)
        #expect(before["renewalRequested"] as? Bool == false)
        let notYet = try world.check(["--renew-within", "2"])
        #expect(notYet["renewalDue"] as? Bool == false && notYet["renewalRequested"] as? Bool == false)
        let serial = try world.sandbox.runTool("dcclient", ["list"]).stdoutText

        let renewed = try world.sandbox.runTool("dcclient", ["check", "--renew-within", "30"])
        #expect(renewed.stdoutText.contains("renewal due: requesting"), "\(renewed.stdoutText)")
        #expect(renewed.stdoutText.contains("renewed: "), "\(renewed.stdoutText)")
        #expect(try world.sandbox.runTool("dcclient", ["list"]).stdoutText != serial)
        // The new credential is the provider's usual one (365 days): nothing is due any more.
        let after = try world.check(["--renew-within", "30"])
        #expect(after["renewalDue"] as? Bool == false, "\(after)")
        #expect(world.states(after).prefix(4).allSatisfy { $0.hasSuffix(": valid") }, "\(after)")
    }

    @Test(
        "At use: once the authentication certificate has ended, check is exit 80 and show --pem refuses, show and decrypt still work; check --renew-within then renews it"
    )
    func expiredAtUse() throws {
        let world = try World()
        defer { world.sandbox.remove() }
        // A credential whose certificates end six seconds from now (issued "a year ago").
        let ca = try TestCA(directory: world.sandbox.file("ca"))
        let provided = try ca.issue(TestCAIssueRequest(now: Date().addingTimeInterval(-365 * 86400 + 6)))
        var sources: [String] = []
        for entry in provided.entries {
            let certificate = try world.sandbox.write(
                "\(entry.tag).pem", String(decoding: PEM.certificate(entry.certificate), as: UTF8.self))
            let key = try world.sandbox.write(
                "\(entry.tag).key",
                PEM.privateKey(entry.privateKey).withUnsafeBytes { String(decoding: $0, as: UTF8.self) })
            sources += ["--pem", "\(entry.tag)=\(certificate),\(key)"]
        }
        let started = Date()
        try world.sandbox.runTool("dcprovision", World.send + sources)
        try world.sandbox.write("note.txt", "for the short-lived credential\n")
        try world.sandbox.write(
            "recipient.pem", String(decoding: PEM.certificate(provided.entries[2].certificate), as: UTF8.self))
        #expect(
            try run(
                OpenSSLFixtures.openssl,
                [
                    "cms", "-encrypt", "-aes256", "-binary", "-in", world.sandbox.file("note.txt"), "-out",
                    world.sandbox.file("note.cms"), "-outform", "DER", "-recip", world.sandbox.file("recipient.pem"),
                ]
            ).status == 0)
        Thread.sleep(until: started.addingTimeInterval(8))

        let expired = try world.check(expect: 80)
        #expect(expired["usable"] as? Bool == false, "\(expired)")
        #expect(world.states(expired).prefix(2) == ["authentication: expired", "signing: expired"], "\(expired)")
        let refused = try world.sandbox.runTool("dcclient", ["show", "authentication", "--format", "pem"], expect: 80)
        #expect(refused.stderrText.contains("the authentication certificate expired"), "\(refused.stderrText)")
        #expect(refused.stdout.isEmpty)
        try world.sandbox.runTool("dcclient", ["show", "authentication"])
        let opened = try world.sandbox.runTool("dcclient", ["decrypt", "note.cms"])
        #expect(opened.stdoutText == "for the short-lived credential\n")

        try world.sandbox.runTool("dcclient", ["check", "--renew-within", "30"])
        #expect(try world.check()["usable"] as? Bool == true)
    }

    @Test(
        "check --crl: a revoked certificate of the installed credential is exit 79, a good one is reported good (issuers from the client's trust anchors); a stale CRL is exit 75 unless allowed"
    )
    func revocation() throws {
        let world = try World()
        defer { world.sandbox.remove() }
        try world.sandbox.runTool("dcprovision", World.send + ["--testca", "ca"])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "before.crl"])
        let good = try world.check(["--crl", "before.crl"])
        let statuses = (good["revocation"] as? [[String: Any]] ?? []).map { $0["status"] as? String }
        #expect(statuses == ["good", "good", "good", "good"], "\(good)")

        let pem = try world.sandbox.runTool("dcclient", ["show", "signing", "--format", "pem"]).stdoutText
        try world.sandbox.write("signing.pem", pem)
        let serial = try run(
            OpenSSLFixtures.openssl, ["x509", "-in", world.sandbox.file("signing.pem"), "-noout", "-serial"]
        ).stdoutText.split(separator: "=")[1].trimmingCharacters(in: .whitespacesAndNewlines)
        try world.sandbox.runTool(
            "dcprovision", ["testca", "revoke", "ca", "--serial", serial, "--reason", "keyCompromise"])
        try world.sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "after.crl"])
        let revoked = try world.sandbox.runTool("dcclient", ["check", "--crl", "after.crl"], expect: 79)
        #expect(revoked.stderrText.contains("the signing certificate is revoked"), "\(revoked.stderrText)")

        let stale = try TestCA(directory: world.sandbox.file("ca")).makeCRL(
            now: Date().addingTimeInterval(-10 * 86400), validity: 86400)
        try Data(stale.pem).write(to: URL(fileURLWithPath: world.sandbox.file("stale.crl")))
        try world.sandbox.runTool("dcclient", ["check", "--crl", "stale.crl"], expect: 75)
        try world.sandbox.runTool("dcclient", ["check", "--crl", "stale.crl", "--allow-unchecked-revocation"])
    }

    @Test(
        "The dcclient-check systemd user units pass systemd-analyze verify once @bindir@ names a real dcclient; a unit with a mistake does not"
    )
    func systemdUnits() throws {
        let sandbox = try Sandbox("systemd-units")
        defer { sandbox.remove() }
        try FileManager.default.createDirectory(atPath: sandbox.file("run"), withIntermediateDirectories: true)
        chmod(sandbox.file("run"), 0o700)
        let template = try readText(Repository.root + "/packaging/systemd/dcclient-check.service.in")
        #expect(template.contains("ExecStart=@bindir@/dcclient check --renew-within 30"))
        let timer = try readText(Repository.root + "/packaging/systemd/dcclient-check.timer")
        #expect(timer.contains("OnCalendar=daily") && timer.contains("Persistent=true"))
        func verify(_ service: String, _ timer: String) throws -> ProcessResult {
            try sandbox.write("dcclient-check.service", service)
            try sandbox.write("dcclient-check.timer", timer)
            return try sandbox.run(
                "/usr/bin/systemd-analyze",
                ["verify", "--user", "--man=no", "./dcclient-check.service", "./dcclient-check.timer"],
                environment: ["XDG_RUNTIME_DIR": sandbox.file("run")], timeout: 60)
        }
        let filled = template.replacingOccurrences(of: "@bindir@", with: Binaries.directory)
        let accepted = try verify(filled, timer)
        #expect(accepted.status == 0, "\(accepted.stdoutText)\(accepted.stderrText)")
        let missing = try verify(template.replacingOccurrences(of: "@bindir@", with: "/nonexistent"), timer)
        #expect(missing.status != 0)
        let misspelt = try verify(filled, timer.replacingOccurrences(of: "OnCalendar=daily", with: "OnCalendar=dayly"))
        #expect(misspelt.status != 0, "\(misspelt.stderrText)")
    }
}
