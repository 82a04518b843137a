import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import PKCS11Provider
import ProviderService
import SystemSupport

/// The embedded default: the whole round trip in a throw-away sandbox, through real processes.
struct Demo: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the whole round trip in a temporary sandbox and print each step.",
        discussion: """
            A test CA issues a four-tag credential; the reference client (dcclient) and this provider \
            register their URL schemes; the client requests, the provider issues, seals and sends, \
            the client opens, validates, installs and calls back — each a real process launched \
            through the registered x-scheme-handlers. Then the managed app's life: its secure files, \
            the provider withdrawing and restoring its authorization, and retiring it. The sandbox (its own HOME and XDG \
            directories) is removed afterwards unless --keep.
            """)

    @Flag(help: "Keep the sandbox and print where it is.") var keep = false

    @OptionGroup(title: "A PIV card's steps (list, derive, send), on a card in a PC/SC reader")
    var card: DemoCardOptions

    @OptionGroup var output: OutputOptions

    /// A fresh private (0700) directory in memory for the sandbox's runtime directory: under
    /// `/dev/shm`, or under the caller's own runtime directory, whichever is a tmpfs; nil when
    /// neither is.
    static func runtimeDirectoryInMemory() -> String? {
        let parents = ["/dev/shm", ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"]].compactMap { $0 }
        for parent in parents where access(parent, W_OK | X_OK) == 0 && ExpiringSecret.isInMemory(parent) {
            var template = Array("\(parent)/dcprovision-demo-run-XXXXXX".utf8CString)
            if let made = mkdtemp(&template) { return String(cString: made) }
        }
        return nil
    }

    func run() async throws {
        // Before anything is made: a card demo with no card says what is missing.
        if card.card { try card.requireCard() }
        let started = ContinuousClock.now
        var template = Array("\(NSTemporaryDirectory())/dcprovision-demo-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw DCError(.cannotCreateOutput, "cannot create the sandbox") }
        let sandbox = String(cString: made)
        defer { if !keep { try? FileManager.default.removeItem(atPath: sandbox) } }
        // The runtime directory is in memory, as a login's is (systemd-logind's /run/user/UID is a
        // tmpfs): where the kernel keyring refuses the unlocked store key (no session keyring of
        // the process's own, as in CI or a container), the client writes it to no other place.
        let runtime = Self.runtimeDirectoryInMemory() ?? sandbox + "/run"
        // Removed even with --keep: it holds only the unlocked key, which must not outlive the demo.
        defer { if !runtime.hasPrefix(sandbox + "/") { try? FileManager.default.removeItem(atPath: runtime) } }
        let session = DemoSession(try DemoSandbox(path: sandbox, runtime: runtime), card: card.card ? card : nil)
        Console.say("Derived-credential round trip in a sandbox (\(sandbox))\n")
        try await session.run()
        let elapsed = ContinuousClock.now - started
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        Console.say(
            "Done in \(milliseconds) ms.\(keep ? " Sandbox kept: \(sandbox)" : " Sandbox removed.")"
        )
    }
}

/// The demo's steps, in the order they run and print: one method each. The session numbers the
/// steps as they print; a step that ends otherwise than it should ends the demo.
final class DemoSession {
    let box: DemoSandbox
    private var step = 0
    private let scheme = ["--client-scheme", "org.example.dcclient"]
    private var dcprovision: String { box.dcprovision }
    private var dcclient: String { box.dcclient }
    private var sandbox: String { box.path }

    /// The card steps' options, when the demo runs them.
    let card: DemoCardOptions?

    init(_ box: DemoSandbox, card: DemoCardOptions? = nil) {
        self.box = box
        self.card = card
    }

    /// Every step, in order. The verification service runs in the background from the step after
    /// the pairing on, and no failure leaves it running.
    func run() async throws {
        try await setUp()
        let server = try startVerificationService()
        do {
            try await deliver()
            try await readInstalled()
            if let card { try await deriveFromCard(card) }
            try await keepSecureFile()
            try await withdrawAuthorization()
            try await queueRenewal()
            try await readRenewed()
            let verifier = try await server.verifier(sandbox: sandbox)
            let check = DemoTokenCheck(verifier: verifier, token: try await askForAuthToken())
            try await verify(
                check, "The application server asks \(verifier.name) whether the token is genuine; \(verifier.answer)")
            try await retire()
            // The verifier notices the new revocation list within trustFileCheckInterval (no restart).
            try await verify(
                check,
                "The same token now: \(verifier.name) re-read the revocation list without a restart, and says Revoked",
                until: "Revoked")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    // MARK: The steps

    /// The provider's test CA and the client's store (in different directories, made at once),
    /// both scheme registrations, and the pairing.
    private func setUp() async throws {
        try await runTogetherAndReport([
            DemoStep("A test CA for the provider", dcprovision, ["testca", "init", sandbox + "/ca"]),
            DemoStep(
                "The managed client sets up its encrypted store and publishes its registration", dcclient,
                [
                    "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                    "--passphrase-file", box.passphrase,
                ]),
        ])
        try await run("The client registers as the handler of org.example.dcclient:", dcclient, ["register"])
        try await run(
            "The provider registers as the handler of org.example.dcprovision:", dcprovision,
            [
                "register", "--provider-scheme", "org.example.dcprovision", "--brand", "Example Provider",
                "--testca",
                sandbox + "/ca",
                "--option", "common-name=Demo User", "--option", "escrow-history=2",
            ])
        try await run(
            "The provider's operator pairs with the client: its signed requests are answered from now on",
            dcprovision, ["pair", "--client-scheme", "org.example.dcclient", "--user-id", "demo.user@example.com"])
    }

    /// Auth tokens: the app proves who it is to its application server, which asks dcverify. The
    /// provider made the files it reads when it registered; the service starts now and comes up
    /// while the next steps run.
    ///
    /// Without a dcverify next to dcprovision (`swift run dcprovision demo` on a fresh clone builds
    /// only dcclient with it, to stay quick), the application server's checks run in this process,
    /// with the verifier dcverify runs, reading the same files.
    private func startVerificationService() throws -> DemoVerificationService {
        step += 1
        // The files the sandbox's provider keeps for verification services.
        let provider = try CredentialService(
            brand: "Example Provider", callbackScheme: try URLScheme("org.example.dcprovision"),
            locations: XDGDirectories(environment: box.environment), open: { _, _ in })
        guard let dcverify = box.dcverify else {
            Console.say(
                "\(step). dcverify, the verification service application servers call, is not built here (swift build builds it);"
            )
            Console.say(
                "   the application server's checks below run in this process, with the verifier dcverify runs\n")
            return .inProcess(
                DemoInProcessVerifier(issuers: provider.issuersPath, revocations: provider.revocationsPath))
        }
        Console.say(
            "\(step). The verification service application servers call starts in the background, reading the provider's files"
        )
        let portFile = sandbox + "/dcverify.port"
        let arguments = [
            "serve", "--listen", "127.0.0.1:0", "--port-file", portFile, "--issuers", provider.issuersPath,
            "--revocations", provider.revocationsPath, "--log-level", "warning",
        ]
        Console.say("   $ dcverify \(arguments.map(box.shown).joined(separator: " ")) &\n")
        return .background(DemoBackgroundService.start(dcverify, arguments, in: box, step: step, portFile: portFile))
    }

    private func deliver() async throws {
        try await run(
            "The client asks for a credential; the provider issues, checks, seals and sends it; the client installs it and calls back",
            dcclient, ["request"])
    }

    /// Three reads of what was installed, at once; a correspondent seals a note to the
    /// encryption certificate read.
    private func readInstalled() async throws {
        let installed = [
            DemoStep("What the client holds (no key material is ever printed)", dcclient, ["list"]),
            DemoStep(
                "A correspondent encrypts a note to the client's encryption certificate (CMS, as in S/MIME mail)",
                dcclient, ["show", "encryption", "--format", "pem"]),
            DemoStep(
                "The app is managed: the provider's policy (sent when it paired) made it ready and authorized",
                dcclient, ["status"]),
        ]
        let read = try await runTogether(installed)
        try report(installed[0], read[0])
        try sealNote(installed[1], read[1])
        try report(installed[2], read[2])
    }

    /// The correspondent keeps the certificate and encrypts to it; the renewal below must keep
    /// the note readable.
    private func sealNote(_ command: DemoStep, _ outcome: ChildProcess.Outcome) throws {
        step += 1
        Console.say("\(step). \(command.title)")
        Console.say("   $ dcclient show encryption --format pem > $SANDBOX/encryption.pem")
        guard outcome.termination == .exited(0) else {
            throw DCError(.unknown, "demo step \(step) failed (\(outcome.termination))")
        }
        try Data(outcome.stdout).write(to: URL(fileURLWithPath: sandbox + "/encryption.pem"))
        let recipient = try CredentialReader().read(file: sandbox + "/encryption.pem").certificates[0]
        let note = "Meet at the usual place at noon."
        try Data(try Sealing.seal(SecretBytes(Array(note.utf8)), to: recipient))
            .write(to: URL(fileURLWithPath: sandbox + "/note.p7m"))
        Console.say("   (sealed \"\(note)\" to it: $SANDBOX/note.p7m)\n")
    }

    /// The card steps: the card in its reader, the token OpenSC shows, and a credential derived
    /// from it (the card signs the CA's challenge; its keys stay on it) sent to the client.
    private func deriveFromCard(_ card: DemoCardOptions) async throws {
        try await run(
            "The PIV card in its reader (PC/SC): the PIN's tries left, asked without using one", dcprovision,
            ["card", "status"])
        try await run(
            "The card through OpenSC's PIV driver, found by p11-kit", dcprovision,
            ["tokens", "--module", "opensc-pkcs11"])
        let revocation = card.crl.isEmpty ? ["--allow-unchecked-revocation"] : card.crl.flatMap { ["--crl", $0] }
        try await run(
            "A credential derived from the card: its authentication key signs the CA's challenge on the card; new keys, certified with the card's subject, sent",
            dcprovision,
            [
                "send", "--pkcs11", "pkcs11:manufacturer=piv_II", "--layout", "piv", "--derive", "--testca",
                sandbox + "/ca",
                "--card-trust-anchor", card.absolute(card.cardTrustAnchor ?? ""), "--pin-file",
                card.absolute(card.pinFile ?? ""), "--brand", "Example Provider", "--provider-scheme",
                "org.example.dcprovision", "--client-scheme", "org.example.dcclient", "--name",
                "Derived from the card",
            ] + revocation.map(card.absolute))
        try await run("What the client holds now: the derived credential", dcclient, ["list"])
    }

    /// The managed app's life after the delivery begins: a file in secure storage.
    private func keepSecureFile() async throws {
        let reportFile = sandbox + "/report.txt"
        try Data("Quarterly report: confidential\n".utf8).write(to: URL(fileURLWithPath: reportFile))
        try await run(
            "The app keeps a file in secure storage (encrypted under the store key)", dcclient,
            ["files", "put", "report.txt", reportFile])
        try await run("and reads it back", dcclient, ["files", "get", "report.txt"])
    }

    /// The provider withdraws the authorization, reads fail, and it authorizes again (queued).
    private func withdrawAuthorization() async throws {
        try await run(
            "The provider withdraws the app's authorization, with a message for the user; the app acknowledges and locks",
            dcprovision, ["unauthorize"] + scheme + ["--message", "Your device is out of compliance"])
        try await run(
            "Reads are refused now (notAuthorized), and the user sees why", dcclient,
            ["files", "get", "report.txt"], expectFailure: 77)
        try await run(
            "The provider authorizes the app again: queued, since the app is locked", dcprovision,
            ["authorize"] + scheme)
    }

    /// A renewal sent while the app is locked: refused, then queued, then delivered at unlock.
    private func queueRenewal() async throws {
        let send = [
            "send", "--testca", sandbox + "/ca", "--brand", "Example Provider", "--provider-scheme",
            "org.example.dcprovision", "--client-scheme", "org.example.dcclient",
        ]
        try await run(
            "A send to a locked client is refused before anything is sealed: serviceUnavailable (AppConnect -1002)",
            dcprovision, send, expectFailure: 69)
        try await run(
            "The same send with --queue: sealed and spooled now, queued until the client is available",
            dcprovision,
            send + ["--queue", "--option", "common-name=Demo User", "--name", "Demo credential, renewed"])
        try await run(
            "The user unlocks and the client announces availability: the newest policy arrives first, then the queued credential replaces the old one atomically",
            dcclient, ["unlock", "--passphrase-file", box.passphrase])
    }

    /// Four reads of the unlocked, renewed client and of the provider's record, at once.
    private func readRenewed() async throws {
        try await runTogetherAndReport([
            DemoStep("What the client holds now", dcclient, ["list"]),
            DemoStep(
                "The renewal kept the old encryption key in the key history: the note still opens", dcclient,
                ["decrypt", sandbox + "/note.p7m"]),
            DemoStep("The file reads again", dcclient, ["files", "get", "report.txt"]),
            DemoStep(
                "The provider's record: each client's policy and acknowledgements, and its sends", dcprovision,
                ["status"]),
        ])
    }

    /// The app's auth token for the application server's challenge (only its start is shown).
    private func askForAuthToken() async throws -> String {
        let challenge = try Digests.random(12).withUnsafeBytes { Digests.hex(Array($0)) }
        step += 1
        Console.say("\(step). The app asks its client for an auth token bound to the application server's challenge")
        Console.say("   $ dcclient token --challenge \(challenge) --server app.example.com")
        let asked = try await box.launch(
            DemoStep("", dcclient, ["token", "--challenge", challenge, "--server", "app.example.com"]))
        let token = String(decoding: asked.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard asked.termination == .exited(0), !token.isEmpty else {
            throw DCError(.unknown, "demo step \(step) failed (\(asked.termination))")
        }
        Console.say(
            "   \(token.prefix(24))… (\(token.utf8.count) characters: a delegation signed by the provider, then the token signed by the client)\n"
        )
        return token
    }

    /// The application server asks about the token; with `expected`, asks again for a second at
    /// most until the answer says it (dcverify looks at its files every trustFileCheckInterval).
    private func verify(_ check: DemoTokenCheck, _ title: String, until expected: String? = nil) async throws {
        step += 1
        Console.say("\(step). \(title)")
        Console.say("   \(check.verifier.request)")
        var answer = try check.ask()
        let deadline = ContinuousClock.now + .seconds(1)
        while let expected, !answer.contains(where: { $0.contains(expected) }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
            answer = try check.ask()
        }
        for line in answer { Console.say("   \(line.escapingControlCharacters)") }
        Console.say("")
    }

    /// The provider retires the app, and nothing is left to read.
    private func retire() async throws {
        try await run(
            "The provider retires the app: it acknowledges, then erases its keys, credential, files and pasteboard",
            dcprovision, ["retire"] + scheme + ["--message", "This device was retired"])
        try await run(
            "Nothing is left to read; a retired app is set up afresh before it is used again", dcclient,
            ["files", "get", "report.txt"], expectFailure: 77)
    }

    // MARK: Running and printing a step

    /// Runs one step and prints it.
    private func run(_ title: String, _ executable: String, _ arguments: [String], expectFailure: Int32? = nil)
        async throws
    {
        let command = DemoStep(title, executable, arguments, expectFailure: expectFailure)
        try report(command, try await box.launch(command))
    }

    /// Prints a step that ran: its number and title, its command line, its output, and whether
    /// it ended as it should.
    private func report(_ command: DemoStep, _ outcome: ChildProcess.Outcome) throws {
        step += 1
        Console.say("\(step). \(command.title)")
        let shown = command.arguments.map { argument -> String in
            let text = box.shown(argument)
            return text.contains(" ") ? "'\(text)'" : text
        }
        Console.say("   $ \((command.executable as NSString).lastPathComponent) \(shown.joined(separator: " "))")
        for line in String(decoding: outcome.stdout + outcome.stderr, as: UTF8.self).split(separator: "\n") {
            Console.say("   " + box.shown(String(line)))
        }
        guard outcome.termination == .exited(command.expectFailure ?? 0) else {
            throw DCError(.unknown, "demo step \(step) failed (\(outcome.termination))")
        }
        if let expectFailure = command.expectFailure {
            Console.say("   (exit status \(expectFailure), as expected)")
        }
        Console.say("")
    }

    /// Runs steps that change nothing another of them reads (each reads only, or writes only its
    /// own files) at the same time; returns their outcomes in the steps' order.
    private func runTogether(_ commands: [DemoStep]) async throws -> [ChildProcess.Outcome] {
        let box = self.box
        return try await withThrowingTaskGroup(of: (Int, ChildProcess.Outcome).self) { group in
            for (index, command) in commands.enumerated() { group.addTask { (index, try await box.launch(command)) } }
            var outcomes = [ChildProcess.Outcome?](repeating: nil, count: commands.count)
            for try await (index, outcome) in group { outcomes[index] = outcome }
            return outcomes.compactMap { $0 }
        }
    }

    /// Runs steps at the same time (see ``runTogether(_:)``) and prints them in order.
    private func runTogetherAndReport(_ commands: [DemoStep]) async throws {
        for (command, outcome) in zip(commands, try await runTogether(commands)) { try report(command, outcome) }
    }
}

/// One step of the demo: what it shows, and the command that shows it.
struct DemoStep: Sendable {
    let title: String
    let executable: String
    let arguments: [String]
    /// The exit status the step must end with when it shows a refusal; nil for success.
    let expectFailure: Int32?

    init(_ title: String, _ executable: String, _ arguments: [String], expectFailure: Int32? = nil) {
        self.title = title
        self.executable = executable
        self.arguments = arguments
        self.expectFailure = expectFailure
    }
}

/// `demo --card` and what the card steps need: the card's trust anchor, its PIN (a file) and,
/// optionally, its CA's CRL.
struct DemoCardOptions: ParsableArguments, Sendable {
    @Flag(
        help: "Also run the card steps (status, tokens, derive, send) on a PIV card in a PC/SC reader.")
    var card = false
    @Option(
        help: ArgumentHelp("With --card: CA certificates the card's certificate must chain to.", valueName: "file"))
    var cardTrustAnchor: String?
    @Option(help: ArgumentHelp("With --card: the card's PIN, from the first line of FILE.", valueName: "file"))
    var pinFile: String?
    @Option(
        help: ArgumentHelp(
            "With --card: a CRL of the card's issuer (repeatable; without one, revocation is not checked).",
            valueName: "file"))
    var crl: [String] = []

    func validate() throws {
        if card && (cardTrustAnchor == nil || pinFile == nil) {
            throw ValidationError("--card needs --card-trust-anchor FILE and --pin-file FILE")
        }
        if !card && (cardTrustAnchor != nil || pinFile != nil || !crl.isEmpty) {
            throw ValidationError("--card-trust-anchor, --pin-file and --crl go with --card")
        }
    }

    /// A path as the demo's steps see it (they run in the sandbox, from anywhere).
    func absolute(_ path: String) -> String {
        path.hasPrefix("/") || path.hasPrefix("-") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Fails, saying what is missing, unless pcscd runs and a reader holds a PIV card.
    func requireCard() throws {
        let readers: [String]
        let cards: [PIVCard]
        do {
            (readers, cards) = try PIVCard.inReaders()
        } catch let error as DCError {
            throw DCError(
                .noCard, "demo --card needs pcscd and a PIV card: \(error.message)", remedy: .startVirtualCard)
        }
        guard !readers.isEmpty else {
            throw DCError(.noCard, "demo --card needs a PIV card: pcscd sees no reader", remedy: .startVirtualCard)
        }
        guard !cards.isEmpty else {
            throw DCError(
                .noCard, "demo --card needs a PIV card: none in the \(readers.count) reader(s) pcscd sees",
                remedy: .startVirtualCard)
        }
    }
}
