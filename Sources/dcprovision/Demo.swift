import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
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

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let started = ContinuousClock.now
        var template = Array("\(NSTemporaryDirectory())/dcprovision-demo-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw DCError(.cannotCreateOutput, "cannot create the sandbox") }
        let sandbox = String(cString: made)
        defer { if !keep { try? FileManager.default.removeItem(atPath: sandbox) } }
        // Every XDG base directory inside the sandbox, so no step can reach the user's own.
        let environment = [
            "HOME": sandbox + "/home", "XDG_CONFIG_HOME": sandbox + "/home/.config",
            "XDG_DATA_HOME": sandbox + "/home/.local/share",
            "XDG_STATE_HOME": sandbox + "/home/.local/state", "XDG_CACHE_HOME": sandbox + "/home/.cache",
            "XDG_RUNTIME_DIR": sandbox + "/run", "XDG_CONFIG_DIRS": sandbox + "/etc/xdg",
            "XDG_DATA_DIRS": sandbox + "/usr/share",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        guard mkdir(sandbox + "/run", 0o700) == 0 else {
            throw DCError(.cannotCreateOutput, "cannot create the sandbox's runtime directory")
        }
        let dcprovision = Tool.executablePath
        let dcclient = (dcprovision as NSString).deletingLastPathComponent + "/dcclient"
        let dcverify = (dcprovision as NSString).deletingLastPathComponent + "/dcverify"
        for tool in [dcclient, dcverify] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw DCError(
                .fileNotFound, "\((tool as NSString).lastPathComponent) is not next to dcprovision", subject: tool,
                hint: "build them all (swift build), or run the demo with swift run dcprovision demo")
        }
        let passphrase = sandbox + "/client-passphrase"
        try Data((UUID().uuidString + "\n").utf8).write(to: URL(fileURLWithPath: passphrase))
        chmod(passphrase, 0o600)

        Console.say("Derived-credential round trip in a sandbox (\(sandbox))\n")
        var step = 0
        func run(_ title: String, _ executable: String, _ arguments: [String], expectFailure: Int32? = nil)
            async throws
        {
            step += 1
            Console.say("\(step). \(title)")
            let shown = arguments.map { argument -> String in
                let text = argument.replacingOccurrences(of: sandbox, with: "$SANDBOX")
                return text.contains(" ") ? "'\(text)'" : text
            }
            Console.say("   $ \((executable as NSString).lastPathComponent) \(shown.joined(separator: " "))")
            let outcome = try await ChildProcess.run(
                executable, arguments: arguments, environment: environment, limits: .init(timeout: .seconds(60)))
            for line in String(decoding: outcome.stdout + outcome.stderr, as: UTF8.self).split(separator: "\n") {
                Console.say("   " + line.replacingOccurrences(of: sandbox, with: "$SANDBOX"))
            }
            guard outcome.termination == .exited(expectFailure ?? 0) else {
                throw DCError(.unknown, "demo step \(step) failed (\(outcome.termination))")
            }
            if let expectFailure { Console.say("   (exit status \(expectFailure), as expected)") }
            Console.say("")
        }
        try await run("A test CA for the provider", dcprovision, ["testca", "init", sandbox + "/ca"])
        try await run(
            "The managed client sets up its encrypted store and publishes its registration", dcclient,
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                "--passphrase-file", passphrase,
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
        try await run(
            "The client asks for a credential; the provider issues, checks, seals and sends it; the client installs it and calls back",
            dcclient, ["request"])
        try await run("What the client holds (no key material is ever printed)", dcclient, ["list"])
        // A correspondent encrypts to the client's certificate, as S/MIME mail does; the renewal
        // below must keep it readable.
        step += 1
        Console.say(
            "\(step). A correspondent encrypts a note to the client's encryption certificate (CMS, as in S/MIME mail)")
        Console.say("   $ dcclient show encryption --pem > $SANDBOX/encryption.pem")
        let shown = try await ChildProcess.run(
            dcclient, arguments: ["show", "encryption", "--pem"], environment: environment,
            limits: .init(timeout: .seconds(60)))
        guard shown.termination == .exited(0) else { throw DCError(.unknown, "demo step \(step) failed") }
        try Data(shown.stdout).write(to: URL(fileURLWithPath: sandbox + "/encryption.pem"))
        let recipient = try CredentialReader().read(file: sandbox + "/encryption.pem").certificates[0]
        let note = "Meet at the usual place at noon."
        try Data(try Sealing.seal(SecretBytes(Array(note.utf8)), to: recipient))
            .write(to: URL(fileURLWithPath: sandbox + "/note.p7m"))
        Console.say("   (sealed \"\(note)\" to it: $SANDBOX/note.p7m)\n")
        try await run("The client locks its secure services", dcclient, ["lock"])
        try await run(
            "A send to a locked client is refused before anything is sealed: serviceUnavailable (AppConnect -1002)",
            dcprovision,
            [
                "send", "--testca", sandbox + "/ca", "--brand", "Example Provider", "--provider-scheme",
                "org.example.dcprovision",
                "--client-scheme", "org.example.dcclient",
            ], expectFailure: 69)
        try await run(
            "The same send with --queue: sealed and spooled now, queued until the client is available", dcprovision,
            [
                "send", "--queue", "--testca", sandbox + "/ca", "--option", "common-name=Demo User", "--name",
                "Demo credential, renewed",
                "--brand", "Example Provider", "--provider-scheme", "org.example.dcprovision", "--client-scheme",
                "org.example.dcclient",
            ])
        try await run(
            "The client unlocks and announces availability; the queued credential replaces the old one atomically",
            dcclient,
            ["unlock", "--passphrase-file", passphrase])
        try await run("What the client holds now", dcclient, ["list"])
        try await run(
            "The renewal kept the old encryption key in the key history: the note still opens", dcclient,
            ["decrypt", sandbox + "/note.p7m"])
        // The managed app's life after the delivery: authorization, secure files, retire.
        let scheme = ["--client-scheme", "org.example.dcclient"]
        let report = sandbox + "/report.txt"
        try Data("Quarterly report: confidential\n".utf8).write(to: URL(fileURLWithPath: report))
        try await run(
            "The app is managed: the provider's policy (sent when it paired) made it ready and authorized", dcclient,
            ["status"])
        try await run(
            "The app keeps a file in secure storage (encrypted under the store key)", dcclient,
            ["files", "put", "report.txt", report])
        try await run("and reads it back", dcclient, ["files", "get", "report.txt"])
        try await run(
            "The provider withdraws the app's authorization, with a message for the user; the app acknowledges and locks",
            dcprovision, ["unauthorize"] + scheme + ["--message", "Your device is out of compliance"])
        try await run(
            "Reads are refused now (notAuthorized), and the user sees why", dcclient,
            ["files", "get", "report.txt"], expectFailure: 77)
        try await run(
            "The provider authorizes the app again: queued, since the app is locked", dcprovision,
            ["authorize"] + scheme)
        try await run(
            "The user unlocks; the newest policy arrives with the availability notice", dcclient,
            ["unlock", "--passphrase-file", passphrase])
        try await run("The file reads again", dcclient, ["files", "get", "report.txt"])
        try await run(
            "The provider's record: each client's policy and acknowledgements, and its sends", dcprovision,
            ["status"])

        // Auth tokens: the app proves who it is to its application server, which asks dcverify.
        step += 1
        Console.say("\(step). The verification service application servers call starts, reading the provider's files")
        // The files the sandbox's provider keeps for verification services.
        let provider = try CredentialService(
            brand: "Example Provider", callbackScheme: "org.example.dcprovision",
            locations: XDGDirectories(environment: environment), open: { _, _ in })
        let portFile = sandbox + "/dcverify.port"
        let serveArguments = [
            "serve", "--listen", "127.0.0.1:0", "--port-file", portFile, "--issuers", provider.issuersPath,
            "--revocations", provider.revocationsPath, "--log-level", "warning",
        ]
        Console.say(
            "   $ dcverify \(serveArguments.map { $0.replacingOccurrences(of: sandbox, with: "$SANDBOX") }.joined(separator: " ")) &"
        )
        let server = Task {
            try await ChildProcess.run(
                dcverify, arguments: serveArguments, environment: environment, limits: .init(timeout: .seconds(120)))
        }
        // Cancelling the task kills dcverify; waiting for it means no server outlives the demo.
        func stopServer() async {
            server.cancel()
            _ = try? await server.value
        }
        do {
            var port: Int?
            for _ in 0..<3000 where port == nil {
                port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap {
                    Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
                }
                if port == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            guard let port else { throw DCError(.notReady, "demo step \(step): dcverify did not start listening") }
            Console.say("   listening on 127.0.0.1:\(port)\n")

            let challenge = try Digests.random(12).withUnsafeBytes { Digests.hex(Array($0)) }
            step += 1
            Console.say(
                "\(step). The app asks its client for an auth token bound to the application server's challenge")
            Console.say("   $ dcclient token --challenge \(challenge) --server app.example.com")
            let asked = try await ChildProcess.run(
                dcclient, arguments: ["token", "--challenge", challenge, "--server", "app.example.com"],
                environment: environment, limits: .init(timeout: .seconds(60)))
            let token = String(decoding: asked.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard asked.termination == .exited(0), !token.isEmpty else {
                throw DCError(.unknown, "demo step \(step) failed (\(asked.termination))")
            }
            Console.say(
                "   \(token.prefix(24))… (\(token.utf8.count) characters: a delegation signed by the provider, then the token signed by the client)\n"
            )
            func verify(_ title: String, until expected: String? = nil) async throws {
                step += 1
                Console.say("\(step). \(title)")
                Console.say("   GET http://127.0.0.1:\(port)/verifyGDAuthToken with X-Good-GD-AuthToken: <the token>")
                func ask() throws -> (status: Int, fields: [(name: String, value: String)]) {
                    try DemoHTTP.get(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
                }
                var answer = try ask()
                // dcverify looks at its files every trustFileCheckInterval: ask again, for a second
                // at most, until the answer is the expected one.
                let deadline = ContinuousClock.now + .seconds(1)
                while let expected, !answer.fields.contains(where: { $0.value.contains(expected) }),
                    ContinuousClock.now < deadline
                {
                    try await Task.sleep(for: .milliseconds(5))
                    answer = try ask()
                }
                Console.say("   HTTP \(answer.status)")
                for field in answer.fields where field.name.hasPrefix("X-Good-GD-") {
                    Console.say("   \(field.name): \(field.value.escapingControlCharacters)")
                }
                Console.say("")
            }
            try await verify("The application server asks dcverify whether the token is genuine; the answer's headers")
            try await run(
                "The provider retires the app: it acknowledges, then erases its keys, credential, files and pasteboard",
                dcprovision, ["retire"] + scheme + ["--message", "This device was retired"])
            try await run(
                "Nothing is left to read; a retired app is set up afresh before it is used again", dcclient,
                ["files", "get", "report.txt"], expectFailure: 77)
            // dcverify notices the new revocation list within trustFileCheckInterval (no restart).
            try await verify(
                "The same token now: dcverify re-read the revocation list without a restart, and says Revoked",
                until: "Revoked")
        } catch {
            await stopServer()
            throw error
        }
        await stopServer()
        let elapsed = ContinuousClock.now - started
        Console.say(
            "Done in \(elapsed.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow))).\(keep ? " Sandbox kept: \(sandbox)" : " Sandbox removed.")"
        )
    }
}
