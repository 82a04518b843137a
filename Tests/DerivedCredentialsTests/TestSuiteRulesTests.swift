import Foundation
import TestSupport
import Testing

/// The rules every test in this package keeps, checked over the test sources themselves, so that
/// a new test cannot quietly break them: each suite has a time limit, no test function lives
/// outside a suite, no test returns early from a failed match, and no test starts a process
/// without the bounded runner or hands a child the test process's own environment.
@Suite("The test suite's own rules", .timeLimit(.minutes(3)))
struct TestSuiteRulesTests {
    /// Every Swift file under Tests/, except TestSupport (which implements the runner and the sandbox).
    static let testFiles: [(path: String, text: String)] = Repository.files(under: "Tests").compactMap { path in
        guard path.hasSuffix(".swift"), !path.hasPrefix("Tests/TestSupport/"), let text = try? Repository.text(path)
        else { return nil }
        return (path, text)
    }

    /// The argument list of each `@Suite` attribute in `text` (one that starts a line), balanced
    /// over parentheses; "" for a bare attribute.
    static func suiteAttributes(in text: String) -> [String] {
        var attributes: [String] = []
        var offset = text.startIndex
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            defer { offset = text.index(line.endIndex, offsetBy: 1, limitedBy: text.endIndex) ?? text.endIndex }
            guard line.drop(while: { $0 == " " }).hasPrefix("@Suite"),
                let start = text[offset...].range(of: "@Suite")
            else { continue }
            var index = start.upperBound
            var argument = ""
            if index < text.endIndex, text[index] == "(" {
                var depth = 0
                var inString = false
                while index < text.endIndex {
                    let character = text[index]
                    argument.append(character)
                    if character == "\"" { inString.toggle() }
                    if !inString && character == "(" { depth += 1 }
                    if !inString && character == ")" {
                        depth -= 1
                        if depth == 0 { break }
                    }
                    index = text.index(after: index)
                }
            }
            attributes.append(argument)
        }
        return attributes
    }

    @Test("The rules are read from the real test sources")
    func sourcesFound() {
        #expect(Self.testFiles.count > 20)
        #expect(Self.testFiles.contains { $0.path == "Tests/DerivedCredentialsTests/TestSuiteRulesTests.swift" })
    }

    @Test("Every suite has a time limit, and every file with tests declares a suite")
    func timeLimits() {
        for file in Self.testFiles where file.text.contains("@Test") {
            let suites = Self.suiteAttributes(in: file.text)
            #expect(!suites.isEmpty, "\(file.path): tests outside a @Suite have no time limit")
            for suite in suites {
                #expect(suite.contains(".timeLimit("), "\(file.path): @Suite\(suite) has no .timeLimit")
            }
        }
    }

    @Test("No test returns early from a failed match: #require fails instead")
    func noSilentReturns() throws {
        let earlyReturn = try Regex(#"guard\s+(case|let)\s[^{]*else\s*\{\s*return\s*\}"#)
        for file in Self.testFiles {
            #expect(file.text.firstMatch(of: earlyReturn) == nil, "\(file.path): guard … else { return } in a test")
        }
    }

    @Test("Children are started through the bounded runner, with a sandbox environment")
    func boundedChildren() throws {
        // The test process's environment as the start of a child's: passed as `environment:`, or
        // copied into a `var` to be changed and passed on. (Reading it, to compare, is fine.)
        let inherited = try Regex(
            #"(environment\s*:\s*|var\s+\w+\s*=\s*)ProcessInfo\.processInfo\.environment(?!\s*\[)"#)
        for file in Self.testFiles where file.path != "Tests/DerivedCredentialsTests/TestSuiteRulesTests.swift" {
            #expect(!file.text.contains("Process()"), "\(file.path): Foundation's Process has no time limit here")
            #expect(
                file.text.firstMatch(of: inherited) == nil,
                "\(file.path): a child must get a Sandbox environment, not the test process's")
        }
    }
}
