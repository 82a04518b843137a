import Foundation
import TestSupport
import Testing

/// `dcclient init` either sets the app up or leaves nothing behind: each step it takes is made to
/// fail in turn by a real obstacle (the kernel keyring refusing the unlocked key with the runtime
/// directory on disk, a damaged provider registration, a directory where the client's registration
/// goes, a file where its spool goes), and after each the app's container, its registration and any
/// unlocked key are gone, and the same command, run again once the obstacle is removed, succeeds.
/// A trust anchor that cannot be read stops it before anything is written; one that cannot be kept
/// (a directory where it goes in a container that was there) takes back what init added to it.
@Suite("dcclient init is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct InitAllOrNothingTests {
    /// A step of `dcclient init`, the obstacle that makes it fail, and the exit status it fails with.
    struct Step: CustomTestStringConvertible, Sendable {
        let name: String
        /// What the obstacle is in the sandbox, removed again by `clear`.
        let place: @Sendable (Sandbox) throws -> Void
        let clear: @Sendable (Sandbox) throws -> Void
        /// Whether `init` runs in a session keyring the kernel refuses keys in.
        var revokedKeyring = false
        /// More arguments for `init` (the trust anchors).
        var arguments: [String] = []
        var testDescription: String { name }
    }

    static let registrations = "/.local/share/derived-credentials"
    static let container = "/.local/share/dcclient/apps/dcclient"

    static let steps: [Step] = [
        Step(
            name: "pinning the provider: its registration is damaged",
            place: { sandbox in
                try FileManager.default.createDirectory(
                    atPath: sandbox.home + registrations + "/providers", withIntermediateDirectories: true)
                FileManager.default.createFile(
                    atPath: sandbox.home + registrations + "/providers/org.example.provider.json",
                    contents: Data("{ damaged".utf8))
            },
            clear: { try FileManager.default.removeItem(atPath: $0.home + registrations + "/providers") }),
        Step(
            name: "publishing the registration: a directory stands where it goes",
            place: { sandbox in
                try FileManager.default.createDirectory(
                    atPath: sandbox.home + registrations + "/clients/org.example.dcclient.json/x",
                    withIntermediateDirectories: true)
            },
            clear: { try FileManager.default.removeItem(atPath: $0.home + registrations + "/clients") }),
        Step(
            name: "making the spool: a file stands where it goes",
            place: { sandbox in
                try FileManager.default.createDirectory(
                    atPath: sandbox.home + container, withIntermediateDirectories: true)
                FileManager.default.createFile(atPath: sandbox.home + container + "/spool", contents: Data("x".utf8))
            },
            clear: { try FileManager.default.removeItem(atPath: $0.home + container + "/spool") }),
        Step(
            name: "reading the trust anchors: the file is damaged",
            place: { try $0.write("anchors.pem", "-----BEGIN CERTIFICATE-----\ndamaged\n") },
            clear: { try StateTree.makeCertificate("anchors.pem", in: $0) },
            arguments: ["--trust-anchor", "anchors.pem"]
        ),
        Step(
            name: "keeping the trust anchors: a directory stands where they go",
            place: { sandbox in
                try StateTree.makeCertificate("anchors.pem", in: sandbox)
                try FileManager.default.createDirectory(
                    atPath: sandbox.home + container + "/store/trust-anchors.pem/x", withIntermediateDirectories: true)
            },
            clear: { try FileManager.default.removeItem(atPath: $0.home + container + "/store/trust-anchors.pem") },
            arguments: ["--trust-anchor", "anchors.pem"]),
        Step(
            name: "unlocking: the kernel keyring refuses the key and the runtime directory is on disk",
            place: { _ in }, clear: { _ in }, revokedKeyring: true),
    ]

    @Test("Each step of dcclient init failing in turn leaves nothing, and init again succeeds", arguments: steps)
    func failEachStep(step: Step) throws {
        if step.revokedKeyring {
            try #require(
                UnlockedKeyCommandTests.temporaryDirectoryOnDisk, "needs a runtime directory on persistent storage")
        }
        let tools = try Tools("init-all-or-nothing")
        defer { tools.sandbox.remove() }
        _ = try tools.sandbox.write("pass.txt", "correct horse\n")
        let initialize =
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ] + step.arguments
        try step.place(tools.sandbox)
        let before = try StateTree(tools.sandbox)
        let failed =
            step.revokedKeyring
            ? try UnlockedKeyCommandTests.inRevokedKeyring(tools, initialize) : try tools.run("dcclient", initialize)
        #expect(failed.status != 0, "\(failed.stdoutText)")
        // keyctl session says which keyring it joined; dcclient's own say is one line.
        #expect(
            failed.stderrText.split(separator: "\n").filter { !$0.hasPrefix("Joined session keyring") }.count == 1,
            "\(failed.stderrText)")
        #expect(try StateTree(tools.sandbox).changes(since: before) == [], "left behind: \(failed.stderrText)")
        #expect(try tools.run("dcclient", ["status"]).status == 66, "the app counts as set up")
        try step.clear(tools.sandbox)
        let again = try tools.run("dcclient", initialize)
        #expect(again.status == 0, "\(again.stderrText)")
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("unlocked:         yes"))
    }
}

