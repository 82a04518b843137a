import CommandLineSupport
import Foundation
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

/// Issue 12: what the tools print cannot hurt them or the terminal that shows it.
@Suite("Output that cannot hurt", .ownThreads, .timeLimit(.minutes(3)))
struct OutputSafetyTests {
    /// The tools' standard streams a test closes: output, error, both.
    static let closings: [Set<Int32>] = [[1], [2], [1, 2]]

    @Test("A closed standard output or error never changes the exit status", arguments: closings)
    func closedStreams(closing: Set<Int32>) throws {
        let sandbox = try Sandbox("closed")
        defer { sandbox.remove() }
        let commands: [(tool: String, arguments: [String], status: Int32)] = [
            ("dcprovision", ["inspect", "--pem", "authentication=missing.pem"], 66),
            ("dcprovision", ["inspect", "--no-such-flag"], 64),
            ("dcprovision", ["testca", "init", "ca"], 0),
            ("dcprovision", ["testca", "init", "ca"], 73),
            ("dcclient", ["show", "nonsense"], 64),
            ("dcclient", ["list"], 66),
        ]
        for (tool, arguments, status) in commands {
            let result = try sandbox.run(Binaries.directory + "/" + tool, arguments, timeout: 60, closing: closing)
            #expect(result.status == status, "\(tool) \(arguments) with \(closing) closed: \(result.stderrText)")
        }
    }

    @Test("With standard output closed, nothing printed lands in a file the command writes")
    func closedOutputIsNotAFile() throws {
        let sandbox = try Sandbox("closed-output")
        defer { sandbox.remove() }
        for (directory, closing) in [("open", Set<Int32>()), ("closed", [1])] {
            let result = try sandbox.run(
                Binaries.dcprovision,
                ["convert", f.authentication.certificate, f.authentication.key, "--out-dir", directory],
                closing: closing)
            #expect(result.status == 0, "\(result.stderrText)")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: sandbox.file("open")).sorted()
        #expect(try FileManager.default.contentsOfDirectory(atPath: sandbox.file("closed")).sorted() == names)
        for name in names {
            #expect(
                FileManager.default.contents(atPath: sandbox.file("closed/" + name))
                    == FileManager.default.contents(atPath: sandbox.file("open/" + name)), "\(name)")
        }
    }

    @Test("An error about a hostile file name is one line with no control character")
    func hostileNameInError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let name = dir.file("evil\u{1B}[2J\u{1B}]0;pwned\u{7}\nfake: line.pem")
        let result = try run(Binaries.dcprovision, ["inspect", "--pem", "authentication=\(name)"], timeout: 30)
        #expect(result.status == 66)
        #expect(!result.stderr.contains(0x1B) && !result.stderr.contains(0x07))
        #expect(result.stderr.filter { $0 == 0x0A } == [0x0A], "\(result.stderrText)")
        #expect(result.stderrText.hasPrefix("dcprovision: "))
        #expect(result.stderrText.contains("evil\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{a}fake: line.pem"))
    }

    @Test("Human output: every control character escaped, line breaks between lines kept")
    func humanOutput() {
        #expect(Console.escaped("a\u{1B}[2J\nb\u{9B}1m\u{202E}") == "a\\u{1b}[2J\nb\\u{9b}1m\\u{202e}")
        // Escaping what is escaped already changes nothing.
        #expect(Console.escaped("a\\u{1b}[2J") == "a\\u{1b}[2J")
    }

    @Test("JSON output: the C1 controls, DEL and bidirectional overrides the encoder leaves raw are escaped")
    func jsonOutput() throws {
        let hostile = "Alice\u{1B}[31m\n\u{7F}\u{9B}2J\u{202E}"
        let rendered = try JSONDocument("name", hostile).rendered()
        for scalar in rendered.unicodeScalars {
            #expect(!(0x00...0x1F).contains(scalar.value) || scalar == "\n" || scalar == " ", "\(scalar.value)")
            #expect(!(0x7F...0x9F).contains(scalar.value) && scalar.value != 0x202E, "\(scalar.value)")
        }
        let parsed = try JSONSerialization.jsonObject(with: Data(rendered.utf8)) as? [String: Any]
        #expect(parsed?["name"] as? String == hostile)
        #expect(parsed?["version"] as? Int == 1)
    }

    @Test("Progress only to a terminal, and never with --quiet")
    func progressDecision() {
        #expect(Console.showsProgress(standardErrorIsTerminal: true, quiet: false))
        #expect(!Console.showsProgress(standardErrorIsTerminal: true, quiet: true))
        #expect(!Console.showsProgress(standardErrorIsTerminal: false, quiet: false))
        #expect(!Console.showsProgress(standardErrorIsTerminal: false, quiet: true))
    }

    @Test("Converting many files prints no progress when standard error is a pipe")
    func noProgressToAPipe() throws {
        let sandbox = try Sandbox("progress")
        defer { sandbox.remove() }
        let result = try sandbox.run(
            Binaries.dcprovision,
            [
                "convert", f.authentication.certificate, f.authentication.key, f.signing.certificate, f.signing.key,
                "--out-dir", "out",
            ])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(result.stderr.isEmpty, "\(result.stderrText)")
    }
}
