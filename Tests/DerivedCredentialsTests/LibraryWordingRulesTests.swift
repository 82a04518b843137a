import Foundation
import TestSupport
import Testing

/// The libraries do not know the tools' command lines: a next step that names a command or a flag
/// is a `DCError.Remedy`, and the tools word it (`RemedyWording` in CommandLineSupport). So no
/// string literal in a library names `dcclient …`, `dcprovision …`, `dcverify …` or a `--flag`;
/// comments may (they document the tools).
@Suite("Libraries name no command or flag", .ownThreads, .timeLimit(.minutes(1)))
struct LibraryWordingRulesTests {
    /// The front ends: they word the remedies, so they may name their commands and flags.
    static let frontEnds = [
        "Sources/dcclient/", "Sources/dcprovision/", "Sources/dcverify/", "Sources/CommandLineSupport/",
    ]

    /// Literals that name a program without telling anyone to run it, by file and the literal's
    /// whole text as written (escapes as they are, an interpolation as `\(…)`), with the reason.
    /// Each must still be there, so that an exemption no longer needed goes.
    static let exempt: [(file: String, literal: String, why: String)] = [
        (
            "Sources/CredentialCoding/Derivation/Possession_openssl.swift",
            "dcprovision proof of possession (SP 800-157) v1\\n",
            "the signed challenge's context: changing it breaks every card's proof"
        ),
        (
            "Sources/CredentialCoding/Derivation/Possession_openssl.swift",
            "the challenge is not a dcprovision possession challenge",
            "the challenge format's name"
        ),
        (
            "Plugins/ExecProvider/ExecProvider.swift", "the challenge answer has no dcprovision possession challenge",
            "the challenge format's name"
        ),
        (
            "Sources/ManagedClient/SecureFiles.swift", "dcclient secure-files name key v1",
            "a key-derivation context: changing it loses every secure file"
        ),
        (
            "Sources/ManagedClient/SecureFiles.swift", "dcclient secure-files file key v1",
            "a key-derivation context: changing it loses every secure file"
        ),
        ("Sources/ManagedClient/ManagedClient.swift", "dcclient \\(…)", "the client certificate's subject"),
        ("Sources/ClientPKCS11/Module.swift", "dcclient derived credential", "the PKCS#11 library's description"),
        ("Sources/ClientPKCS11/Module.swift", "dcclient ", "the PKCS#11 token's label"),
        (
            "Plugins/TestCAProvider/TestCAProvider.swift", "the test CA directory (dcprovision testca init DIR)",
            "an option's summary, which only dcprovision shows"
        ),
        (
            "Plugins/PKCS11Provider/PKCS11Provider.swift", "the object URI names another token than --pkcs11",
            "an error's message, not its next step (messages are the same for every front end)"
        ),
    ]

    /// Whole files held to the rule as front ends.
    static let exemptFiles: [String: String] = [
        "Plugins/DCTestCredentials/DCTestCredentials.swift":
            "a front end: the SwiftPM command plug-in runs dcprovision with these flags"
    ]

    /// The libraries' Swift sources: everything in Sources and Plugins but the front ends.
    static func librarySources() -> [String] {
        (Repository.files(under: "Sources") + Repository.files(under: "Plugins")).filter { file in
            file.hasSuffix(".swift") && !frontEnds.contains { file.hasPrefix($0) }
        }
    }

    /// What `text` names of the tools' command lines: `dcclient `, `dcprovision `, `dcverify `,
    /// and each `--flag` (two dashes and a lowercase letter, not after a third dash, so that a PEM
    /// armor line is not one).
    static func commandLineNames(in text: String) -> [String] {
        var found = ["dcclient ", "dcprovision ", "dcverify "].filter { text.contains($0) }
        let bytes = Array(text.utf8)
        var index = 0
        while index + 2 < bytes.count {
            if bytes[index] == UInt8(ascii: "-"), bytes[index + 1] == UInt8(ascii: "-"),
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[index + 2]),
                index == 0 || bytes[index - 1] != UInt8(ascii: "-")
            {
                var end = index + 2
                while end < bytes.count,
                    bytes[end] == UInt8(ascii: "-") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[end])
                {
                    end += 1
                }
                found.append(String(decoding: bytes[index..<end], as: UTF8.self))
                index = end
            } else {
                index += 1
            }
        }
        return found
    }

    @Test("No string literal in a library names a command or a flag: the step is a DCError.Remedy")
    func librariesNameNoCommandLine() throws {
        let files = Self.librarySources()
        #expect(files.count > 100, "the walk should find the libraries' sources")
        #expect(!files.contains { $0.hasPrefix("Sources/dcclient/") })
        var used = Set<Int>()
        var literals = 0
        for file in files where Self.exemptFiles[file] == nil {
            let lexed = SwiftLexer(try Repository.text(file))
            literals += lexed.literals.count
            for literal in lexed.literals {
                let names = Self.commandLineNames(in: literal.text)
                guard !names.isEmpty else { continue }
                if let exemption = Self.exempt.indices.first(where: {
                    Self.exempt[$0].file == file && Self.exempt[$0].literal == literal.text
                }) {
                    used.insert(exemption)
                    continue
                }
                Issue.record(
                    "\(file):\(literal.line): the literal names \(names.joined(separator: ", ")) — make the next step a DCError.Remedy (Errors/Remedies.swift) and word it in CommandLineSupport/RemedyWording.swift"
                )
            }
        }
        #expect(literals > 1000, "the lexer should see the libraries' string literals")
        for (index, exemption) in Self.exempt.enumerated() where !used.contains(index) {
            Issue.record("\(exemption.file): no literal holds '\(exemption.literal)' any more: drop its exemption")
        }
        for file in Self.exemptFiles.keys {
            #expect(files.contains(file), "\(file) is gone: drop its exemption")
        }
    }

    @Test(
        "The rule finds commands and flags in string literals, not in comments, code or PEM armor",
        arguments: [
            ("let a = \"run dcclient unlock\"", ["dcclient "]),
            ("let a = \"pass --pin-file FILE or --pin-fd N\"", ["--pin-file", "--pin-fd"]),
            ("let a = \"give \\(name) to dcprovision send\"", ["dcprovision "]),
            ("let a = \"\"\"\n  see dcverify --help\n  \"\"\"", ["dcverify ", "--help"]),
            ("let a = #\"dcclient \\#(b)\"#", ["dcclient "]),
            ("let a = f(\"x\\(g(\"--quiet\"))\")", ["--quiet"]),
            ("// run dcclient unlock --now\nlet a = \"fine\"", []),
            ("/* dcprovision pair --client-scheme */ let a = b - -c", []),
            ("let a = \"-----BEGIN CERTIFICATE-----\"", []),
            ("let a = \"dcclient\"", []),
            ("let a = \"--\"", []),
        ] as [(String, [String])])
    func rule(source: String, names: [String]) {
        let found = SwiftLexer(source).literals.flatMap { Self.commandLineNames(in: $0.text) }
        #expect(found == names, "\(source)")
    }
}
