import Foundation
import TestSupport
import Testing

/// The client's container in a sandbox set up by `Tools.setUpClient()` (relative to the sandbox's root).
let clientContainer = "home/.local/share/dcclient/apps/dcclient"

/// `dcclient unregister` either unregisters or leaves things as they were: stopped while rewriting
/// mimeapps.list (a directory where it goes), after it removed the desktop entry and the launcher,
/// it puts both back, and the registration stays; cleared, unregister succeeds.
@Suite("dcclient unregister is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct ClientUnregisterAllOrNothingTests {
    @Test("dcclient unregister stopped at mimeapps.list puts back the desktop entry and the launcher it removed")
    func stoppedAtTheDefaults() throws {
        let tools = try Tools("unregister-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        let step = Obstacle.directory(
            at: "home/.config/mimeapps.list", "taking the default back: a directory stands where mimeapps.list goes",
            says: "mimeapps.list")
        try step.check(tools, "dcclient", ["unregister"])
        #expect(
            !FileManager.default.fileExists(
                atPath: tools.sandbox.file("home/.local/share/dc-handlers/org.example.dcclient")))
    }
}

/// `dcclient unlock` unlocks or leaves the lock as it was: stopped while publishing its status (a
/// directory where status.json goes), it takes its key back, so the client stays locked, or, unlocked
/// already, stays unlocked with the key it had; cleared, unlock succeeds. `dcclient lock` errs toward
/// locked: stopped at the same step, the key is gone all the same, and the next lock publishes it.
@Suite("dcclient unlock is all or nothing; lock errs toward locked", .ownThreads, .timeLimit(.minutes(3)))
struct LockAllOrNothingTests {
    static let status = Obstacle.directory(
        at: clientContainer + "/status.json", "publishing the status: a directory stands where status.json goes",
        says: "status.json")

    @Test(
        "dcclient unlock stopped at its status takes its key back: a locked client stays locked, an unlocked one unlocked"
    )
    func unlockStoppedAtTheStatus() throws {
        let tools = try Tools("unlock-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcclient", ["lock"])
        let unlock = ["unlock", "--passphrase-file", "pass.txt"]
        try Self.status.check(
            tools, "dcclient", unlock,
            afterFailure: { _ in
                let status = try tools.check("dcclient", ["status"]).stdoutText
                #expect(status.contains("(locked)"), "\(status)")
            })
        #expect(!(try tools.check("dcclient", ["status"]).stdoutText.contains("(locked)")))
        // Unlocked already: the failed unlock leaves the key of the one before it.
        try Self.status.check(
            tools, "dcclient", unlock,
            afterFailure: { _ in
                let status = try tools.check("dcclient", ["status"]).stdoutText
                #expect(!status.contains("(locked)"), "\(status)")
                // The store opens: the pasteboard is only empty (66), not locked (69).
                let paste = try tools.run("dcclient", ["pasteboard", "paste"])
                #expect(paste.status == 66, "\(paste.stderrText)")
            })
    }

    @Test(
        "dcclient lock stopped at its status is locked all the same (the store cannot be read), and lock again publishes it"
    )
    func lockStoppedAtTheStatus() throws {
        let tools = try Tools("lock-toward-locked")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try Self.status.place(tools.sandbox)
        let failed = try tools.run("dcclient", ["lock"])
        #expect(failed.status == 73, "\(failed.stderrText)")
        #expect(failed.stderrText.split(separator: "\n").count == 1 && failed.stderrText.contains("status.json"))
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("(locked)"))
        let read = try tools.run("dcclient", ["pasteboard", "paste"])
        #expect(read.status == 69 && read.stderrText.contains("locked"), "\(read.stderrText)")
        try Self.status.clear(tools.sandbox)
        try tools.check("dcclient", ["lock"])
        let status = try String(contentsOfFile: tools.sandbox.file(clientContainer + "/status.json"), encoding: .utf8)
        #expect(status.contains("\"servicesAvailable\":false"), "\(status)")
    }
}

