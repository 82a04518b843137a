import Foundation

/// A small Swift lexer for the source rules. It finds force-unwraps: a `!` right after an
/// identifier, `)`, `]`, `>` or `?` (so `try!`, `as!`, `x!`, `f()!`, `Int!`) that does not start
/// `!=` or `!==`. Comments (nested block comments too) are skipped, their text kept by line for the
/// justification. String literals (multi-line and raw ones) are kept as they are written, escapes
/// included, with each interpolation as `\(…)`; the code in an interpolation is lexed, so a string
/// inside it is a literal of its own.
struct SwiftLexer {
    struct Unwrap: Equatable {
        var line: Int
        var column: Int
    }

    /// A string literal: the line it starts on and its text as written, between its quotes.
    struct Literal: Equatable {
        var line: Int
        var text: String
    }

    private(set) var unwraps: [Unwrap] = []
    /// The string literals, in the order they end (one inside an interpolation before the one around it).
    private(set) var literals: [Literal] = []
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
        let first = line
        var text: [UInt8] = []
        defer { literals.append(Literal(line: first, text: String(decoding: text, as: UTF8.self))) }
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
                    text += Array("\\(…)".utf8)
                } else if index < bytes.count {
                    text += Array(escape.utf8) + [bytes[index]]
                    advance()  // the escaped character: \" \\ \n …
                }
                continue
            }
            text.append(bytes[index])
            advance()
        }
    }
}