/// Everything in a sandbox, to compare before and after a command that failed: each path (files,
/// directories and links, under the sandbox's root) and what a file holds or a link points to.
/// Lock files (`*.lock`) are left out: they hold nothing and are never removed while another process
/// may hold one.
struct StateTree: Equatable {
    /// What each path is: a file's bytes, a link's target, nil for a directory.
    var entries: [String: Data?] = [:]

    init(_ sandbox: Sandbox) throws {
        for name in try FileManager.default.subpathsOfDirectory(atPath: sandbox.root) where !name.hasSuffix(".lock") {
            let path = sandbox.root + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0 else { continue }
            switch status.st_mode & S_IFMT {
            case S_IFDIR: entries[name] = .some(nil)
            case S_IFLNK: entries[name] = Data(try FileManager.default.destinationOfSymbolicLink(atPath: path).utf8)
            default: entries[name] = try Data(contentsOf: URL(fileURLWithPath: path))
            }
        }
    }

    /// The paths that appeared, went or changed since `before`, but those in `allowed` and each
    /// directory in `allowedUnder` with what is in it (a record named by an id the test does not know).
    func changes(since before: StateTree, allowed: Set<String> = [], allowedUnder: [String] = []) -> [String] {
        Set(entries.keys).union(before.entries.keys).filter { path in
            !allowed.contains(path) && !allowedUnder.contains { path == $0 || path.hasPrefix($0 + "/") }
                && entries[path] != before.entries[path]
        }.sorted()
    }

    /// Writes a self-signed CA certificate to `name` in the sandbox with the OpenSSL CLI.
    static func makeCertificate(_ name: String, in sandbox: Sandbox) throws {
        let made = try sandbox.run(
            try which("openssl"),
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj",
                "/CN=Example Anchor", "-keyout", sandbox.file(name + ".key"), "-out", sandbox.file(name), "-days", "30",
            ])
        #expect(made.status == 0, "\(made.stderrText)")
    }
}

/// A step of a command that makes state, the real obstacle that makes it fail, and what the failure
/// says and exits with.
struct Obstacle: CustomTestStringConvertible, Sendable {
    let name: String
    /// Puts the obstacle in the sandbox; `clear` removes it again.
    let place: @Sendable (Sandbox) throws -> Void
    let clear: @Sendable (Sandbox) throws -> Void
    /// The exit status of the failure, and a fragment of its line that names the step.
    let status: Int32
    let says: String
    /// A file size limit (`prlimit --fsize`) to run under, for a disk that fills midway.
    var fileSizeLimit: Int? = nil
    var testDescription: String { name }

    /// A directory (not empty) where the file `path` (under the sandbox's root) goes.
    static func directory(at path: String, _ name: String, status: Int32 = 73, says: String) -> Obstacle {
        Obstacle(
            name: name,
            place: { sandbox in
                try? FileManager.default.removeItem(atPath: sandbox.root + "/" + path)
                try FileManager.default.createDirectory(
                    atPath: sandbox.root + "/" + path + "/x", withIntermediateDirectories: true)
            },
            clear: { try FileManager.default.removeItem(atPath: $0.root + "/" + path) }, status: status, says: says)
    }

    /// A file where the directory `path` (under the sandbox's root) goes; what was there is put
    /// aside and brought back by `clear`.
    static func file(at path: String, _ name: String, status: Int32 = 73, says: String) -> Obstacle {
        Obstacle(
            name: name,
            place: { sandbox in
                let full = sandbox.root + "/" + path
                if FileManager.default.fileExists(atPath: full) {
                    try FileManager.default.moveItem(atPath: full, toPath: full + ".aside")
                }
                try FileManager.default.createDirectory(
                    atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data("x".utf8).write(to: URL(fileURLWithPath: full))
            },
            clear: { sandbox in
                let full = sandbox.root + "/" + path
                try FileManager.default.removeItem(atPath: full)
                if FileManager.default.fileExists(atPath: full + ".aside") {
                    try FileManager.default.moveItem(atPath: full + ".aside", toPath: full)
                }
            }, status: status, says: says)
    }

    /// A file size limit of `bytes` that the command's writes exceed.
    static func fileSizeLimit(_ bytes: Int, _ name: String, says: String = "File too large") -> Obstacle {
        Obstacle(name: name, place: { _ in }, clear: { _ in }, status: 74, says: says, fileSizeLimit: bytes)
    }

    /// Places the obstacle, runs `tool` with `arguments`, and checks that it fails with one line
    /// naming the step, leaves the sandbox as it was (but `allowed` and what is under
    /// `allowedUnder`), and that once the obstacle is cleared the same command succeeds (or the
    /// one `again` gives: a client's request asked afresh); returns that success.
    @discardableResult
    func check(
        _ tools: Tools, _ tool: String, _ arguments: [String], allowed: Set<String> = [],
        allowedUnder: [String] = [], again: ((Tools) throws -> [String])? = nil,
        afterFailure: (Sandbox) throws -> Void = { _ in }, _ location: SourceLocation = #_sourceLocation
    ) throws -> ProcessResult {
        try place(tools.sandbox)
        let before = try StateTree(tools.sandbox)
        let failed =
            try fileSizeLimit.map {
                try tools.sandbox.run(
                    try which("prlimit"), ["--fsize=\($0)", Binaries.directory + "/" + tool] + arguments, timeout: 120)
            } ?? tools.run(tool, arguments)
        #expect(failed.status == status, "\(failed.stdoutText)\(failed.stderrText)", sourceLocation: location)
        let lines = failed.stderrText.split(separator: "\n")
        #expect(
            lines.count == 1 && failed.stderrText.contains(says), "\(failed.stderrText)", sourceLocation: location)
        let left = try StateTree(tools.sandbox).changes(since: before, allowed: allowed, allowedUnder: allowedUnder)
        #expect(left == [], "left behind or changed: \(left)", sourceLocation: location)
        try afterFailure(tools.sandbox)
        try clear(tools.sandbox)
        let rerun = try tools.run(tool, try again?(tools) ?? arguments)
        #expect(rerun.status == 0, "\(rerun.stderrText)", sourceLocation: location)
        return rerun
    }
}

