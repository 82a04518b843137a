import Foundation
import TestSupport
import Testing

/// The operator's whole path with a SoftHSM token standing in for the card: `tokens`, then `send`
/// to a real managed client through real scheme handlers — once exporting the keys, once deriving
/// new ones (SP 800-157) — with the PIN in a file and in no output.
@Suite(
    "From dcprovision tokens to a credential installed in the managed client", .ownThreads, .softHSM,
    .timeLimit(.minutes(5)))
struct CardToClientTests {
    final class Sandbox {
        let directory: TemporaryDirectory
        let environment: [String: String]
        let pin: String

        init() throws {
            let sandbox = try TestSupport.Sandbox(
                "card-to-client", extra: ["SOFTHSM2_CONF": SoftHSM.shared.configuration])
            directory = sandbox.directory
            environment = sandbox.environment
            pin = try directory.write("pin", SoftHSM.userPIN + "\n")
            let passphrase = try directory.write("client-passphrase", "client passphrase\n")
            try check(run("dcprovision", ["testca", "init", directory.file("ca")]))
            try check(
                run(
                    "dcclient",
                    [
                        "init", "--scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                        "--passphrase-file", passphrase,
                    ]))
            try check(run("dcclient", ["register"]))
            try check(
                run(
                    "dcprovision",
                    [
                        "register", "--scheme", "org.example.dcprovision", "--brand", "Card Provider", "--testca",
                        directory.file("ca"),
                    ]))
            // Paired, the client is managed: authorized by the policy that goes out first.
            try check(run("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"]))
        }

        deinit { directory.remove() }

        func run(_ tool: String, _ arguments: [String], in directory: String? = nil) throws -> ProcessResult {
            try TestSupport.run(
                Binaries.directory + "/" + tool, arguments, environment: environment, currentDirectory: directory,
                timeout: 120)
        }

        func check(_ result: ProcessResult, _ location: SourceLocation = #_sourceLocation) throws {
            #expect(result.status == 0, "\(result.stdoutText)\(result.stderrText)", sourceLocation: location)
        }

        func send(_ source: [String]) throws -> ProcessResult {
            try run(
                "dcprovision",
                ["send"] + source + [
                    "--pkcs11-module", "softhsm2", "--pin-file", pin, "--brand", "Card Provider",
                    "--callback-scheme", "org.example.dcprovision", "--client-scheme", "org.example.dcclient",
                ])
        }
    }

    @Test(
        "tokens → send --derive: the PIV card's subject, new keys, installed; then the export path from an exportable card"
    )
    func cardToClient() throws {
        let sandbox = try Sandbox()
        let tokens = try sandbox.run("dcprovision", ["tokens", "--module", "softhsm2", "--json"])
        try sandbox.check(tokens)
        let listed = try jsonPayload(tokens.stdout, "tokens") as? [[String: Any]] ?? []
        let card = try #require(listed.first { $0["label"] as? String == "PIV Card" }?["uri"] as? String)

        // The card's certificate is checked against its CA's CRL (made by openssl ca -gencrl).
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: sandbox.directory)
        let derived = try sandbox.send([
            "--pkcs11", card, "--layout", "piv", "--derive", "--testca", sandbox.directory.file("ca"),
            "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", crl,
        ])
        try sandbox.check(derived)
        let afterDerive = try sandbox.run("dcclient", ["list"])
        try sandbox.check(afterDerive)
        #expect(afterDerive.stdoutText.contains("Alice authentication (derived)"), "\(afterDerive.stdoutText)")
        // The card's subject on every new certificate; no escrow (new keys cannot open old mail).
        for line in [
            "authentication  EC P-256  CN=Alice authentication,", "signing         EC P-384  CN=Alice authentication,",
            "encryption      EC P-256  CN=Alice authentication,",
        ] {
            #expect(afterDerive.stdoutText.contains(line), "\(afterDerive.stdoutText)")
        }
        #expect(!afterDerive.stdoutText.contains("escrow"))

        let exported = try sandbox.send([
            "--pkcs11", "pkcs11:token=Export%20Card", "--layout", "piv", "--name", "Exported from the card",
        ])
        try sandbox.check(exported)
        let afterExport = try sandbox.run("dcclient", ["list"])
        #expect(afterExport.stdoutText.contains("Exported from the card"), "\(afterExport.stdoutText)")
        for line in [
            "signing         EC P-384  CN=Alice signing,", "encryption      RSA 2048  CN=Alice encryption,",
            // The card's retired escrow pair, and the encryption pair of the derived credential
            // this export replaced (a renewal keeps it, issue 15).
            "escrow          EC P-256  CN=Alice escrow-old1,O=Derived Credentials Test  (+2 retired)",
        ] {
            #expect(afterExport.stdoutText.contains(line), "\(afterExport.stdoutText)")
        }

        // The client asks; the provider, registered with the card as its source (the PIN file's
        // path kept, not the PIN), derives from the card in its unattended handler. The paths are
        // relative to where register ran, not to where the handler is started.
        let registered = try sandbox.run(
            "dcprovision",
            [
                "register", "--scheme", "org.example.dcprovision", "--brand", "Card Provider", "--pkcs11", card,
                "--layout", "piv", "--derive", "--testca", "ca", "--pkcs11-module", "softhsm2", "--pin-file", "pin",
                "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", "card.crl",
            ], in: sandbox.directory.path)
        try sandbox.check(registered)
        let config = try readText(sandbox.directory.file("home/.config/dcprovision/config.json"))
        #expect(!config.contains(SoftHSM.userPIN))
        // A card source answers a client's request only if the operator allowed that client to
        // make it log in unattended.
        try sandbox.check(try sandbox.run("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"]))
        let notAllowed = try sandbox.run("dcclient", ["request"])
        #expect(notAllowed.status != 0)
        #expect(notAllowed.stderrText.contains("may not use it unattended"), "\(notAllowed.stderrText)")
        try sandbox.check(
            try sandbox.run(
                "dcprovision", ["pair", "--client-scheme", "org.example.dcclient", "--allow-card-requests"]))
        let requested = try sandbox.run("dcclient", ["request"])
        try sandbox.check(requested)
        let afterRequest = try sandbox.run("dcclient", ["list"])
        #expect(afterRequest.stdoutText.contains("Alice authentication (derived)"), "\(afterRequest.stdoutText)")
        let refused = try sandbox.run(
            "dcprovision",
            [
                "register", "--scheme", "org.example.dcprovision", "--brand", "Card Provider", "--pkcs11", card,
                "--layout", "piv",
                "--pin-env", "CARD_PIN",
            ])
        #expect(refused.status == 64)

        for result in [tokens, derived, afterDerive, exported, afterExport, registered, requested, afterRequest] {
            #expect(!(result.stdoutText + result.stderrText).contains(SoftHSM.userPIN))
        }
    }
}
