import DerivedCredentials
import Foundation
import ManagedClient
import SystemSupport
import TestSupport
import Testing

/// The one line a refusal prints, and nothing else.
private func oneLine(_ result: ProcessResult) -> Bool {
    result.stderrText.split(separator: "\n").count == 1
}

@Suite("Secret sources: empty, exposed, blocking and short secrets are refused", .ownThreads, .timeLimit(.minutes(3)))
struct SecretSourceTests {
    @Test("An empty passphrase file or environment variable is a usage error, in one line")
    func emptySecret() throws {
        let tools = try Tools("secret-empty", extra: ["DC_TEST_EMPTY_PIN": ""])
        defer { tools.sandbox.remove() }
        try tools.sandbox.write("pass.txt", "\n")
        let file = try tools.run(
            "dcclient",
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ])
        #expect(file.status == 64, "\(file.stderrText)")
        #expect(file.stderrText.contains("the secret is empty"))
        #expect(oneLine(file), "\(file.stderrText)")
        let environment = try tools.run(
            "dcprovision",
            [
                "objects", "pkcs11:token=None", "--module", "/nonexistent.so", "--login", "--pin-env",
                "DC_TEST_EMPTY_PIN",
            ])
        #expect(environment.status == 64, "\(environment.stderrText)")
        #expect(environment.stderrText.contains("the secret is empty"))
    }

    @Test("A secret file that group or other can read or write is refused, naming the file and its mode")
    func exposedSecretFile() throws {
        let tools = try Tools("secret-mode")
        defer { tools.sandbox.remove() }
        let path = try tools.sandbox.write("pass.txt", "correct horse\n")
        for mode: mode_t in [0o640, 0o604, 0o620, 0o602] {
            chmod(path, mode)
            let result = try tools.run(
                "dcclient",
                [
                    "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                    "--passphrase-file", path,
                ])
            #expect(result.status == 77, "\(String(mode, radix: 8)): \(result.stderrText)")
            #expect(result.stderrText.contains(path), "\(result.stderrText)")
            #expect(result.stderrText.contains("mode 0\(String(mode, radix: 8))"), "\(result.stderrText)")
            #expect(oneLine(result), "\(result.stderrText)")
        }
        #expect(!FileManager.default.fileExists(atPath: tools.sandbox.dataHome + "/dcclient/apps/dcclient/store"))
    }

    @Test("A FIFO nobody writes to does not block the tool: it reads as empty and is refused at once")
    func fifoWithoutWriter() throws {
        let tools = try Tools("secret-fifo")
        defer { tools.sandbox.remove() }
        let path = tools.sandbox.directory.file("pass.fifo")
        #expect(mkfifo(path, 0o600) == 0)
        let started = ContinuousClock.now
        let result = try tools.run(
            "dcclient",
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", path,
            ])
        #expect(result.status == 64, "\(result.stderrText)")
        #expect(ContinuousClock.now - started < .seconds(20))
    }

    @Test("A new store's passphrase needs 8 characters; an existing store unlocks with its own")
    func shortPassphrase() throws {
        let tools = try Tools("secret-short")
        defer { tools.sandbox.remove() }
        let initArguments = [
            "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
            "--passphrase-file", "pass.txt",
        ]
        try tools.sandbox.write("pass.txt", "seven77\n")
        let short = try tools.run("dcclient", initArguments)
        #expect(short.status == 64, "\(short.stderrText)")
        #expect(short.stderrText.contains("shorter than 8 characters"))
        #expect(oneLine(short), "\(short.stderrText)")
        // Eight characters, two of them non-ASCII (ten bytes): accepted.
        try tools.sandbox.write("pass.txt", "\u{FC}\u{FC}345678\n")
        try tools.check("dcclient", initArguments)
        try tools.check("dcclient", ["lock"])
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
    }

    @Test("A store made (by the library) with a short passphrase still unlocks with it")
    func shortPassphraseUnlocks() throws {
        let tools = try Tools("secret-short-unlock")
        defer { tools.sandbox.remove() }
        try ManagedClient(locations: XDGDirectories(environment: tools.sandbox.environment)).initialize(
            scheme: try URLScheme("org.example.dcclient"),
            providerScheme: try URLScheme("org.example.provider"), executable: Binaries.directory + "/dcclient",
            passphrase: SecretBytes(Array("short".utf8)))
        try tools.sandbox.write("pass.txt", "short\n")
        try tools.check("dcclient", ["lock"])
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
    }
}