/// `dcclient register` either registers or leaves things as they were: after `dcclient unregister`,
/// each step fails in turn (pinning the provider whose registration is damaged, publishing the
/// registration, installing the launcher, the desktop entry, the default in mimeapps.list), and
/// the registration, the pin and the handler's files are as before; cleared, register succeeds.
@Suite("dcclient register is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct ClientRegisterAllOrNothingTests {
    static let data = "home/.local/share"
    static let steps: [Obstacle] = [
        Obstacle(
            name: "pinning the provider: its registration is damaged",
            place: { sandbox in
                try FileManager.default.createDirectory(
                    atPath: sandbox.dataHome + "/derived-credentials/providers", withIntermediateDirectories: true)
                try Data("{ damaged".utf8).write(
                    to: URL(
                        fileURLWithPath: sandbox.dataHome + "/derived-credentials/providers/org.example.provider.json"))
            },
            clear: { try FileManager.default.removeItem(atPath: $0.dataHome + "/derived-credentials/providers") },
            status: 65, says: "org.example.provider.json"),
        .directory(
            at: data + "/derived-credentials/clients/org.example.dcclient.json",
            "publishing the registration: a directory stands where it goes", says: "org.example.dcclient.json"),
        .directory(
            at: data + "/dc-handlers/org.example.dcclient", "installing the launcher: a directory stands where it goes",
            says: "launcher"),
        .directory(
            at: data + "/applications/dc-org.example.dcclient.desktop",
            "installing the desktop entry: a directory stands where it goes", says: "dc-org.example.dcclient.desktop"),
        .directory(
            at: "home/.config/mimeapps.list", "making it the default: a directory stands where mimeapps.list goes",
            says: "mimeapps.list"),
    ]

    @Test(
        "Each step of dcclient register failing in turn leaves things as they were, and register again succeeds",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("register-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        try tools.check("dcclient", ["unregister"])
        try step.check(tools, "dcclient", ["register"])
        #expect(
            FileManager.default.fileExists(
                atPath: tools.sandbox.dataHome + "/derived-credentials/clients/org.example.dcclient.json"))
    }
}