/// A delivery is installed or not at all: the client's handler stopped after it replaced the
/// credential (a file stands where its record of handled requests goes) takes the credential back,
/// so `dcclient list` shows none and the container is as it was; `send` says the handler did not
/// complete (exit 69); cleared, the same send installs.
@Suite("dcclient handle-url installs a delivery all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct DeliveryAllOrNothingTests {
    @Test(
        "A delivery whose record cannot be written is taken back: no credential, the container as it was, and send again installs"
    )
    func stoppedAtTheRecord() throws {
        let tools = try Tools("delivery-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let processed = tools.sandbox.file(clientContainer + "/store/processed")
        try Data("x".utf8).write(to: URL(fileURLWithPath: processed))
        // The container alone: the provider's side records the request and its outcome.
        func container() throws -> [String: Data?] {
            try StateTree(tools.sandbox).entries.filter { $0.key.hasPrefix(clientContainer + "/") }
        }
        let before = try container()
        let send = [
            "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
            "--client-scheme", "org.example.dcclient",
        ]
        let failed = try tools.run("dcprovision", send)
        #expect(failed.status == 69, "\(failed.stderrText)")
        #expect(failed.stderrText.contains("store/processed"), "\(failed.stderrText)")
        #expect(failed.stderrText.contains("did not complete (exited(73))"), "\(failed.stderrText)")
        let after = try container()
        let changed = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }.sorted()
        // The spool file the provider wrote stays for the next try of the same URL; nothing else.
        #expect(changed.allSatisfy { $0.hasPrefix(clientContainer + "/spool/") }, "\(changed)")
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("no credential installed"))

        try FileManager.default.removeItem(atPath: processed)
        try tools.check("dcprovision", send)
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
    }
}

/// The secure pasteboard keeps its text or takes the new one whole: a copy stopped by a full disk
/// (`prlimit --fsize`) leaves the text copied before it.
@Suite("dcclient pasteboard copy is all or nothing", .ownThreads, .timeLimit(.minutes(3)))
struct PasteboardAllOrNothingTests {
    @Test("A pasteboard copy stopped by a full disk (exit 74, one line) leaves the text copied before it")
    func fullDisk() throws {
        let tools = try Tools("pasteboard-all-or-nothing")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let copy = Binaries.directory + "/dcclient"
        #expect(try tools.sandbox.run(copy, ["pasteboard", "copy"], stdin: Array("old text".utf8)).status == 0)
        let before = try StateTree(tools.sandbox)
        let big = Array(repeating: UInt8(ascii: "a"), count: 64 * 1024)
        let failed = try tools.sandbox.run(
            try which("prlimit"), ["--fsize=4096", copy, "pasteboard", "copy"], stdin: big, timeout: 60)
        #expect(failed.status == 74, "\(failed.stderrText)")
        #expect(failed.stderrText.split(separator: "\n").count == 1, "\(failed.stderrText)")
        #expect(try StateTree(tools.sandbox).changes(since: before) == [])
        #expect(try tools.check("dcclient", ["pasteboard", "paste"]).stdoutText == "old text")
    }
}

/// `dcclient request` writes nothing before its URL goes out but the provider's pin; stopped
/// there (a full disk, through `prlimit --fsize`), nothing is left, and once paired the same
/// request goes out and the delivery is installed.
@Suite("dcclient request is all or nothing until its URL goes out", .ownThreads, .timeLimit(.minutes(3)))
struct RequestAllOrNothingTests {
    @Test("dcclient request stopped by a full disk while pinning the provider leaves nothing, and asks once paired")
    func stoppedAtThePin() throws {
        let tools = try Tools("request-all-or-nothing")
        defer { tools.sandbox.remove() }
        // The client set up before the provider: nothing pinned yet.
        try tools.setUpClient()
        try tools.setUpProvider()
        let before = try StateTree(tools.sandbox)
        let failed = try tools.sandbox.run(
            try which("prlimit"), ["--fsize=16", Binaries.directory + "/dcclient", "request"], timeout: 60)
        #expect(failed.status == 74, "\(failed.stderrText)")
        #expect(failed.stderrText.split(separator: "\n").count == 1, "\(failed.stderrText)")
        #expect(failed.stderrText.contains("File too large"), "\(failed.stderrText)")
        #expect(try StateTree(tools.sandbox).changes(since: before) == [])
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcprovision", ["authorize", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcclient", ["request"])
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("authentication"))
    }
}
