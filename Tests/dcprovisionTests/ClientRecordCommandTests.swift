import CredentialDelivery
import DerivedCredentials
import Foundation
import ProviderService
import SystemSupport
import TestSupport
import Testing

/// The client's own records attacked as its user would attack them, through the real `dcclient`
/// and `dcprovision`: the policy in force (docs/PROTOCOL.md, Policies) and the deliveries kept out
/// as stale (Messages).
@Suite("The client's policy record and stale deliveries, through the real tools", .ownThreads, .timeLimit(.minutes(3)))
struct ClientRecordCommandTests {
    static let scheme = ["--client-scheme", "org.example.dcclient"]
    static let send = [
        "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
        "--client-scheme", "org.example.dcclient",
    ]

    @Test(
        "Attack: store/policy.json edited to authorized, replaced by an older genuine policy or by another client's, or removed: every read exits 77 saying the record is damaged; dcprovision authorize repairs it"
    )
    func policyRecordAttacks() throws {
        let tools = try Tools("policy-record")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", Self.send + ["--name", "Work"])
        try tools.sandbox.write("note.txt", "kept\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        try tools.sandbox.run(Binaries.directory + "/dcclient", ["pasteboard", "copy"], stdin: Array("copied".utf8))
        let record = tools.sandbox.dataHome + "/dcclient/apps/dcclient/store/policy.json"
        let older = try readBytes(record)  // authorized, signed by the provider
        try tools.check("dcprovision", ["unauthorize"] + Self.scheme + ["--message", "Device out of compliance"])
        // The app locked itself on acknowledging; unlocked again, only the authorization stands in the way.
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        let genuine = try readBytes(record)
        let text = String(decoding: genuine, as: UTF8.self)
        #expect(text.contains("state=unauthorized"), "\(text)")
        // A policy the provider really signed, for another client.
        let provider = try CredentialService(
            brand: "Example", callbackScheme: try URLScheme("org.example.provider"),
            locations: XDGDirectories(environment: tools.sandbox.environment), open: { _, _ in })
        let foreign = try provider.policyURL(
            ClientPolicy(state: .authorized, sequence: 99), clientId: try ClientID("someone-else"),
            clientScheme: .exampleClient)
        let attacks: [(String, String?)] = [
            ("state edited", text.replacingOccurrences(of: "state=unauthorized", with: "state=authorized")),
            (
                "the previous version's unsigned record, state 1",
                "{\"policy\":{\"state\":1,\"message\":\"\",\"autoLock\":900,\"sequence\":9},\"signed\":1}"
            ),
            ("an older genuine policy", String(decoding: older, as: UTF8.self)),
            ("another client's policy", "{\"url\":\"\(foreign)\"}"),
            ("removed", nil),
        ]
        for (attack, contents) in attacks {
            unlink(record)
            if let contents { try Data(contents.utf8).write(to: URL(fileURLWithPath: record)) }
            for command in [
                ["files", "get", "note"], ["files", "ls"], ["pasteboard", "paste"], ["list"],
                ["show", "authentication"],
            ] {
                let refused = try tools.run("dcclient", command)
                #expect(refused.status == 77, "\(attack): \(command): \(refused.status) \(refused.stderrText)")
                #expect(
                    refused.stderrText.contains("the policy record is damaged"),
                    "\(attack): \(command): \(refused.stderrText)")
                #expect(refused.stdout.isEmpty, "\(attack): \(command)")
            }
        }
        // The genuine record back: the provider's state and message.
        try Data(genuine).write(to: URL(fileURLWithPath: record))
        let unauthorized = try tools.run("dcclient", ["files", "get", "note"])
        #expect(unauthorized.status == 77)
        #expect(unauthorized.stderrText.contains("the app is unauthorized: Device out of compliance"))
        // Edited again; the provider's next policy replaces the record, and all is back.
        try Data(text.replacingOccurrences(of: "state=unauthorized", with: "state=authorized").utf8).write(
            to: URL(fileURLWithPath: record))
        try tools.check("dcprovision", ["authorize"] + Self.scheme)
        #expect(try tools.check("dcclient", ["files", "get", "note"]).stdoutText == "kept\n")
        #expect(try tools.check("dcclient", ["pasteboard", "paste"]).stdoutText == "copied")
    }

    @Test(
        "Attack: a delivery kept out as stale, replayed, exits 77 again with the same message; dcclient handle-url --allow-older installs it afterwards; the kept spool files stay within the bound"
    )
    func staleDeliveryReplayed() throws {
        let tools = try Tools("stale-replay")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let spool = tools.sandbox.dataHome + "/dcclient/apps/dcclient/spool"
        // The client locks after the provider last saw it available: the provider seals and opens
        // the older delivery, which the locked client cannot install yet (its spool file stays).
        try tools.check("dcclient", ["lock"])
        try Data("{\"servicesAvailable\":true}\n".utf8).write(
            to: URL(fileURLWithPath: tools.sandbox.dataHome + "/dcclient/apps/dcclient/status.json"))
        let missed = try tools.run("dcprovision", Self.send + ["--name", "Older"])
        #expect(missed.status == 69, "\(missed.stderrText)")
        let opened = try #require(
            (missed.stdoutText + missed.stderrText).split(separator: "\n").first {
                $0.contains("opening org.example.dcclient:/deliver?")
            })
        let older = String(opened[opened.range(of: "org.example.dcclient:/deliver?")!.lowerBound...])
        // Unlocked, the newer one is installed.
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        try tools.check("dcprovision", Self.send + ["--name", "Newer"])
        #expect(try tools.check("dcclient", ["list"]).stdoutText.hasPrefix("Newer "))
        // The older delivery arrives late: stale, 77; and the same URL again gets the same answer.
        let first = try tools.run("dcclient", ["handle-url", older])
        #expect(first.status == 77, "\(first.stdoutText)\(first.stderrText)")
        #expect(first.stderrText.contains("is older than the installed credential"), "\(first.stderrText)")
        for _ in 0..<2 {
            let again = try tools.run("dcclient", ["handle-url", older])
            #expect(again.status == 77, "\(again.stdoutText)\(again.stderrText)")
            #expect(again.stderrText == first.stderrText)
        }
        let kept = try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".stale") }
        #expect(kept.count == 1, "\(kept)")
        #expect(try tools.check("dcclient", ["list"]).stdoutText.hasPrefix("Newer "))
        // The user chooses it by hand: installed; its kept spool file is gone.
        let chosen = try tools.run("dcclient", ["handle-url", "--allow-older", older])
        #expect(chosen.status == 0, "\(chosen.stdoutText)\(chosen.stderrText)")
        #expect(try tools.check("dcclient", ["list"]).stdoutText.hasPrefix("Older "))
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".stale") }.isEmpty)
    }
}
