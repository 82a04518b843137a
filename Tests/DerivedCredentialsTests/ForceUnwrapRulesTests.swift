import Foundation
import TestSupport
import Testing

/// Force-unwraps in the shipped code: a value that came from input, a file, the environment or the
/// system is a thrown error, never a `!`. The few left cannot fail, and each says why in a
/// `cannot fail:` comment on its line or the line before.
@Suite("Force-unwraps say why they cannot fail", .ownThreads, .timeLimit(.minutes(1)))
struct ForceUnwrapRulesTests {
    /// Files not held to the rule yet: none. (An entry here must still have a force-unwrap, so that
    /// a file that no longer needs its exemption loses it.)
    static let exempt: Set<String> = []

    static func sources() -> [String] {
        (Repository.files(under: "Sources") + Repository.files(under: "Plugins")).filter { $0.hasSuffix(".swift") }
    }

    @Test("Every force-unwrap in Sources and Plugins carries a cannot-fail comment")
    func everyUnwrapIsJustified() throws {
        let files = Self.sources()
        #expect(files.count > 100, "the walk should find the package's sources")
        var total = 0
        for file in files {
            let lexed = SwiftLexer(try Repository.text(file))
            total += lexed.unwraps.count
            if Self.exempt.contains(file) {
                #expect(!lexed.unwraps.isEmpty, "\(file) has no force-unwrap left: drop its exemption")
                continue
            }
            for unwrap in lexed.unwraps where !lexed.isJustified(unwrap) {
                Issue.record(
                    "\(file):\(unwrap.line):\(unwrap.column): a force-unwrap without a `cannot fail:` comment; throw a DCError if the value comes from input, a file or the system"
                )
            }
        }
        // The lexer sees the ones that are there (the justified ones).
        #expect(total > 0)
    }

    @Test(
        "The lexer finds postfix !, try! and as!, and skips strings, comments, != and prefix !",
        arguments: [
            ("let a = b!", [1]),
            ("let a = try! f()", [1]),
            ("let a = b as! Int", [1]),
            ("var a: Int!", [1]),
            ("let a = f()!.g[0]!", [1, 1]),
            ("let a = b!.c ?? d", [1]),
            ("if a != b, !c, a !== b {}", []),
            ("let a = !b && !(c)", []),
            ("#if !os(Linux)\n#endif", []),
            ("let a = \"b! c!\"", []),
            ("let a = #\"b!\"#", []),
            ("let a = \"\"\"\n  b! \\(c!) \"\n  \"\"\"", [2]),
            ("let a = \"x\\(f(\"y!\")!)z\"", [1]),
            ("let a = #\"\\(b!) \\#(c!)\"#", [1]),
            ("// a!\n/* b! /* c! */ d! */ e", []),
            ("let a = \"\\\"b!\"", []),
            ("f(x)\n  !y", []),
        ] as [(String, [Int])])
    func lexer(source: String, lines: [Int]) {
        #expect(SwiftLexer(source).unwraps.map(\.line) == lines, "\(source)")
    }

    @Test("A cannot-fail comment counts on the unwrap's line or the line before, not further away")
    func justification() {
        let lexed = SwiftLexer(
            """
            let a = b!  // cannot fail: b is set above
            // cannot fail: c is a literal
            let d = c!

            // cannot fail: too far away
            let e = f()
            let g = h!
            let i = "// cannot fail: in a string" + j!
            """)
        #expect(lexed.unwraps.map(\.line) == [1, 3, 7, 8])
        #expect(lexed.unwraps.map(lexed.isJustified) == [true, true, false, false])
    }
}