/// `dcprovision register` either registers the provider or leaves nothing: each step fails in turn
/// (writing its configuration, making the token keys and the files verifiers read, installing the
/// handler, publishing the registration), and no configuration, key or handler file is left; cleared,
/// register succeeds.
@Suite("dcprovision register is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct ProviderRegisterAllOrNothingTests {
    static let steps: [Obstacle] = [
        .directory(
            at: "home/.config/dcprovision/config.json", "writing the configuration: a directory stands where it goes",
            says: "config.json"),
        .file(
            at: "home/.local/state/dcprovision/verifier",
            "making the token keys: a file stands where the verifier's directory goes", says: "verifier"),
        .directory(
            at: "home/.local/share/dc-handlers/org.example.provider",
            "installing the handler: a directory stands where the launcher goes", says: "launcher"),
        .directory(
            at: "home/.local/share/derived-credentials/providers/org.example.provider.json",
            "publishing the registration: a directory stands where it goes", says: "org.example.provider.json"),
    ]

    @Test(
        "Each step of dcprovision register failing in turn leaves nothing, and register again succeeds",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("provider-register-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try step.check(
            tools, "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
    }
}

/// `dcprovision pair` either pairs or leaves things as they were: recording the client's policy and
/// pinning the client fail in turn, and no policy record or pairing is left; cleared, pair succeeds.
@Suite("dcprovision pair is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct PairAllOrNothingTests {
    static let steps: [Obstacle] = [
        .file(
            at: "home/.local/state/dcprovision/policies",
            "recording the policy: a file stands where the policies' directory goes", says: "policies"),
        .directory(
            at: "home/.config/dcprovision/clients/dcclient.json",
            "pinning the client: a directory stands where its pairing goes", says: "dcclient.json"),
    ]

    @Test(
        "Each step of dcprovision pair failing in turn leaves things as they were, and pair again succeeds",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("pair-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        try step.check(tools, "dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        #expect(try tools.check("dcprovision", ["status"]).stdoutText.contains("dcclient"))
    }
}

/// The test CA's commands either complete or leave nothing: `testca init` stopped by a file where
/// its directory goes or by a full disk (a file size limit) leaves no directory; `testca issue`
/// stopped while writing its outputs (a file where the directory goes, a full disk) records
/// nothing in the CA, and stopped while recording (a directory where index.txt.attr goes, a file
/// where the credentials directory goes) takes its outputs and the record back. Cleared, each
/// succeeds, and the CA's database holds exactly the credentials handed out.
@Suite("The test CA's init and issue are all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct TestCAAllOrNothingTests {
    static let initSteps: [Obstacle] = [
        .file(at: "ca", "making the directory: a file stands where it goes", says: "ca"),
        .fileSizeLimit(200, "writing the keys and certificates: the disk fills (a file size limit)"),
    ]

    @Test(
        "Each step of dcprovision testca init failing in turn leaves nothing, and init again succeeds",
        arguments: initSteps)
    func failEachInitStep(step: Obstacle) throws {
        let tools = try Tools("testca-init-all-or-nothing")
        defer { tools.sandbox.remove() }
        try step.check(tools, "dcprovision", ["testca", "init", "ca"])
    }

    static let issueSteps: [Obstacle] = [
        .file(at: "out", "writing the outputs: a file stands where their directory goes", says: "out"),
        .fileSizeLimit(400, "writing the outputs: the disk fills midway (a file size limit)"),
        .directory(
            at: "ca/index.txt.attr", "recording: a directory stands where index.txt.attr goes", says: "index.txt"),
        .file(
            at: "ca/credentials", "recording: a file stands where the credentials directory goes", says: "credentials"),
    ]

    @Test(
        "Each step of dcprovision testca issue failing in turn leaves nothing, and issue again succeeds",
        arguments: issueSteps)
    func failEachIssueStep(step: Obstacle) throws {
        let tools = try Tools("testca-issue-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "first"])
        try step.check(tools, "dcprovision", ["testca", "issue", "ca", "--out-dir", "out"])
        // Two credentials of four certificates each: nothing of a failed attempt was recorded.
        let index = try String(contentsOfFile: tools.sandbox.file("ca/index.txt"), encoding: .utf8)
        #expect(index.split(separator: "\n").count == 8, "\(index)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: tools.sandbox.file("ca/credentials")).count == 2)
    }
}

/// `dcprovision publish` either publishes or leaves nothing but the number it used up: stopped
/// writing the files (a file where the directory goes, a full disk), no directory, file or record
/// is left and the trust-signing key it made is gone; the number written ahead has advanced, and
/// the publication that then succeeds carries the next one, so none is ever used twice. (The
/// record, written last, has no obstacle of its own: whatever stops writing it stops reading it
/// first. `TrustPublicationTests` stops a publication there by hand.)
@Suite("dcprovision publish is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct PublishAllOrNothingTests {
    static let steps: [Obstacle] = [
        .file(at: "www", "writing the files: a file stands where their directory goes", says: "www"),
        .fileSizeLimit(300, "writing the files: the disk fills midway (a file size limit)"),
    ]

    @Test(
        "Each step of dcprovision publish failing in turn leaves nothing but the number used up, and publish again succeeds with a higher number",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("publish-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        let number = "home/.local/state/dcprovision/publication-number.json"
        struct Used: Decodable { var number: Int }
        var used = 0
        let published = try step.check(
            tools, "dcprovision", ["publish", "--out-dir", tools.sandbox.file("www")], allowed: [number],
            afterFailure: { sandbox in
                // The number written ahead, if the failed attempt got that far.
                if let data = FileManager.default.contents(atPath: sandbox.root + "/" + number) {
                    used = try JSONDecoder().decode(Used.self, from: data).number
                }
            })
        #expect(used >= 1, "the number is written ahead of the files")
        let output = published.stdoutText + published.stderrText
        #expect(output.contains("published trust list \(used + 1) "), "list \(used) was used up: \(output)")
    }
}

/// `dcprovision send` takes back what it wrote before the URL goes out: stopped while spooling (a
/// file where the client's spool goes) or while drawing the delivery number (a directory where the
/// client's counter goes), no ledger record and no spool file is left; cleared, the same send
/// delivers. (The credential comes from files, so the source itself records nothing.)
@Suite("dcprovision send is all or nothing until its URL goes out", .ownThreads, .timeLimit(.minutes(3)))
struct SendAllOrNothingTests {
    /// Spooling the sealed payload: a file where the client's spool goes.
    static let spooling = Obstacle.file(
        at: clientContainer + "/spool", "spooling: a file stands where the client's spool goes", says: "spool")
    /// Drawing the delivery number: a directory where the client's counter goes.
    static let drawingTheNumber = Obstacle.directory(
        at: "home/.local/state/dcprovision/sequences/dcclient",
        "drawing the delivery number: a directory stands where the client's counter goes", says: "sequences/dcclient")
    static let steps: [Obstacle] = [
        spooling, drawingTheNumber,
    ]

    @Test(
        "Each step of dcprovision send before its URL goes out, failing in turn, leaves no record and no spool file, and send again delivers",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("send-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued"])
        try step.check(
            tools, "dcprovision",
            [
                "send", "--manifest", "issued/manifest.json", "--brand", "Example", "--provider-scheme",
                "org.example.provider", "--client-scheme", "org.example.dcclient",
            ])
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
    }

    @Test(
        "dcprovision send stopped sending the client's newest policy first leaves no record and no spool file, and send again delivers"
    )
    func failPushingPolicy() throws {
        let tools = try Tools("send-policy-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued"])
        // The client cannot store a policy (a directory where it goes), so a new one stays pending.
        let policy = tools.sandbox.home + "/.local/share/dcclient/apps/dcclient/store/policy.json"
        try FileManager.default.moveItem(atPath: policy, toPath: policy + ".aside")
        try FileManager.default.createDirectory(atPath: policy + "/x", withIntermediateDirectories: true)
        let pending = try tools.run(
            "dcprovision", ["policy", "--client-scheme", "org.example.dcclient", "--auto-lock", "600"])
        #expect(pending.status != 0, "\(pending.stdoutText)")
        let record = "home/.local/state/dcprovision/policies/dcclient.json"
        let before = try StateTree(tools.sandbox)
        let send = ["send", "--manifest", "issued/manifest.json", "--client-scheme", "org.example.dcclient"]
        let failed = try tools.run("dcprovision", send)
        #expect(failed.status == 69, "\(failed.stdoutText)\(failed.stderrText)")
        // The client's handler says its own line; dcprovision's last line names the step.
        #expect(
            failed.stderrText.split(separator: "\n").last?.contains("did not complete") == true, "\(failed.stderrText)")
        // The policy record only notes that its policy went out again.
        let left = try StateTree(tools.sandbox).changes(since: before, allowed: [record])
        #expect(left == [], "left behind or changed: \(left)")
        try FileManager.default.removeItem(atPath: policy)
        try FileManager.default.moveItem(atPath: policy + ".aside", toPath: policy)
        try tools.check("dcprovision", send)
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("600"))
    }
}

