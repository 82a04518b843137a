import Foundation
import TestSupport
import Testing

/// `dcprovision terminate`: a derived credential dies with its card. A real card stand-in
/// (SoftHSM), a real client reached through its scheme handler, and OpenSSL judging the CRL.
@Suite(
    "Terminating a card revokes what was derived from it and retires its clients", .ownThreads, .softHSM,
    .timeLimit(.minutes(5)))
struct TerminateTests {
    @Test(
        "terminate --card-serial: every derived certificate revoked (openssl verify -crl_check refuses them), the client that holds them retired; again changes nothing; an unknown card is exit 66"
    )
    func terminate() throws {
        let sandbox = try CardToClientTests.Sandbox()
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: sandbox.directory)
        try sandbox.check(
            try sandbox.send([
                "--pkcs11", "pkcs11:token=PIV%20Card", "--layout", "piv", "--derive", "--testca",
                sandbox.directory.file("ca"), "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl",
                crl,
            ]))
        // Another credential of the same CA, not derived from the card: it stays valid.
        try sandbox.check(
            try sandbox.run(
                "dcprovision",
                ["testca", "issue", sandbox.directory.file("ca"), "--out-dir", "plain", "--format", "pem"],
                in: sandbox.directory.path))
        let exported = try sandbox.run(
            "dcclient", ["show", "authentication", "--format", "pem"])
        try sandbox.check(exported)
        let derived = try sandbox.directory.write("derived.pem", exported.stdoutText)
        let card = try OpenSSLFixtures.openssl([
            "x509", "-in", OpenSSLFixtures.shared.authentication.certificate, "-noout", "-serial",
        ])
        let cardSerial = String(String(decoding: card, as: UTF8.self).split(separator: "=")[1])
            .trimmingCharacters(in: .whitespacesAndNewlines)

        let terminated = try sandbox.run(
            "dcprovision", ["terminate", "--card-serial", cardSerial.lowercased(), "--testca", "ca"],
            in: sandbox.directory.path)
        try sandbox.check(terminated)
        #expect(
            terminated.stdoutText.contains("1 derived credential(s), 3 certificate(s) revoked (3 now)"),
            "\(terminated.stdoutText)")
        #expect(terminated.stdoutText.contains("retired"), "\(terminated.stdoutText)")
        // The client is retired: it reads nothing, and says so.
        let list = try sandbox.run("dcclient", ["list"])
        #expect(list.status == 77 || list.status == 66, "\(list.stdoutText)\(list.stderrText)")
        let status = try sandbox.run("dcclient", ["status"])
        #expect(status.stdoutText.contains("terminated"), "\(status.stdoutText)")

        // OpenSSL, given the CA's new CRL, refuses the derived certificate and passes the other.
        try sandbox.check(
            try sandbox.run(
                "dcprovision", ["testca", "crl", "ca", "--out", "ca.crl"], in: sandbox.directory.path))
        let chain =
            try readText(sandbox.directory.file("ca/root.pem")) + readText(sandbox.directory.file("ca/issuing.pem"))
        let chainFile = try sandbox.directory.write("chain.pem", chain)
        for (certificate, good) in [(derived, false), (sandbox.directory.file("plain/authentication.pem"), true)] {
            let verified = try run(
                OpenSSLFixtures.openssl,
                [
                    "verify", "-crl_check", "-CAfile", chainFile, "-CRLfile", sandbox.directory.file("ca.crl"),
                    certificate,
                ])
            #expect((verified.status == 0) == good, "\(certificate): \(verified.stdoutText)\(verified.stderrText)")
        }
        let text = try run(
            OpenSSLFixtures.openssl, ["crl", "-in", sandbox.directory.file("ca.crl"), "-noout", "-text"])
        #expect(text.stdoutText.contains("Cessation Of Operation"), "\(text.stdoutText)")

        let again = try sandbox.run(
            "dcprovision", ["terminate", "--card-serial", cardSerial, "--testca", "ca"], in: sandbox.directory.path)
        try sandbox.check(again)
        #expect(
            again.stdoutText.contains("(0 now)") && again.stdoutText.contains("no client holds them"),
            "\(again.stdoutText)")
        let unknown = try sandbox.run(
            "dcprovision", ["terminate", "--card-serial", "0BADC0DE", "--testca", "ca"], in: sandbox.directory.path)
        #expect(unknown.status == 66, "\(unknown.stderrText)")
    }
}
