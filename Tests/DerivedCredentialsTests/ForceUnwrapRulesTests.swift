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
            let lexed = ForceUnwrapLexer(try Repository.text(file))
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
        #expect(ForceUnwrapLexer(source).unwraps.map(\.line) == lines, "\(source)")
    }

    @Test("A cannot-fail comment counts on the unwrap's line or the line before, not further away")
    func justification() {
        let lexed = ForceUnwrapLexer(
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

/// A small Swift lexer that finds force-unwraps: a `!` right after an identifier, `)`, `]`, `>` or
/// `?` (so `try!`, `as!`, `x!`, `f()!`, `Int!`) that does not start `!=` or `!==`. Comments (nested
/// block comments too) and string literals (multi-line and raw ones) are skipped, but the code in a
/// string's interpolation is lexed. Comment text is kept by line for the justification.
struct ForceUnwrapLexer {
    struct Unwrap: Equatable {
        var line: Int
        var column: Int
    }

    private(set) var unwraps: [Unwrap] = []
    /// The comment text on each line (1-based).
    private(set) var comments: [Int: String] = [:]

    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var lineStart = 0

    init(_ source: String) {
        bytes = Array(source.utf8)
        code(untilParenthesis: false)
    }

    /// Whether a `cannot fail:` comment stands on the unwrap's line or the line before.
    func isJustified(_ unwrap: Unwrap) -> Bool {
        [unwrap.line, unwrap.line - 1].contains { comments[$0]?.contains("cannot fail:") == true }
    }

    private func peek(_ offset: Int = 0) -> UInt8? {
        index + offset < bytes.count ? bytes[index + offset] : nil
    }

    private func starts(with text: String) -> Bool {
        let needle = Array(text.utf8)
        return index + needle.count <= bytes.count && bytes[index..<index + needle.count].elementsEqual(needle)
    }

    private mutating func advance() {
        if bytes[index] == UInt8(ascii: "\n") {
            line += 1
            lineStart = index + 1
        }
        index += 1
    }

    private mutating func note(_ range: Range<Int>, onLine number: Int) {
        comments[number, default: ""] += String(decoding: bytes[range], as: UTF8.self)
    }

    /// Code, up to the end or (in an interpolation) the `)` that closes it.
    private mutating func code(untilParenthesis: Bool) {
        var depth = 0
        while let byte = peek() {
            if starts(with: "//") {
                let start = index
                while let next = peek(), next != UInt8(ascii: "\n") { advance() }
                note(start..<index, onLine: line)
            } else if starts(with: "/*") {
                blockComment()
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "#") && hashesThenQuote() {
                string()
            } else if byte == UInt8(ascii: "(") {
                depth += 1
                advance()
            } else if byte == UInt8(ascii: ")") {
                advance()
                if untilParenthesis && depth == 0 { return }
                depth -= 1
            } else if byte == UInt8(ascii: "!") {
                let before = index > 0 ? bytes[index - 1] : 0
                let postfix =
                    before == UInt8(ascii: "_") || before == UInt8(ascii: ")") || before == UInt8(ascii: "]")
                    || before == UInt8(ascii: ">") || before == UInt8(ascii: "?")
                    || (before >= UInt8(ascii: "a") && before <= UInt8(ascii: "z"))
                    || (before >= UInt8(ascii: "A") && before <= UInt8(ascii: "Z"))
                    || (before >= UInt8(ascii: "0") && before <= UInt8(ascii: "9"))
                if postfix && peek(1) != UInt8(ascii: "=") {
                    unwraps.append(Unwrap(line: line, column: index - lineStart + 1))
                }
                advance()
            } else {
                advance()
            }
        }
    }

    /// `#`s followed by `"`: the start of a raw string (not `#if`, `#fileID`, …).
    private func hashesThenQuote() -> Bool {
        var offset = 0
        while peek(offset) == UInt8(ascii: "#") { offset += 1 }
        return peek(offset) == UInt8(ascii: "\"")
    }

    /// A block comment, nested ones included; its text is noted on each line it spans.
    private mutating func blockComment() {
        var depth = 0
        var start = index
        repeat {
            if starts(with: "/*") {
                depth += 1
                advance()
                advance()
            } else if starts(with: "*/") {
                depth -= 1
                advance()
                advance()
            } else if peek() == UInt8(ascii: "\n") {
                note(start..<index, onLine: line)
                advance()
                start = index
            } else {
                advance()
            }
        } while depth > 0 && index < bytes.count
        note(start..<index, onLine: line)
    }

    /// A string literal: `"…"` or `"""…"""`, with any number of `#`s for a raw one. Escapes are
    /// a backslash and the same `#`s; `\(` (or `\#(`) opens an interpolation, lexed as code.
    private mutating func string() {
        var hashes = 0
        while peek() == UInt8(ascii: "#") {
            hashes += 1
            advance()
        }
        let multiline = starts(with: "\"\"\"")
        for _ in 0..<(multiline ? 3 : 1) { advance() }
        let close = (multiline ? "\"\"\"" : "\"") + String(repeating: "#", count: hashes)
        let escape = "\\" + String(repeating: "#", count: hashes)
        while index < bytes.count {
            if starts(with: close) {
                for _ in 0..<close.utf8.count { advance() }
                return
            }
            if starts(with: escape) {
                for _ in 0..<escape.utf8.count { advance() }
                if peek() == UInt8(ascii: "(") {
                    advance()
                    code(untilParenthesis: true)
                } else if index < bytes.count {
                    advance()  // the escaped character: \" \\ \n …
                }
                continue
            }
            advance()
        }
    }
}