/// `dcprovision unregister` either removes the provider's registration or leaves it as it was:
/// removing the desktop entry, the launcher, the default in mimeapps.list and the published
/// registration each fail in turn (a directory stands where the file is), and what the steps before
/// removed is put back; cleared, unregister succeeds and register makes it the handler again.
@Suite("dcprovision unregister is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct ProviderUnregisterAllOrNothingTests {
    static let data = "home/.local/share"
    static let steps: [Obstacle] = [
        .directory(
            at: data + "/applications/dc-org.example.provider.desktop",
            "removing the desktop entry: a directory stands where it is", status: 74, says: "desktop entry"),
        .directory(
            at: data + "/dc-handlers/org.example.provider", "removing the launcher: a directory stands where it is",
            status: 74, says: "launcher"),
        .directory(
            at: "home/.config/mimeapps.list", "removing the default: a directory stands where mimeapps.list is",
            says: "mimeapps.list"),
        .directory(
            at: data + "/derived-credentials/providers/org.example.provider.json",
            "withdrawing the registration: a directory stands where it is", status: 74, says: "registration"),
    ]

    @Test(
        "Each step of dcprovision unregister failing in turn leaves the registration as it was, and unregister again succeeds",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("provider-unregister-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        let register = [
            "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca",
        ]
        try tools.check("dcprovision", register)
        try step.check(tools, "dcprovision", ["unregister"])
        for path in [
            Self.data + "/applications/dc-org.example.provider.desktop",
            Self.data + "/dc-handlers/org.example.provider",
            Self.data + "/derived-credentials/providers/org.example.provider.json",
        ] {
            #expect(!FileManager.default.fileExists(atPath: tools.sandbox.root + "/" + path), "\(path)")
        }
        try tools.check("dcprovision", register)
    }
}

/// What a client asks the provider, signed by the client itself: `dcclient` makes the URL and opens
/// the provider's handler, which is kept from acting (its configuration put aside meanwhile), so
/// that the test hands the URL to `dcprovision handle-url` itself. Returns the URL on the line of
/// `dcclient`'s output that starts with `prefix`.
func clientURL(_ tools: Tools, _ arguments: [String], line prefix: String) throws -> String {
    let config = tools.sandbox.home + "/.config/dcprovision/config.json"
    try FileManager.default.moveItem(atPath: config, toPath: config + ".aside")
    defer { try? FileManager.default.moveItem(atPath: config + ".aside", toPath: config) }
    let asked = try tools.run("dcclient", arguments)
    let line = asked.stdoutText.split(separator: "\n").first { $0.hasPrefix(prefix) }
    return try #require(line.map { String($0.dropFirst(prefix.count)) }, "\(asked.stdoutText)\(asked.stderrText)")
}

