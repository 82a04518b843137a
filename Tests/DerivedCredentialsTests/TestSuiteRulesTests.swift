import Foundation
import TestSupport
import Testing

/// The rules every test in this package keeps, checked over the test sources themselves, so that
/// a new test cannot quietly break them: each suite has a time limit, no test function lives
/// outside a suite, no test returns early from a failed match, and no test starts a process
/// without the bounded runner or hands a child the test process's own environment.
@Suite("The test suite's own rules", .ownThreads, .timeLimit(.minutes(3)))
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

    @Test(
        "Every suite has a time limit and runs on threads of its own, and every file with tests declares a suite")
    func timeLimits() {
        for file in Self.testFiles where file.text.contains("@Test") {
            let suites = Self.suiteAttributes(in: file.text)
            #expect(!suites.isEmpty, "\(file.path): tests outside a @Suite have no time limit")
            for suite in suites {
                #expect(suite.contains(".timeLimit("), "\(file.path): @Suite\(suite) has no .timeLimit")
                // A test that blocks must not hold a thread of the concurrency pool (OwnThreads).
                #expect(suite.contains(".ownThreads"), "\(file.path): @Suite\(suite) has no .ownThreads")
            }
        }
    }

    @Test("Every suite in a file that uses the SoftHSM tokens takes turns with the others (.softHSM)")
    func softHSMTurns() {
        for file in Self.testFiles
        where file.text.contains(/SoftHSM\.[a-zA-Z]/) && !file.path.hasPrefix("Tests/TestSupport/") {
            for suite in Self.suiteAttributes(in: file.text) {
                #expect(suite.contains(".softHSM"), "\(file.path): @Suite\(suite) has no .softHSM")
            }
        }
    }

    @Test("Tests that block do not take threads from each other: more blocked tasks than cores all run")
    func blockedTasksRun() async {
        // Each task blocks its thread until all have started. On the concurrency pool (one thread
        // per core) the later ones could not start while the first ones block, and the wait would
        // run out.
        let count = ProcessInfo.processInfo.activeProcessorCount * 2 + 2
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let allStarted = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<count {
                group.addTask {
                    started.signal()
                    return release.wait(timeout: .now() + 10) == .success
                }
            }
            var arrived = 0
            while arrived < count, started.wait(timeout: .now() + 10) == .success { arrived += 1 }
            for _ in 0..<count { release.signal() }
            var all = arrived == count
            for await released in group { all = all && released }
            return all
        }
        #expect(allStarted)
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

    @Test("The suite runs in a session keyring of its own, so no key a test adds reaches the developer's")
    func ownSessionKeyring() {
        // The tests that use the kernel keyring add keys to the session keyring, and run only when
        // the process has one of its own. scripts/test runs the test binary under `keyctl session -`,
        // a fresh anonymous session keyring: the keys die with the run, never reach a keyring of the
        // developer's, and those tests do run. A process still in the user-session keyring, which
        // every process of the user without a session shares, was started without the wrapper.
        // The process cannot join a fresh session itself: KEYCTL_JOIN_SESSION_KEYRING changes only
        // the calling thread's credentials, and the tests run on many threads.
        switch KernelKeyring.sessionIsUserSession() {
        case nil:
            // No kernel keyring here (no keyring support, or a seccomp filter): nothing can leak,
            // and the kernel-keyring tests do not run.
            print("note: the kernel keyring is unavailable here; the tests that use it are skipped")
        case true?:
            Issue.record(
                """
                the suite runs in the user-session keyring: run it through scripts/test, or under \
                `keyctl session -` (keyctl session - swift test …)
                """)
        case false?:
            break
        }
    }
}
