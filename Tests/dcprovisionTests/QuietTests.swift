import Foundation
import TestSupport
import Testing

/// `--quiet` (docs/CLI.md): every command takes it; it silences confirmations and progress, never
/// data or errors.
@Suite("--quiet: only data and errors", .ownThreads, .timeLimit(.minutes(3)))
struct QuietTests {
    static let commands: [(tool: String, path: [String])] =
        [
            "convert", "register", "unregister", "handle-url", "send", "status", "demo", "inspect", "providers",
            "testca init", "testca issue", "tokens", "objects",
        ].map { ("dcprovision", $0.split(separator: " ").map(String.init)) }
        + ["init", "register", "unregister", "request", "handle-url", "list", "show", "lock", "unlock"].map {
            ("dcclient", [$0])
        }

    @Test("Every command of both tools offers --quiet")
    func everyCommand() throws {
        for (tool, path) in Self.commands {
            let help = try run(Binaries.directory + "/" + tool, path + ["--help"])
            #expect(help.status == 0, "\(tool) \(path): \(help.stderrText)")
            #expect(help.stdoutText.contains("-q, --quiet"), "\(tool) \(path.joined(separator: " ")) --help")
        }
    }

    @Test("Confirmations and progress are silenced; listings, written paths and errors are not")
    func quiet() throws {
        let tools = try Tools("quiet")
        defer { tools.sandbox.remove() }
        try tools.sandbox.write("pass.txt", "correct horse\n")
        let setUp = try tools.check(
            "dcclient",
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt", "--quiet",
            ])
        #expect(setUp.stdout.isEmpty, "\(setUp.stdoutText)")
        #expect(try tools.check("dcclient", ["register", "-q"]).stdout.isEmpty)
        #expect(try tools.check("dcprovision", ["testca", "init", "ca", "-q"]).stdout.isEmpty)
        // Without --quiet the same kind of command confirms.
        #expect(!(try tools.check("dcprovision", ["testca", "init", "ca2"]).stdout.isEmpty))
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca", "-q"])
        #expect(
            try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient", "-q"]).stdout.isEmpty)
        let requested = try tools.check("dcclient", ["request", "--quiet"])
        #expect(requested.stdout.isEmpty, "\(requested.stdoutText)")
        // Data still prints.
        let listed = try tools.check("dcclient", ["list", "--quiet"])
        #expect(listed.stdoutText.contains("authentication"))
        let issued = try tools.check("dcprovision", ["testca", "issue", "ca", "--out-dir", "issued", "--quiet"])
        #expect(issued.stdoutText.contains("issued/authentication.cert.der"))
        // Errors still print, with their status.
        let refused = try tools.run("dcclient", ["show", "nonsense", "--quiet"])
        #expect(refused.status == 64)
        #expect(refused.stderrText.contains("The value 'nonsense' is invalid for '<tag>'"), "\(refused.stderrText)")
    }
}