/// `dcprovision handle-url` for a client's `new` keeps only the request id it recorded first (a
/// replay is refused even when the answer failed), marked not sent: the source failing (its
/// manifest damaged), spooling (a file where the client's spool goes) and drawing the delivery
/// number (a directory where the client's counter goes) each leave no spool file and nothing else;
/// cleared, the client's next request (a new id) is answered.
@Suite("dcprovision handle-url new is all or nothing but its request id", .ownThreads, .timeLimit(.minutes(3)))
struct HandleNewAllOrNothingTests {
    static let requests = "home/.local/state/dcprovision/requests"
    static let steps: [Obstacle] = [
        Obstacle(
            name: "issuing: the source's manifest is damaged",
            place: { sandbox in
                try FileManager.default.moveItem(
                    atPath: sandbox.file("issued/manifest.json"), toPath: sandbox.file("issued/manifest.json.aside"))
                try sandbox.write("issued/manifest.json", "{ damaged")
            },
            clear: { sandbox in
                try FileManager.default.removeItem(atPath: sandbox.file("issued/manifest.json"))
                try FileManager.default.moveItem(
                    atPath: sandbox.file("issued/manifest.json.aside"), toPath: sandbox.file("issued/manifest.json"))
            }, status: 65, says: "manifest.json"),
        SendAllOrNothingTests.spooling, SendAllOrNothingTests.drawingTheNumber,
    ]

    @Test(
        "Each step of dcprovision handle-url new failing in turn leaves only its request id, marked not sent, and the client's next request is answered",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("handle-new-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued"])
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--manifest",
                "issued/manifest.json",
            ])
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcprovision", ["authorize", "--client-scheme", "org.example.dcclient"])
        let url = try clientURL(tools, ["request"], line: "requesting: ")
        let request = try #require(url.split(separator: "&").first { $0.hasPrefix("request=") }?.dropFirst(8))
        try step.check(
            tools, "dcprovision", ["handle-url", url], allowed: [Self.requests, Self.requests + "/\(request).json"],
            again: { try ["handle-url", clientURL($0, ["request"], line: "requesting: ")] },
            afterFailure: { sandbox in
                let record = try readText(sandbox.root + "/" + Self.requests + "/\(request).json")
                #expect(record.contains("\"outcome\":\"not-sent\""), "\(record)")
            })
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
        // The used id stays refused.
        #expect(try tools.run("dcprovision", ["handle-url", url]).status == 77)
    }
}

/// `dcprovision handle-url` for a client's `available` keeps only the notice's time it recorded
/// first (a replayed notice does nothing): stopped recording it (a directory where it goes) or
/// sending the newest policy (a file where the policies' directory goes), the queued delivery stays
/// queued with its spool file, and nothing else changes; cleared, the client's next notice
/// delivers it.
@Suite("dcprovision handle-url available is all or nothing but its time", .ownThreads, .timeLimit(.minutes(3)))
struct HandleAvailableAllOrNothingTests {
    static let time = "home/.local/state/dcprovision/available/dcclient"
    static let steps: [Obstacle] = [
        .directory(
            at: time, "recording the notice: a directory stands where the client's last notice time goes",
            says: "available/dcclient"),
        .file(
            at: "home/.local/state/dcprovision/policies",
            "sending the newest policy: a file stands where the policies' directory goes", says: "policies"),
    ]

    @Test(
        "Each step of dcprovision handle-url available failing in turn leaves only the notice's time, the delivery queued, and the client's next notice delivers it",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("handle-available-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued"])
        try tools.check("dcclient", ["lock"])
        try tools.check(
            "dcprovision",
            ["send", "--manifest", "issued/manifest.json", "--client-scheme", "org.example.dcclient", "--queue"])
        let unlock = ["unlock", "--passphrase-file", "pass.txt"]
        let url = try clientURL(tools, unlock, line: "announcing: ")
        try step.check(
            tools, "dcprovision", ["handle-url", url], allowed: [Self.time, "home/.local/state/dcprovision/available"],
            again: { try ["handle-url", clientURL($0, unlock, line: "announcing: ")] })
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
    }
}

