import Foundation
import TestSupport
import Testing

/// Two managed apps of one user, `chat` and `mail`, each set up with the real `dcclient init
/// --app`, paired, authorized and sent a credential by the real `dcprovision`, and the PKCS#11
/// module that programs load: one slot per app, each token following its own app.
struct TwoAppTokens {
    let sandbox: Sandbox
    let module = Binaries.directory + "/libdcclient-pkcs11.so"
    let pin = "correct horse"

    /// Options for the test CA of every `dcprovision send` (`key-algorithm=rsa2048`, …).
    let sendOptions: [String]

    /// A provider, and the apps `apps` each set up and sent a credential; `sendOptions` go to
    /// the test CA of each send (`--option`).
    init(_ label: String, apps: [String] = ["mail", "chat"], sendOptions: [String] = []) throws {
        self.sendOptions = sendOptions
        try #require(
            FileManager.default.fileExists(atPath: module),
            "the module is built by scripts/test: swift build --product dcclient-pkcs11")
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        sandbox = try Sandbox(label, extra: ["PATH": Binaries.directory + ":" + path])
        try sandbox.write("pass.txt", pin + "\n")
        try check("dcprovision", ["testca", "init", "ca"])
        try check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        for app in apps { try add(app) }
    }

    /// Sets up the app `app` (scheme `org.example.APP`): init, register, pair, authorize, and a
    /// credential sent to it.
    func add(_ app: String) throws {
        let scheme = "org.example.\(app)"
        try check(
            "dcclient",
            [
                "init", "--app", app, "--client-scheme", scheme, "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ])
        try check("dcclient", ["register", "--app", app])
        try check("dcprovision", ["pair", "--client-scheme", scheme, "--user-id", "alice@example.com"])
        try check("dcprovision", ["authorize", "--client-scheme", scheme])
        try check(
            "dcprovision",
            [
                "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
                "--client-scheme", scheme,
            ] + sendOptions.flatMap { ["--option", $0] })
    }

    /// Runs the probe with `steps`, its lines going to `probe.out`.
    func probe(_ steps: [String]) throws -> SpawnedProcess {
        try SpawnedProcess(
            Binaries.directory + "/PKCS11Probe", [module] + steps, environment: sandbox.environment,
            output: sandbox.file("probe.out"))
    }

    /// The probe's lines, with a space for the tab.
    func probeLines() throws -> [String] {
        try String(contentsOfFile: sandbox.file("probe.out"), encoding: .utf8)
            .split(separator: "\n").map { $0.replacingOccurrences(of: "\t", with: " ") }
    }

    /// The probe step that creates `ready` and waits for `go`, both in the sandbox.
    func pause(_ ready: String, _ go: String) -> String { "pause:\(sandbox.file(ready)):\(sandbox.file(go))" }

    /// Runs dcprovision or dcclient, and records an issue naming the command unless it exits 0.
    @discardableResult
    func check(_ tool: String, _ arguments: [String], _ location: SourceLocation = #_sourceLocation) throws
        -> ProcessResult
    {
        let result = try sandbox.run(Binaries.directory + "/" + tool, arguments, timeout: 120)
        #expect(
            result.status == 0, "\(tool) \(arguments.joined(separator: " ")): \(result.stdoutText)\(result.stderrText)",
            sourceLocation: location)
        return result
    }

    func pkcs11Tool(_ arguments: [String], environment: [String: String] = [:]) throws -> ProcessResult {
        try sandbox.run("/usr/bin/pkcs11-tool", ["--module", module] + arguments, environment: environment)
    }

    /// Signs `digest` with the signing key (`CKA_ID` 02) of the token `dcclient APP`, logged in,
    /// into `APP.sig` (DER, as openssl reads it).
    func sign(_ app: String, _ digest: String) throws -> ProcessResult {
        try pkcs11Tool([
            "--token-label", "dcclient \(app)", "--login", "--pin", pin, "--sign", "--id", "02", "-m", "ECDSA",
            "--signature-format", "openssl", "-i", digest, "-o", sandbox.file("\(app).sig"),
        ])
    }

    /// Whether `signature` verifies over `digest` with the public key of `app`'s signing certificate.
    func verifies(_ signature: String, _ digest: String, app: String) throws -> Bool {
        let pem = try check("dcclient", ["show", "signing", "--format", "pem", "--app", app]).stdoutText
        let certificate = try sandbox.write("\(app)-signing.pem", pem)
        let key = try run("openssl", ["x509", "-in", certificate, "-pubkey", "-noout"])
        let publicKey = try sandbox.write("\(app)-signing.pub", key.stdoutText)
        let verified = try run(
            "openssl", ["pkeyutl", "-verify", "-pubin", "-inkey", publicKey, "-in", digest, "-sigfile", signature])
        return verified.status == 0
    }

    /// Waits until the probe created `name` in the sandbox.
    func awaitFile(_ name: String) async throws {
        for _ in 0..<600 where !FileManager.default.fileExists(atPath: sandbox.file(name)) {
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(FileManager.default.fileExists(atPath: sandbox.file(name)), "the probe never reached \(name)")
    }
}

@Suite("The PKCS#11 module: one token per managed app", .ownThreads, .timeLimit(.minutes(5)))
struct PKCS11AppsTests {
    @Test(
        "Two apps, two tokens: pkcs11-tool -L lists dcclient chat in slot 1 and dcclient mail in slot 2; each token signs with its own app's key; DCCLIENT_APP=chat offers chat's token alone"
    )
    func oneTokenPerApp() throws {
        let tokens = try TwoAppTokens("p11-apps")
        defer { tokens.sandbox.remove() }
        let listed = try tokens.pkcs11Tool(["-L"])
        #expect(listed.status == 0, "\(listed.stderrText)")
        let text = listed.stdoutText
        let places = ["(0x1)", "dcclient chat", "(0x2)", "dcclient mail"].map { text.range(of: $0)?.lowerBound }
        #expect(places.allSatisfy { $0 != nil }, "\(text)")
        #expect(places.compactMap { $0 } == places.compactMap { $0 }.sorted(), "\(text)")
        #expect(!text.contains("(0x3)"), "\(text)")

        // Each token's signing key is its own app's: the signature verifies with that app's
        // certificate, not with the other's.
        let digest = try tokens.sandbox.write("digest", String(repeating: "d", count: 32))
        for (app, other) in [("mail", "chat"), ("chat", "mail")] {
            let signed = try tokens.sign(app, digest)
            #expect(signed.status == 0, "\(signed.stderrText)")
            #expect(try tokens.verifies(tokens.sandbox.file("\(app).sig"), digest, app: app))
            #expect(try !tokens.verifies(tokens.sandbox.file("\(app).sig"), digest, app: other))
        }

        // DCCLIENT_APP pins the module to one app: its slot alone, as slot 1.
        let pinned = try tokens.pkcs11Tool(["-L"], environment: ["DCCLIENT_APP": "chat"]).stdoutText
        #expect(pinned.contains("dcclient chat") && !pinned.contains("dcclient mail"), "\(pinned)")
        #expect(pinned.contains("(0x1)") && !pinned.contains("(0x2)"), "\(pinned)")
        let pinnedMail = try tokens.pkcs11Tool(["-L"], environment: ["DCCLIENT_APP": "mail"]).stdoutText
        #expect(pinnedMail.contains("dcclient mail") && !pinnedMail.contains("dcclient chat"), "\(pinnedMail)")
    }

    @Test(
        "C_Initialize's pReserved \"app=mail\" pins the module to mail's slot alone, over DCCLIENT_APP=chat; any other text (no app=, an id that is none, empty, longer than 255 bytes) is CKR_ARGUMENTS_BAD"
    )
    func pinnedByReserved() throws {
        let tokens = try TwoAppTokens("p11-apps-reserved")
        defer { tokens.sandbox.remove() }
        let long = "app=" + String(repeating: "m", count: 300)
        let probe = try SpawnedProcess(
            Binaries.directory + "/PKCS11Probe",
            [
                tokens.module, "init-reserved:app=mail", "slot-count", "token-label", "finalize", "init-reserved:mail",
                "init-reserved:app=Mail", "init-reserved:app=mail x", "init-reserved:", "init-reserved:" + long,
                "init-reserved:app=chat", "slot-count", "token-label", "finalize",
            ],
            environment: tokens.sandbox.environment.merging(["DCCLIENT_APP": "chat"]) { $1 },
            output: tokens.sandbox.file("probe.out"))
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        #expect(
            try tokens.probeLines() == [
                "init-reserved CKR_OK", "slot-count 1", "token-label dcclient mail", "finalize CKR_OK",
                "init-reserved CKR_ARGUMENTS_BAD", "init-reserved CKR_ARGUMENTS_BAD", "init-reserved CKR_ARGUMENTS_BAD",
                "init-reserved CKR_ARGUMENTS_BAD", "init-reserved CKR_ARGUMENTS_BAD", "init-reserved CKR_OK",
                "slot-count 1", "token-label dcclient chat", "finalize CKR_OK",
            ])
    }

    @Test(
        "A p11-kit module configuration with x-init-reserved: app=mail offers mail's token alone to every p11-kit program (p11-kit list-modules, pkcs11-tool through p11-kit-proxy), over DCCLIENT_APP=chat; x-init-reserved: mail makes the module fail to initialize, offering no token (p11-kit fails when it is critical)",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/p11-kit"))
    )
    func pinnedByModuleConfiguration() throws {
        let tokens = try TwoAppTokens("p11-apps-p11kit")
        defer { tokens.sandbox.remove() }
        // The user's module configurations, where p11-kit reads them for an ordinary user. For root
        // it reads none of the user's: there the directory is bound over p11-kit's system one, in
        // a mount namespace of the one command (the system's modules are then out of sight).
        let modules = tokens.sandbox.home + "/.config/pkcs11/modules"
        try FileManager.default.createDirectory(atPath: modules, withIntermediateDirectories: true)
        func p11kit(_ program: String, _ arguments: [String]) throws -> ProcessResult {
            let command = getuid() == 0 ? "/usr/bin/unshare" : program
            let prefix =
                getuid() == 0
                ? [
                    "--mount", "--propagation", "private", "/bin/sh", "-c",
                    "mount --bind \"$0\" /usr/share/p11-kit/modules && exec \"$@\"", modules, program,
                ] : []
            return try tokens.sandbox.run(command, prefix + arguments, environment: ["DCCLIENT_APP": "chat"])
        }
        func configure(_ reserved: String, critical: Bool = false) throws {
            let text = [
                "module: \(tokens.module)", "critical: \(critical ? "yes" : "no")", "trust-policy: no",
                "x-init-reserved: \(reserved)", "",
            ]
            try text.joined(separator: "\n").write(
                toFile: modules + "/dcclient.module", atomically: true, encoding: .utf8)
        }
        try configure("app=mail")
        let listed = try p11kit("/usr/bin/p11-kit", ["list-modules"])
        #expect(listed.status == 0, "\(listed.stderrText)")
        #expect(listed.stdoutText.contains("dcclient mail"), "\(listed.stdoutText)\(listed.stderrText)")
        #expect(!listed.stdoutText.contains("dcclient chat"), "\(listed.stdoutText)")
        let proxy = try #require(
            ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"].map { $0 + "/p11-kit-proxy.so" }
                .first { FileManager.default.fileExists(atPath: $0) })
        let slots = try p11kit("/usr/bin/pkcs11-tool", ["--module", proxy, "-L"])
        #expect(slots.stdoutText.contains("dcclient mail"), "\(slots.stdoutText)\(slots.stderrText)")
        #expect(!slots.stdoutText.contains("dcclient chat"), "\(slots.stdoutText)")

        // Text that is not app=ID: the module refuses to start (CKR_ARGUMENTS_BAD), which p11-kit
        // skips (critical: no) or, for a critical module, fails on as a whole.
        try configure("mail")
        let skipped = try p11kit("/usr/bin/p11-kit", ["list-modules"])
        #expect(!skipped.stdoutText.contains("dcclient "), "\(skipped.stdoutText)")
        try configure("mail", critical: true)
        let refused = try p11kit("/usr/bin/p11-kit", ["list-modules"])
        #expect(refused.status != 0 && !refused.stdoutText.contains("dcclient "), "\(refused.stdoutText)")
    }

    @Test(
        "Locking one app logs out only its token (CKR_USER_NOT_LOGGED_IN) while the other's session still signs; unauthorizing one removes only its token (CKR_DEVICE_REMOVED); C_WaitForSlotEvent names the slot that changed"
    )
    func eachTokenFollowsItsApp() async throws {
        let tokens = try TwoAppTokens("p11-apps-lock")
        defer { tokens.sandbox.remove() }
        let login = "login:\(tokens.pin)"
        let probe = try tokens.probe([
            "init", "slot:1", "open", login, "sign:02", "slot:2", "open", login, "sign:02", "wait-nonblock",
            tokens.pause("ready1", "go1"), "slot:2", "sign-again", "session-state", "slot:1", "sign-again", "event",
            "wait-nonblock", tokens.pause("ready2", "go2"), "slot:1", "sign-again", "slot:2", "sign-again", login,
            "sign:02", "slots-present", "event", "event", "finalize",
        ])
        try await tokens.awaitFile("ready1")
        try tokens.check("dcclient", ["lock", "--app", "mail"])
        try tokens.sandbox.write("go1", "")
        try await tokens.awaitFile("ready2")
        try tokens.check(
            "dcprovision", ["unauthorize", "--client-scheme", "org.example.chat", "--message", "Chat is paused"])
        try tokens.sandbox.write("go2", "")
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        let lines = try tokens.probeLines()
        #expect(
            lines == [
                "init CKR_OK", "slot 1", "open CKR_OK", "login CKR_OK", "sign:02 CKR_OK", "slot 2", "open CKR_OK",
                "login CKR_OK", "sign:02 CKR_OK", "wait-nonblock CKR_NO_EVENT", "pause resumed",
                // mail locked: its token logs out; chat's session signs on.
                "slot 2", "sign-again CKR_USER_NOT_LOGGED_IN", "session-state state=0", "slot 1",
                "sign-again CKR_OK", "event slot 2", "wait-nonblock CKR_NO_EVENT", "pause resumed",
                // chat unauthorized: its token is gone; mail's logs in again and signs.
                "slot 1", "sign-again CKR_DEVICE_REMOVED", "slot 2", "sign-again CKR_USER_NOT_LOGGED_IN",
                "login CKR_OK", "sign:02 CKR_OK", "slots-present 1", "event slot 1", "event slot 2", "finalize CKR_OK",
            ], "\(lines)")
    }

    @Test(
        "An app set up while a program has the module initialized gets the next slot (2, though its id sorts first), reported by C_WaitForSlotEvent; the first app keeps slot 1"
    )
    func laterAppAppended() async throws {
        let tokens = try TwoAppTokens("p11-apps-later", apps: ["mail"])
        defer { tokens.sandbox.remove() }
        let probe = try tokens.probe([
            "init", "slots-present", "wait-nonblock", tokens.pause("ready", "go"), "event", "slots-present",
            "slot:2", "open", "login:\(tokens.pin)", "sign:02", "slot:1", "open", "finalize",
        ])
        try await tokens.awaitFile("ready")
        try tokens.add("chat")
        try tokens.sandbox.write("go", "")
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        #expect(
            try tokens.probeLines() == [
                "init CKR_OK", "slots-present 1", "wait-nonblock CKR_NO_EVENT", "pause resumed", "event slot 2",
                "slots-present 2", "slot 2", "open CKR_OK", "login CKR_OK", "sign:02 CKR_OK", "slot 1", "open CKR_OK",
                "finalize CKR_OK",
            ])
        // A program that starts now has them in id order.
        let listed = try tokens.pkcs11Tool(["-L"]).stdoutText
        let chat = try #require(listed.range(of: "dcclient chat"), "\(listed)")
        let mail = try #require(listed.range(of: "dcclient mail"), "\(listed)")
        #expect(chat.lowerBound < mail.lowerBound)
    }
}
