import Foundation
import TestSupport
import Testing

/// `dcclient init` either sets the app up or leaves nothing behind: each step it takes is made to
/// fail in turn by a real obstacle (the kernel keyring refusing the unlocked key with the runtime
/// directory on disk, a damaged provider registration, a directory where the client's registration
/// goes, a file where its spool goes), and after each the app's container, its registration and any
/// unlocked key are gone, and the same command, run again once the obstacle is removed, succeeds.
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
            name: "unlocking: the kernel keyring refuses the key and the runtime directory is on disk",
            place: { _ in }, clear: { _ in }, revokedKeyring: true),
    ]

    /// The files under the sandbox's home and runtime directory (no directories).
    static func files(_ sandbox: Sandbox) -> [String] {
        var found: [String] = []
        for root in [sandbox.home, sandbox.runtimeDirectory] {
            let enumerator = FileManager.default.enumerator(atPath: root)
            while let name = enumerator?.nextObject() as? String {
                var status = stat()
                if lstat(root + "/" + name, &status) == 0 && (status.st_mode & S_IFMT) != S_IFDIR {
                    found.append(root + "/" + name)
                }
            }
        }
        return found.sorted()
    }

    @Test("Each step of dcclient init failing in turn leaves nothing, and init again succeeds", arguments: steps)
    func failEachStep(step: Step) throws {
        if step.revokedKeyring {
            try #require(
                UnlockedKeyCommandTests.temporaryDirectoryOnDisk, "needs a runtime directory on persistent storage")
        }
        let tools = try Tools("init-all-or-nothing")
        defer { tools.sandbox.remove() }
        _ = try tools.sandbox.write("pass.txt", "correct horse\n")
        let initialize = [
            "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
            "--passphrase-file", "pass.txt",
        ]
        try step.place(tools.sandbox)
        let before = Self.files(tools.sandbox)
        let failed =
            step.revokedKeyring
            ? try UnlockedKeyCommandTests.inRevokedKeyring(tools, initialize) : try tools.run("dcclient", initialize)
        #expect(failed.status != 0, "\(failed.stdoutText)")
        // keyctl session says which keyring it joined; dcclient's own say is one line.
        #expect(
            failed.stderrText.split(separator: "\n").filter { !$0.hasPrefix("Joined session keyring") }.count == 1,
            "\(failed.stderrText)")
        #expect(Self.files(tools.sandbox) == before, "left behind: \(failed.stderrText)")
        #expect(try tools.run("dcclient", ["status"]).status == 66, "the app counts as set up")
        try step.clear(tools.sandbox)
        let again = try tools.run("dcclient", initialize)
        #expect(again.status == 0, "\(again.stderrText)")
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("unlocked:         yes"))
    }
}
