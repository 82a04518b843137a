import Foundation
import TestSupport
import Testing

/// The numbers docs/SECURITY.md and docs/PROTOCOL.md promise about the tools' input, written out
/// here as the documents write them, never computed from the constant that holds them: a constant
/// changed without the documents fails these tests.
@Suite("Documented limits: through dcclient and dcprovision", .ownThreads, .timeLimit(.minutes(2)))
struct DocumentedLimitsTests {
    @Test("dcclient init: a new store's passphrase of 7 characters is refused (exit 64), one of 8 is taken")
    func passphraseLength() throws {
        let tools = try Tools("limits-passphrase")
        defer { tools.sandbox.remove() }
        let arguments = [
            "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
            "--passphrase-file",
        ]
        try tools.sandbox.write("seven.txt", "1234567\n")
        try tools.sandbox.write("eight.txt", "12345678\n")
        let short = try tools.run("dcclient", arguments + ["seven.txt"])
        #expect(short.status == 64, "\(short.stderrText)")
        #expect(short.stderrText.contains("shorter than 8 characters"))
        try tools.check("dcclient", arguments + ["eight.txt"])
    }

    @Test("dcprovision policy --auto-lock: 1 s to 604800 s (a week); 0 and 604801 are usage errors (exit 64)")
    func autoLockRange() throws {
        let tools = try Tools("limits-autolock")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let policy = ["policy", "--client-scheme", "org.example.dcclient", "--auto-lock"]
        for seconds in ["0", "604801"] {
            let refused = try tools.run("dcprovision", policy + [seconds])
            #expect(refused.status == 64, "\(seconds): \(refused.stderrText)")
        }
        for seconds in ["1", "604800"] {
            try tools.check("dcprovision", policy + [seconds])
        }
    }
}
