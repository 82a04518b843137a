import Foundation
import TestSupport
import Testing

/// `--json` (docs/JSON.md): every command that prints data prints one document,
/// `{"version": 1, "<kind>": …}`, on standard output alone, and no secret is in it.
@Suite("JSON output: one versioned document per command, no secrets", .ownThreads, .timeLimit(.minutes(3)))
struct JSONOutputTests {
    @Test(
        "status, dcclient status, dcclient list and dcclient show: versioned documents that agree with each other and hold no key"
    )
    func deliveryCommands() throws {
        let tools = try Tools("json-output")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        // Not ready (no policy from a provider yet): the credential cannot be listed (policyNotReady, 69).
        let notListed = try tools.run("dcclient", ["list", "--json"])
        #expect(notListed.status == 69, "\(notListed.stderrText)")
        #expect(notListed.stdout.isEmpty)
        let noSends = try tools.check("dcprovision", ["status", "--json"])
        let nothing = try #require(try jsonPayload(noSends.stdout, "status") as? [String: Any])
        #expect((nothing["sends"] as? [Any])?.isEmpty == true)
        #expect((nothing["clients"] as? [Any])?.isEmpty == true)
        // Not ready: no policy yet, so no state is claimed (absent, not a default).
        let notReady = try tools.check("dcclient", ["status", "--json"])
        let before = try #require(try jsonPayload(notReady.stdout, "status") as? [String: Any])
        #expect(before["ready"] as? Bool == false)
        #expect(before["secureServices"] as? String == "unavailable")
        #expect(before["authState"] == nil && before["credential"] == nil, "\(before)")

        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca",
                "--option", "common-name=Dana Json", "--option", "escrow-history=1",
            ])
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try tools.check("dcprovision", ["authorize", "--client-scheme", "org.example.dcclient"])
        // Ready and authorized, nothing installed yet: the credential is null, not an error.
        let empty = try tools.check("dcclient", ["list", "--json"])
        #expect(try jsonPayload(empty.stdout, "credential") is NSNull)
        try tools.check("dcclient", ["request"])

        let list = try tools.check("dcclient", ["list", "--json"])
        let credential = try #require(try jsonPayload(list.stdout, "credential") as? [String: Any])
        let entries = try #require(credential["entries"] as? [[String: Any]])
        #expect(entries.compactMap { $0["tag"] as? String } == ["authentication", "signing", "encryption", "escrow"])
        #expect(entries.first { $0["tag"] as? String == "escrow" }?["keyHistory"] as? Int == 1)
        #expect(!list.stdoutText.contains("PRIVATE") && !list.stdoutText.contains("privateKey"))

        // Paired and asked: the client has its first policy (authorized) and acknowledged it.
        let ready = try tools.check("dcclient", ["status", "--json"])
        let clientView = try #require(try jsonPayload(ready.stdout, "status") as? [String: Any])
        #expect(clientView["ready"] as? Bool == true)
        #expect(clientView["authState"] as? String == "authorized")
        #expect(clientView["secureServices"] as? String == "available")
        #expect(clientView["secureFileIOPolicy"] as? String == "required")
        let shown = try #require(clientView["credential"] as? [String: Any])
        #expect(shown["name"] as? String == credential["name"] as? String)
        #expect(!ready.stdoutText.contains("PRIVATE") && !ready.stdoutText.contains("privateKey"))

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
        let document = try #require(try jsonPayload(status.stdout, "status") as? [String: Any])
        let sends = try #require(document["sends"] as? [[String: Any]])
        #expect(Set(sends.compactMap { $0["state"] as? String }) == ["ok", "queued"])
        for send in sends {
            #expect(send["clientScheme"] as? String == "org.example.dcclient")
            #expect(
                Set(send.keys).isSubset(of: [
                    "request", "created", "completed", "clientScheme", "credentialName", "state",
                ]))
        }
        // The managed client: its policy, sent and acknowledged by the app (both subjects).
        let clients = try #require(document["clients"] as? [[String: Any]])
        try #require(clients.count == 1)
        let managed = clients[0]
        #expect(managed["clientId"] as? String == "dcclient")
        #expect(managed["clientScheme"] as? String == "org.example.dcclient")
        #expect(managed["state"] as? String == "authorized")
        #expect(managed["sent"] is String)
        let acknowledgement = try #require(managed["acknowledgement"] as? [String: Any])
        #expect(acknowledgement["state"] as? String == "applied")
        #expect(acknowledgement["policy"] as? Int == managed["policy"] as? Int)
        #expect((managed["secureFileIO"] as? [String: Any])?["state"] as? String == "applied")

        // Locked: still ready and authorized, but no secure services and no credential shown.
        let locked = try tools.check("dcclient", ["status", "--json"])
        let lockedView = try #require(try jsonPayload(locked.stdout, "status") as? [String: Any])
        #expect(lockedView["unlocked"] as? Bool == false)
        #expect(lockedView["secureServices"] as? String == "unavailable")
        #expect(lockedView["authState"] as? String == "authorized")
        #expect(lockedView["credential"] == nil)

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

@Suite("The JSON Schemas and docs/JSON.md say the same", .ownThreads, .timeLimit(.minutes(1)))
struct JSONSchemaDocumentationTests {
    /// Every schema of docs/schema, by file name.
    private func schemas() throws -> [String: Any] {
        var schemas: [String: Any] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: JSONSchemas.directory)
        where name.hasSuffix(".schema.json") {
            schemas[name] = try JSONSerialization.jsonObject(
                with: Data(contentsOf: URL(fileURLWithPath: JSONSchemas.directory + "/" + name)))
        }
        return schemas
    }

    /// Every property name and every string an `enum` or `const` allows, anywhere in `schema`.
    private func words(_ schema: Any) -> Set<String> {
        var found: Set<String> = []
        if let object = schema as? [String: Any] {
            if let properties = object["properties"] as? [String: Any] { found.formUnion(properties.keys) }
            if let values = object["enum"] as? [Any] { found.formUnion(values.compactMap { $0 as? String }) }
            if let value = object["const"] as? String { found.insert(value) }
            for value in object.values { found.formUnion(words(value)) }
        } else if let array = schema as? [Any] {
            for value in array { found.formUnion(words(value)) }
        }
        return found
    }

    @Test("Every field and every value a schema allows is named in docs/JSON.md, and every kind has a schema")
    func documented() throws {
        let text = try String(contentsOfFile: Repository.root + "/docs/JSON.md", encoding: .utf8)
        let schemas = try schemas()
        #expect(schemas.count > 10)
        for (name, schema) in schemas {
            for word in words(schema).sorted() {
                #expect(text.contains("`\(word)`"), "\(name): `\(word)` is not in docs/JSON.md")
            }
        }
        // Each kind of the table has its schema, and each schema (but the shared one) its row.
        let kinds = Set(
            text.split(separator: "\n").filter { $0.hasPrefix("| `") }.compactMap { line -> String? in
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count > 2, cells[1].hasPrefix("`") else { return nil }
                return cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            })
        #expect(kinds == Set(schemas.keys.filter { $0 != "common.schema.json" }.map { String($0.dropLast(12)) }))
    }
}
