import Foundation
import TestSupport
import Testing

/// The credential's own expiration date (what the provider gave it, `send --expires`), through the
/// real tools: a date already past is refused at send before anything is issued, and once it has
/// passed the credential is used nowhere (an auth token, the PKCS#11 module, `dcclient check`),
/// while its encryption key still opens old mail. Certificate validity has its own tests
/// (`ExpiryTests`, `CheckCommandTests`); here every certificate is valid for a year.
@Suite("The credential's expiration date: refused at send, enforced at use", .ownThreads, .timeLimit(.minutes(4)))
struct CredentialExpiryCommandTests {
    static let send = [
        "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
        "--client-scheme", "org.example.dcclient",
    ]

    static func iso(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }

    /// The names in `directory` (`ls -A`); empty when it does not exist.
    static func listing(_ directory: String) throws -> [String] {
        let result = try run("ls", ["-A", directory])
        return result.status == 0 ? result.stdoutText.split(separator: "\n").map(String.init) : []
    }

    @Test(
        "Attack: send --expires in the past exits 65 before the source is asked (index.txt unchanged, no spool file); a date to come is delivered"
    )
    func pastExpiryRefusedAtSend() throws {
        let tools = try Tools("past-expiry")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let index = tools.sandbox.file("ca/index.txt")
        let spool = tools.sandbox.dataHome + "/dcclient/apps/dcclient/spool"
        let before = (try? readText(index)) ?? ""
        for past in [Self.iso(Date() - 60), "2020-01-01"] {
            let refused = try tools.run("dcprovision", Self.send + ["--expires", past])
            #expect(refused.status == 65, "\(past): \(refused.stdoutText)\(refused.stderrText)")
            #expect(refused.stderrText.contains("--expires is in the past"), "\(refused.stderrText)")
            #expect(((try? readText(index)) ?? "") == before, "the test CA issued for --expires \(past)")
            #expect(try Self.listing(spool).isEmpty)
        }
        try tools.check("dcprovision", Self.send + ["--expires", Self.iso(Date() + 30 * 86400)])
        #expect(try readText(index) != before)
        #expect(try tools.check("dcclient", ["check"]).status == 0)
    }

    @Test(
        "Attack: once the credential's expiration date has passed (its certificates valid for a year), dcclient check and dcclient token exit 80 and the PKCS#11 module signs nothing; dcclient decrypt still opens mail to it"
    )
    func expiredCredentialNotUsed() async throws {
        let module = Binaries.directory + "/libdcclient-pkcs11.so"
        try #require(
            FileManager.default.fileExists(atPath: module),
            "the module is built by scripts/test: swift build --product dcclient-pkcs11")
        let tools = try Tools("expired-credential")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let expires = Date() + 30
        try tools.check("dcprovision", Self.send + ["--expires", Self.iso(expires)])

        let digest = try tools.sandbox.write("digest", String(repeating: "d", count: 32))
        func sign() throws -> ProcessResult {
            try tools.sandbox.run(
                "/usr/bin/pkcs11-tool",
                [
                    "--module", module, "--login", "--pin", "correct horse", "--sign", "--id", "02", "-m", "ECDSA",
                    "-i", digest, "-o", tools.sandbox.file("signature"),
                ])
        }
        // Before the date every use works: the oracles can say yes.
        let recipient = try tools.check("dcclient", ["show", "encryption", "--format", "pem"]).stdoutText
        try tools.sandbox.write("recipient.pem", recipient)
        try tools.sandbox.write("note.txt", "still readable\n")
        let encrypted = try run(
            "openssl",
            [
                "cms", "-encrypt", "-aes256", "-binary", "-in", tools.sandbox.file("note.txt"), "-outform", "DER",
                "-out", tools.sandbox.file("note.cms"), "-recip", tools.sandbox.file("recipient.pem"),
            ])
        #expect(encrypted.status == 0, "\(encrypted.stderrText)")
        #expect(try tools.run("dcclient", ["check"]).status == 0)
        #expect(try tools.run("dcclient", ["token", "--challenge", "c"]).status == 0)
        let signed = try sign()
        #expect(signed.status == 0, "\(signed.stderrText)")
        try #require(Date() < expires, "the checks before the expiration date took longer than 30 s")

        try await Task.sleep(for: .seconds(max(0, expires.timeIntervalSinceNow) + 1.5))
        let check = try tools.run("dcclient", ["check"])
        #expect(check.status == 80, "\(check.stdoutText)\(check.stderrText)")
        #expect(check.stderrText.contains("the credential expired"), "\(check.stderrText)")
        let line = check.stdoutText.split(separator: "\n").first { $0.hasPrefix("credential ") }
        #expect(line?.split(separator: " ").dropFirst().first == "expired", "\(check.stdoutText)")
        let token = try tools.run("dcclient", ["token", "--challenge", "c"])
        #expect(token.status == 80, "\(token.stdoutText)\(token.stderrText)")
        #expect(token.stdout.isEmpty)
        let refused = try sign()
        #expect(
            refused.status != 0 && refused.stderrText.contains("CKR_KEY_FUNCTION_NOT_PERMITTED"),
            "\(refused.stderrText)")
        // Old mail still opens: decrypting is not using the credential.
        let opened = try tools.run("dcclient", ["decrypt", "note.cms"])
        #expect(opened.status == 0 && opened.stdoutText == "still readable\n", "\(opened.stderrText)")
    }
}
