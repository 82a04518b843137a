import Foundation
import TestSupport
import Testing

/// A send to a client the operator never paired is refused as its requests are (`refusedMessage`,
/// exit 77), and before anything is made: `CredentialService.checkCanSend`, which `RefusedSendTests`
/// holds for a locked client, checks the pairing first.
@Suite("A send to a client that was never paired makes nothing", .ownThreads, .timeLimit(.minutes(3)))
struct UnpairedSendTests {
    /// The names in `directory`, `ls -A` as the oracle; empty when it does not exist.
    static func listing(_ directory: String) throws -> [String] {
        let result = try run("ls", ["-A", directory])
        return result.status == 0 ? result.stdoutText.split(separator: "\n").map(String.init) : []
    }

    @Test(
        "Attack: a send to a client the operator never paired (or that was set up afresh since) exits 77 before the source is asked: index.txt unchanged, no spool file, no ledger record"
    )
    func unpairedClientIssuesNothing() throws {
        let tools = try Tools("unpaired-send")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        let index = tools.sandbox.file("ca/index.txt")
        let spool = tools.sandbox.dataHome + "/dcclient/apps/dcclient/spool"
        let ledger = tools.sandbox.stateHome + "/dcprovision/requests"
        let send = [
            "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
            "--client-scheme", "org.example.dcclient",
        ]
        func expectNothingMade(_ before: String, _ location: SourceLocation = #_sourceLocation) throws {
            #expect(
                ((try? readText(index)) ?? "") == before, "the test CA issued for a refused send",
                sourceLocation: location)
            #expect(try Self.listing(spool).isEmpty, "a spool file appeared", sourceLocation: location)
            #expect(try Self.listing(ledger).isEmpty, "the provider recorded a request", sourceLocation: location)
        }

        // Registered, unlocked, never paired.
        let refused = try tools.run("dcprovision", send)
        #expect(refused.status == 77, "\(refused.stdoutText)\(refused.stderrText)")
        #expect(refused.stderrText.contains("is not paired with this provider"), "\(refused.stderrText)")
        #expect(!refused.stdoutText.contains("sealed"), "\(refused.stdoutText)")
        try expectNothingMade("")
        // Queued sends too: nothing is sealed for an unpaired client, not even to wait.
        try tools.check("dcclient", ["lock"])
        #expect(try tools.run("dcprovision", send + ["--queue"]).status == 77)
        try expectNothingMade("")
        // (Its availability notice is refused too, since the provider does not know it: no status.)
        _ = try tools.run("dcclient", ["unlock", "--passphrase-file", "pass.txt"])

        // Paired, the same send is delivered (the oracle can say yes).
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcprovision", send)
        let issued = try readText(index)
        #expect(!issued.isEmpty)

        // Set up afresh (another signing key) and registered again: not the client that was paired.
        try FileManager.default.removeItem(atPath: tools.sandbox.dataHome + "/dcclient")
        try tools.setUpClient()
        let ledgerBefore = try Self.listing(ledger)
        let changed = try tools.run("dcprovision", send)
        #expect(changed.status == 77, "\(changed.stdoutText)\(changed.stderrText)")
        #expect(changed.stderrText.contains("registration changed since it was paired"), "\(changed.stderrText)")
        #expect(try readText(index) == issued, "the test CA issued for a client whose registration changed")
        #expect(try Self.listing(spool).isEmpty)
        #expect(try Self.listing(ledger) == ledgerBefore)
    }
}
