import Foundation
import TestSupport
import Testing

/// Where `dcclient unlock` may put the unlocked store key when the kernel keyring will not take it
/// (the fallback): only a runtime directory in memory, and only until the auto-lock deadline,
/// whether or not any dcclient runs again. The kernel is made to refuse as it does for a process
/// whose session keyring cannot take keys: each such dcclient runs in a fresh session keyring that
/// `keyctl revoke @s` revoked first.
@Suite("The unlocked key's fallback file: only in memory, gone at its deadline", .ownThreads, .timeLimit(.minutes(3)))
struct UnlockedKeyCommandTests {
    /// Runs `dcclient ARGUMENTS` in a session keyring of its own that the kernel refuses keys in.
    static func inRevokedKeyring(_ tools: Tools, _ arguments: [String]) throws -> ProcessResult {
        try tools.sandbox.run(
            try which("keyctl"),
            [
                "session", "-", "/bin/sh", "-c", "keyctl revoke @s >/dev/null && exec \"$0\" \"$@\"",
                Binaries.directory + "/dcclient",
            ] + arguments, timeout: 120)
    }

    /// The names in `directory` (`ls -A`); empty when it does not exist.
    static func listing(_ directory: String) throws -> [String] {
        let result = try run("ls", ["-A", directory])
        return result.status == 0 ? result.stdoutText.split(separator: "\n").map(String.init) : []
    }

    static let temporaryDirectoryOnDisk =
        ["tmpfs", "ramfs", nil].contains(
            MemoryDirectory.fileSystemType(NSTemporaryDirectory())) == false

    @Test(
        "Attack: with the kernel keyring refusing, dcclient unlock writes no key to a runtime directory on persistent storage (stat -f: not a tmpfs): exit 69, the directory empty",
        .enabled(if: temporaryDirectoryOnDisk))
    func noKeyFileOnDisk() throws {
        let tools = try Tools("unlock-on-disk")
        defer { tools.sandbox.remove() }
        let type = MemoryDirectory.fileSystemType(tools.sandbox.runtimeDirectory)
        try #require(type != nil && type != "tmpfs" && type != "ramfs", "the sandbox is on \(type ?? "?")")
        try tools.setUpClient()
        try tools.check("dcclient", ["lock"])
        let unlocked = try Self.inRevokedKeyring(tools, ["unlock", "--passphrase-file", "pass.txt"])
        #expect(unlocked.status == 69, "\(unlocked.stdoutText)\(unlocked.stderrText)")
        #expect(unlocked.stderrText.contains("not on a tmpfs or ramfs"), "\(unlocked.stderrText)")
        #expect(try Self.listing(tools.sandbox.runtimeDirectory + "/dcclient").isEmpty)
        #expect(try tools.run("dcclient", ["status"]).stdoutText.contains("unlocked:         no"))
    }

    @Test(
        "Attack: with the kernel keyring refusing and the runtime directory on a tmpfs, the key file dcclient unlock wrote is gone at the auto-lock deadline with no dcclient running (test -e as the oracle)",
        .enabled(if: MemoryDirectory.available))
    func keyFileGoneAtDeadline() async throws {
        let memory = try MemoryDirectory("unlock-in-memory")
        defer { memory.remove() }
        let tools = try Tools("unlock-in-memory", extra: ["XDG_RUNTIME_DIR": memory.path])
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["policy", "--client-scheme", "org.example.dcclient", "--auto-lock", "8"])
        try tools.check("dcclient", ["lock"])
        let unlocked = try Self.inRevokedKeyring(tools, ["unlock", "--passphrase-file", "pass.txt"])
        #expect(unlocked.status == 0, "\(unlocked.stdoutText)\(unlocked.stderrText)")
        let keys = try Self.listing(memory.path + "/dcclient").filter { $0.hasSuffix(".key") }
        try #require(keys.count == 1, "\(keys)")
        let file = memory.path + "/dcclient/" + keys[0]
        let deadline = try readBytes(file).prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }
        #expect(Double(deadline) - Date().timeIntervalSince1970 <= 8)
        // No dcclient runs from here on: every one started above has exited.
        try await Task.sleep(for: .seconds(max(0, Double(deadline) - Date().timeIntervalSince1970 + 1.5)))
        #expect(try run("test", ["-e", file]).status != 0, "the key file outlived the auto-lock deadline")
    }

    @Test(
        "A test's sandbox, removed, takes its clients' unlocked keys out of the session keyring (keyctl search, the key's name from sha256sum), so a run does not use up the user's 200 keys"
    )
    func sandboxRemovalForgetsTheKey() throws {
        let tools = try Tools("unlock-forgotten")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        let container = try run("realpath", [tools.sandbox.file("home/.local/share/dcclient/apps/dcclient")])
        let digest = try run(
            "/bin/sh", ["-c", "printf %s \"$0\" | sha256sum", container.stdoutText.trimmingCharacters(in: .newlines)])
        let description = "derived-credentials:" + digest.stdoutText.prefix(32)
        func search() throws -> Int32 { try run(try which("keyctl"), ["search", "@s", "user", description]).status }
        #expect(try search() == 0, "no key \(description) in the session keyring after dcclient init")
        tools.sandbox.remove()
        #expect(try search() != 0, "the key \(description) outlived its sandbox")
    }
}
