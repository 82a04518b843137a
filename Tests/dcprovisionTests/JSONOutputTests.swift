import Foundation
import TestSupport
import Testing

/// `--json` (docs/JSON.md): every command that prints data prints one document,
/// `{"version": 1, "<kind>": …}`, on standard output alone, and no secret is in it.
@Suite("JSON output: one versioned document per command, no secrets", .timeLimit(.minutes(3)))
struct JSONOutputTests {
    @Test("status, dcclient list and dcclient show: versioned documents that agree with each other and hold no key")
    func deliveryCommands() throws {
        let tools = try Tools("json-output")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        // Nothing installed yet: the credential is null, not an error.
        let empty = try tools.check("dcclient", ["list", "--json"])
        #expect(try jsonPayload(empty.stdout, "credential") is NSNull)
        let noSends = try tools.check("dcprovision", ["status", "--json"])
        #expect((try jsonPayload(noSends.stdout, "sends") as? [Any])?.isEmpty == true)

        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca",
                "--option", "common-name=Dana Json", "--option", "escrow-history=1",
            ])
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcclient", ["request"])

        let list = try tools.check("dcclient", ["list", "--json"])
        let credential = try #require(try jsonPayload(list.stdout, "credential") as? [String: Any])
        let entries = try #require(credential["entries"] as? [[String: Any]])
        #expect(entries.compactMap { $0["tag"] as? String } == ["authentication", "signing", "encryption", "escrow"])
        #expect(entries.first { $0["tag"] as? String == "escrow" }?["keyHistory"] as? Int == 1)
        #expect(!list.stdoutText.contains("PRIVATE") && !list.stdoutText.contains("privateKey"))

        let show = try tools.check("dcclient", ["show", "authentication", "--json"])
        let entry = try #require(try jsonPayload(show.stdout, "entry") as? [String: Any])
        let certificate = try #require(entry["certificate"] as? [String: Any])
        let listed = try #require(entries.first?["certificate"] as? [String: Any])
        #expect(certificate["subject"] as? String == listed["subject"] as? String)
        #expect((certificate["subject"] as? String)?.contains("CN=Dana Json") == true)
        // Dates are ISO 8601 UTC.
        let notAfter = try #require(certificate["notAfter"] as? String)
        #expect(ISO8601DateFormatter().date(from: notAfter) != nil, "\(notAfter)")

        // A second send, queued while the client is locked: its ledger record holds a result key.
        try tools.check("dcclient", ["lock"])
        try tools.check(
            "dcprovision",
            [
                "send", "--queue", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
                "--client-scheme", "org.example.dcclient",
            ])

        let status = try tools.check("dcprovision", ["status", "--json"])
        #expect(status.stderr.isEmpty, "messages belong on stderr, and there should be none: \(status.stderrText)")
        let sends = try #require(try jsonPayload(status.stdout, "sends") as? [[String: Any]])
        #expect(Set(sends.compactMap { $0["state"] as? String }) == ["ok", "queued"])
        for send in sends {
            #expect(send["clientScheme"] as? String == "org.example.dcclient")
            #expect(
                Set(send.keys).isSubset(of: [
                    "request", "created", "completed", "clientScheme", "credentialName", "state",
                ]))
        }
        let queued = try #require(sends.first { $0["state"] as? String == "queued" }?["request"] as? String)
        // The ledger holds the queued request's result key: the JSON must not carry it in any form.
        let ledger = tools.sandbox.stateHome + "/dcprovision/requests/\(queued).json"
        let record = try #require(
            try JSONSerialization.jsonObject(with: Data(try readBytes(ledger))) as? [String: Any])
        let resultKey = try #require(record["resultKey"] as? String)
        let keyBytes = try #require(Data(base64Encoded: resultKey))
        #expect(SecretEncodings.found(Array(keyBytes), in: status.stdout).isEmpty)
        #expect(!status.stdoutText.contains("resultKey"))
    }
}