/// `dcprovision handle-url` for a client's identity token (`jwt`) keeps only the request id it
/// recorded first: stopped recording it (a file where the directory of ids goes), writing the
/// answer (a file where the client's spool goes; again after making a removed identity key afresh,
/// which goes again with the JWKS put back) or by a full disk (a file size limit), it leaves no
/// answer and nothing else; `dcclient jwt`, which opens the real handler and says its last
/// line, fails in one line, and asked again (a new id) gets its token.
@Suite("dcprovision handle-url jwt is all or nothing but its request id", .ownThreads, .timeLimit(.minutes(3)))
struct HandleIdentityAllOrNothingTests {
    static let seen = "home/.local/state/dcprovision/identity-requests"
    static let spool = Obstacle.file(
        at: "home/.local/share/dcclient/apps/dcclient/spool",
        "writing the answer: a file stands where the client's spool goes", status: 69, says: "spool")
    static let steps: [Obstacle] = [
        .file(
            at: seen, "recording the request id: a file stands where their directory goes", status: 69,
            says: "identity-requests"),
        spool,
        Obstacle(
            name: "writing the answer: the disk fills (a file size limit)", place: { _ in }, clear: { _ in },
            status: 69, says: "File too large", fileSizeLimit: 200),
        Obstacle(
            name: "writing the answer after making the identity key afresh: a file stands where the spool goes",
            place: { sandbox in
                try FileManager.default.removeItem(
                    atPath: sandbox.home + "/.local/state/dcprovision/identity-signing-key")
                try spool.place(sandbox)
            }, clear: spool.clear, status: 69, says: "spool"),
    ]

    @Test(
        "Each step of dcprovision handle-url jwt failing in turn leaves only its request id, and dcclient jwt again gets a token",
        arguments: steps)
    func failEachStep(step: Obstacle) throws {
        let tools = try Tools("handle-jwt-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let jwt = try step.check(
            tools, "dcclient", ["jwt", "--audience", "mail-web", "--scope", "openid"], allowedUnder: [Self.seen])
        #expect(jwt.stdoutText.split(separator: ".").count == 3, "\(jwt.stdoutText)")
    }
}

/// `dcprovision terminate` revokes at the CA first and never takes a revocation back; what
/// follows (retiring each client that holds the certificates) can fail, and running terminate
/// again completes it: stopped recording the retirement (a file where the policies' directory goes)
/// or revoking the client's tokens (a directory where the revocation list goes), the certificates
/// stay revoked, and the second run retires the client and finishes.
@Suite("dcprovision terminate errs toward revoked and completes when run again", .ownThreads, .timeLimit(.minutes(3)))
struct TerminateAgainTests {
    static let steps: [Obstacle] = [
        .file(
            at: "home/.local/state/dcprovision/policies",
            "recording the retirement: a file stands where the policies' directory goes", says: "policies"),
        .directory(
            at: "home/.local/state/dcprovision/verifier/revocations.json",
            "revoking the client's tokens: a directory stands where the revocation list goes", status: 65,
            says: "revocations.json"),
    ]

    @Test(
        "dcprovision terminate failing at a local step leaves the certificates revoked, and terminate again retires the client and completes",
        arguments: steps)
    func failLocalStep(step: Obstacle) throws {
        let tools = try Tools("terminate-again")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued"])
        try tools.check(
            "dcprovision", ["send", "--manifest", "issued/manifest.json", "--client-scheme", "org.example.dcclient"])
        // The credential counts as derived from a card: deriving needs one (TerminateTests has a
        // card stand-in); the CA's record of what it issued names the card's serial.
        let records = tools.sandbox.file("ca/credentials")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: records).first)
        var record = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: records + "/" + name)))
                as? [String: Any])
        record["cardSerial"] = "0A0B0C0D"
        try JSONSerialization.data(withJSONObject: record).write(to: URL(fileURLWithPath: records + "/" + name))
        let terminate = ["terminate", "--card-serial", "0A0B0C0D", "--testca", "ca"]

        try step.place(tools.sandbox)
        let failed = try tools.run("dcprovision", terminate)
        #expect(failed.status == step.status, "\(failed.stdoutText)\(failed.stderrText)")
        #expect(
            failed.stderrText.split(separator: "\n").count == 1 && failed.stderrText.contains(step.says),
            "\(failed.stderrText)")
        #expect(failed.stdoutText.contains("4 certificate(s) revoked (4 now)"), "\(failed.stdoutText)")
        let index = try readText(tools.sandbox.file("ca/index.txt"))
        #expect(index.split(separator: "\n").allSatisfy { $0.hasPrefix("R") }, "not all revoked: \(index)")
        try step.clear(tools.sandbox)

        let again = try tools.check("dcprovision", terminate)
        #expect(again.stdoutText.contains("(0 now)"), "\(again.stdoutText)")
        #expect(try readText(tools.sandbox.file("ca/index.txt")) == index, "a revocation is never taken back")
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("terminated"))
        let revocations = try readText(tools.sandbox.home + "/.local/state/dcprovision/verifier/revocations.json")
        #expect(revocations.contains("dcclient"), "the retired container: \(revocations)")
        // Complete: nobody holds them any more.
        #expect(try tools.check("dcprovision", terminate).stdoutText.contains("no client holds them"))
    }
}

