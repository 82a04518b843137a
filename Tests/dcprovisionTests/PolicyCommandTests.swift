import Foundation
import TestSupport
import Testing

@Suite("The managed-app runtime through dcprovision and dcclient", .ownThreads, .timeLimit(.minutes(5)))
struct PolicyCommandTests {
    static let scheme = ["--client-scheme", "org.example.dcclient"]

    /// The policy URL a command output shows it opened.
    static func openedPolicy(_ output: String) throws -> String {
        let line = try #require(
            output.split(separator: "\n").first { $0.contains("opening org.example.dcclient:/policy?") })
        return String(line[line.range(of: "org.example.dcclient:/policy?")!.lowerBound...])
    }

    @Test(
        "unauthorize: files, pasteboard and list exit 77 with the provider's message; a forged or replayed policy exits 77 and changes nothing; authorize and unlock bring it all back"
    )
    func authorization() throws {
        let tools = try Tools("policy-commands")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.sandbox.write("note.txt", "kept\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        let unauthorize = try tools.check(
            "dcprovision", ["unauthorize"] + Self.scheme + ["--message", "Device out of compliance"])
        let genuine = try Self.openedPolicy(unauthorize.stdoutText + unauthorize.stderrText)
        for command in [["files", "get", "note"], ["files", "ls"], ["pasteboard", "paste"], ["list"]] {
            let refused = try tools.run("dcclient", command)
            #expect(refused.status == 77, "\(command)")
            #expect(
                refused.stderrText.contains("the app is unauthorized: Device out of compliance"),
                "\(refused.stderrText)")
            #expect(refused.stdout.isEmpty)
        }
        let status = try tools.check("dcclient", ["status", "--json"]).stdoutText
        #expect(
            status.contains("\"authState\" : \"unauthorized\"") || status.contains("\"authState\":\"unauthorized\""))
        // The same URL again, an altered one, and one signed by nobody: exit 77, nothing changes.
        for hostile in [
            genuine, genuine.replacingOccurrences(of: "state=unauthorized", with: "state=authorized"),
            String(genuine[..<genuine.range(of: "&sig=")!.upperBound]) + String(repeating: "0", count: 128),
        ] {
            let result = try tools.run("dcclient", ["handle-url", hostile])
            #expect(result.status == 77, "\(hostile): \(result.stderrText)")
        }
        #expect(try tools.run("dcclient", ["files", "get", "note"]).status == 77)
        // Authorized again while the app is locked (it locked itself): applied at once, without
        // the store key; acknowledged after the unlock.
        let authorize = try tools.check("dcprovision", ["authorize"] + Self.scheme)
        #expect(
            (authorize.stdoutText + authorize.stderrText).contains("acknowledges it after its next unlock"),
            "\(authorize.stdoutText)")
        let whileLocked = try tools.check("dcclient", ["status", "--json"]).stdoutText
        #expect(whileLocked.contains("\"authState\" : \"authorized\""), "\(whileLocked)")
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        #expect(try tools.check("dcclient", ["files", "get", "note"]).stdoutText == "kept\n")
        let provider = try tools.check("dcprovision", ["status"]).stdoutText
        #expect(provider.contains("client dcclient (org.example.dcclient:)  authorized"), "\(provider)")
        #expect(provider.contains("secure file I/O: applied"), "\(provider)")
    }

    @Test(
        "Closed standard output and error: the handler's output is dropped, the policy still goes out and is acknowledged (exit 0, no crash)"
    )
    func closedOutput() throws {
        let tools = try Tools("policy-closed-output")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        for command in [["policy", "--auto-lock", "10m"], ["unauthorize"]] {
            let result = try tools.sandbox.run(
                "/bin/sh",
                ["-c", "exec \"$0\" \"$@\" >&- 2>&-", Binaries.directory + "/dcprovision"] + command + Self.scheme,
                timeout: 120)
            #expect(result.status == 0, "\(command): \(result.status)")
        }
        let status = try tools.check("dcprovision", ["status"]).stdoutText
        #expect(status.contains("acknowledged"), "\(status)")
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("authorization:    unauthorized"))
    }

    @Test(
        "Bad policy input is a usage error (64) and sends nothing: control characters, an overlong message, an auto-lock out of range"
    )
    func badInput() throws {
        let tools = try Tools("policy-bad-input")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        for arguments in [
            ["unauthorize"] + Self.scheme + ["--message", "two\nlines"],
            ["unauthorize"] + Self.scheme + ["--message", "\u{1b}[31mred"],
            ["unauthorize"] + Self.scheme + ["--message", String(repeating: "x", count: 201)],
            ["policy"] + Self.scheme + ["--auto-lock", "0"],
            ["policy"] + Self.scheme + ["--auto-lock", "8d"],
            ["policy"] + Self.scheme + ["--auto-lock", "soon"],
        ] {
            let result = try tools.run("dcprovision", arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderrText)")
            #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
        }
        let status = try tools.check("dcclient", ["status"]).stdoutText
        #expect(status.contains("authorization:    authorized"))
        #expect(status.contains("auto-lock:        900 s"))
    }

    @Test(
        "retire: erased after acknowledging; unlock and reads exit 77; the provider sends nothing more and pairs again only with a client set up afresh"
    )
    func retire() throws {
        let tools = try Tools("policy-retire")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.sandbox.write("note.txt", "secret\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        let retire = try tools.check("dcprovision", ["retire"] + Self.scheme + ["--message", "Employee left"])
        #expect((retire.stdoutText + retire.stderrText).contains("its pairing has ended"))
        let store = tools.sandbox.dataHome + "/dcclient/apps/dcclient/store"
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: store)) == [
                ".lock", "client.json", "policy.json", "policy.sequence", "provider.json",
            ])
        #expect(try tools.run("dcclient", ["unlock", "--passphrase-file", "pass.txt"]).status == 77)
        #expect(try tools.run("dcclient", ["files", "get", "note"]).status == 77)
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("message:          Employee left"))
        let send = try tools.run(
            "dcprovision",
            ["send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider"] + Self.scheme)
        #expect(send.status != 0)
        // Set up afresh, the client is paired and authorized again.
        try tools.check(
            "dcclient",
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ])
        try tools.check("dcclient", ["register"])
        try tools.check("dcprovision", ["pair"] + Self.scheme)
        try tools.check("dcprovision", ["authorize"] + Self.scheme)
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("authorization:    authorized"))
    }

    @Test(
        "A full disk (a file-size limit) while writing a secure file: a clear error, the old file intact, no staging file"
    )
    func fullDisk() throws {
        let tools = try Tools("policy-full-disk")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let old = Array(repeating: UInt8(0x41), count: 1000)
        try Data(old).write(to: URL(fileURLWithPath: tools.sandbox.file("old.bin")))
        try tools.check("dcclient", ["files", "put", "doc", "old.bin"])
        try Data(repeating: 0x42, count: 400_000).write(to: URL(fileURLWithPath: tools.sandbox.file("new.bin")))
        let result = try run(
            "prlimit",
            ["--fsize=200000", Binaries.directory + "/dcclient", "files", "put", "doc", tools.sandbox.file("new.bin")],
            environment: tools.sandbox.environment)
        #expect(result.status == 74, "\(result.stderrText)")
        #expect(result.stderrText.contains("File too large"), "\(result.stderrText)")
        #expect(result.stderrText.split(separator: "\n").count == 1)
        #expect(try tools.check("dcclient", ["files", "get", "doc"]).stdout == old)
        let files = tools.sandbox.dataHome + "/dcclient/apps/dcclient/store/files"
        #expect(try FileManager.default.contentsOfDirectory(atPath: files).filter { $0.hasPrefix(".") }.isEmpty)
    }
}