/// The test CA's `crl`, `revoke` and `recover` each either complete or leave nothing but what must
/// not be undone: `crl` stopped writing its file (a directory where it goes, a full disk) leaves
/// only the CRL number it used up, and the next CRL carries a higher one; `revoke` stopped by a
/// full disk changes nothing, and stopped after index.txt (a directory where index.txt.attr goes)
/// leaves the certificate revoked (a revocation errs toward revoked), and revoke again says so;
/// `recover` stopped writing the pair (a directory where it goes, a full disk) leaves nothing.
@Suite("The test CA's crl, revoke and recover are all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct TestCAWritesAllOrNothingTests {
    /// A CA that issued one credential, whose first certificate's serial is returned.
    static func issued(_ tools: Tools, _ initArguments: [String] = []) throws -> String {
        try tools.check("dcprovision", ["testca", "init", "ca"] + initArguments)
        try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued", "--format", "pem"])
        let text = try tools.sandbox.run(
            try which("openssl"), ["x509", "-in", tools.sandbox.file("issued/encryption.pem"), "-noout", "-serial"]
        ).stdoutText
        return String(text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "=")[1])
    }

    static let crlSteps: [Obstacle] = [
        .directory(at: "ca.crl", "writing the CRL: a directory stands where it goes", says: "ca.crl"),
        .fileSizeLimit(300, "writing the CRL: the disk fills (a file size limit)"),
    ]

    @Test(
        "Each step of dcprovision testca crl failing in turn leaves only the CRL number used up, and crl again succeeds with a higher number",
        arguments: crlSteps)
    func failEachCRLStep(step: Obstacle) throws {
        let tools = try Tools("testca-crl-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "revoke", "ca", "--serial", try Self.issued(tools)])
        try tools.check("dcprovision", ["testca", "crl", "ca", "--out", "first.crl"])
        var used = ""
        let written = try step.check(
            tools, "dcprovision", ["testca", "crl", "ca", "--out", "ca.crl"], allowed: ["ca/crlnumber"],
            afterFailure: {
                used = try readText($0.file("ca/crlnumber")).trimmingCharacters(in: .whitespacesAndNewlines)
            })
        #expect(used == "2", "the number is drawn before the CRL is written")
        #expect(written.stdoutText.contains("CRL number 3 with 1 revoked"), "\(written.stdoutText)")
    }

    static let revokeSteps: [Obstacle] = [
        .fileSizeLimit(400, "recording: the disk fills (a file size limit)"),
        .directory(
            at: "ca/index.txt.attr", "recording: a directory stands where index.txt.attr goes", says: "index.txt"),
    ]

    @Test(
        "Each step of dcprovision testca revoke failing in turn changes nothing or leaves the certificate revoked, and revoke again succeeds",
        arguments: revokeSteps)
    func failEachRevokeStep(step: Obstacle) throws {
        let tools = try Tools("testca-revoke-all-or-nothing")
        defer { tools.sandbox.remove() }
        let serial = try Self.issued(tools)
        let before = try readText(tools.sandbox.file("ca/index.txt"))
        var revokedAlready = false
        let revoked = try step.check(
            tools, "dcprovision", ["testca", "revoke", "ca", "--serial", serial], allowed: ["ca/index.txt"],
            afterFailure: { sandbox in
                let index = try readText(sandbox.file("ca/index.txt"))
                // Unchanged, or the one line revoked: never anything else.
                revokedAlready = index != before
                if revokedAlready {
                    #expect(index.split(separator: "\n").filter { $0.hasPrefix("R") }.count == 1, "\(index)")
                }
            })
        // index.txt is published before index.txt.attr: only a failure after it leaves the revocation.
        #expect(revokedAlready == step.name.contains("index.txt.attr"), "revoked by the failed run: \(revokedAlready)")
        #expect(
            revoked.stdoutText.contains(revokedAlready ? "was revoked already" : "revoked \(serial)"),
            "\(revoked.stdoutText)")
        #expect(
            try readText(tools.sandbox.file("ca/index.txt")).split(separator: "\n").filter { $0.hasPrefix("R") }.count
                == 1)
    }

    static let recoverSteps: [Obstacle] = [
        .directory(at: "pair.pem", "writing the pair: a directory stands where it goes", says: "pair.pem"),
        .fileSizeLimit(500, "writing the pair: the disk fills (a file size limit)"),
    ]

    @Test(
        "Each step of dcprovision testca recover failing in turn leaves nothing, and recover again succeeds",
        arguments: recoverSteps)
    func failEachRecoverStep(step: Obstacle) throws {
        let tools = try Tools("testca-recover-all-or-nothing")
        defer { tools.sandbox.remove() }
        let made = try tools.sandbox.run(
            try which("openssl"),
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                tools.sandbox.file("recovery.key"), "-out", tools.sandbox.file("recovery.pem"), "-subj",
                "/CN=Key Recovery Officer", "-days", "30",
            ])
        #expect(made.status == 0, "\(made.stderrText)")
        let serial = try Self.issued(tools, ["--recovery-cert", "recovery.pem"])
        try step.check(
            tools, "dcprovision",
            ["testca", "recover", "ca", "--serial", serial, "--recovery-key", "recovery.key", "--out", "pair.pem"])
        #expect(try readText(tools.sandbox.file("pair.pem")).contains("PRIVATE KEY"))
    }
}
