import CredentialCoding
import DerivedCredentials
import ExecProvider
import Foundation
import SystemSupport
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

/// Collects what the provider forwards from a plug-in's stderr.
final class Lines: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var lines: [String] = []
    func append(_ line: String) { lock.withLock { lines.append(line) } }
    var all: [String] { lock.withLock { lines } }
}

/// A plug-in script in a temporary directory.
private func plugin(_ dir: TemporaryDirectory, _ name: String, _ script: String) throws -> String {
    let path = try dir.write(name, "#!/bin/bash\n" + script + "\n")
    chmod(path, 0o755)
    return path
}

private func b64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

private func entryJSON(_ tag: String, _ pair: IssuedPair, key: IssuedPair? = nil) throws -> String {
    let certificate = b64(try HostileInput.der(of: pair.certificate))
    let privateKey = b64(try HostileInput.pkcs8(of: (key ?? pair).key))
    return #"{"tag":"\#(tag)","certificate":"\#(certificate)","privateKey":"\#(privateKey)"}"#
}

/// A plug-in that prints `answer` (written to a file next to it) and exits with `status`.
private func answering(_ dir: TemporaryDirectory, _ answer: String, status: Int = 0) throws -> String {
    let file = try dir.write("answer-\(UUID().uuidString).json", answer)
    return try plugin(
        dir, "dcprovider-\(UUID().uuidString.prefix(8).lowercased())", "cat > /dev/null; cat '\(file)'; exit \(status)")
}

private func provide(
    _ path: String, limits: ChildProcess.Limits = .init(timeout: .seconds(10)), options: [String: [String]] = [:],
    passphrase: String? = nil, lines: Lines = Lines()
) async throws -> ProvidedCredential {
    let provider = ExecProvider(path: path, limits: limits, stderrHandler: { lines.append($0) })
    let source: any PassphraseSource = passphrase.map { FixedPassphrase(SecretBytes(Array($0.utf8))) } ?? NoPassphrase()
    return try await provider.provide(ProviderRequest(options: options, passphrase: source))
}

private func refusal(_ body: () async throws -> Void) async -> DCError? {
    do {
        try await body()
        return nil
    } catch let error as DCError {
        return error
    } catch {
        return nil
    }
}

@Suite("Exec providers: hostile plug-ins get clear errors and nothing installed", .ownThreads, .timeLimit(.minutes(5)))
struct ExecProviderTests {
    @Test("A well-behaved plug-in's answer is converted and checked")
    func wellBehaved() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try answering(
            dir,
            #"{"protocol":1,"credential":{"name":"Alice","serialNumber":"7","expirationDate":"2030-01-01T00:00:00Z","entries":["#
                + (try entryJSON("authentication", f.authentication)) + "," + (try entryJSON("signing", f.signing))
                + "]}}")
        let provided = try await provide(path)
        #expect(provided.entries.map(\.tag) == [.authentication, .signing])
        #expect(provided.suggestedName == "Alice")
        #expect(provided.suggestedExpirationDate == ISO8601DateFormatter().date(from: "2030-01-01T00:00:00Z"))
    }

    @Test("A child that leaves the process group and keeps stdout open does not make the run hang")
    func escapedChild() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let marker = "dcescaped-\(UUID().uuidString)"
        // setsid puts the grandchild in a new session: killing the plug-in's group cannot reach it,
        // and it holds the plug-in's stdout for 300 s. The plug-in itself records its PID and
        // becomes `sleep 301`.
        let pidFile = dir.file("pid")
        let path = try plugin(
            dir, "dcprovider-escape",
            "setsid bash -c 'exec -a \(marker) sleep 300' & echo $$ > '\(pidFile).tmp'; mv '\(pidFile).tmp' '\(pidFile)'; exec sleep 301"
        )
        defer { _ = try? run("pkill", ["-f", marker]) }
        let watcher = LifetimeWatcher(pidFile: pidFile)
        let started = ContinuousClock.now
        // The plug-in writes its pid into the directory its option names (the one place besides its
        // temporary directory a plug-in may write).
        let error = await refusal {
            _ = try await provide(path, limits: .init(timeout: .milliseconds(500)), options: ["dir": [dir.path]])
        }
        #expect(error?.code == .providerTimedOut)
        // The plug-in was killed at its 500 ms deadline: measured by the watcher's own thread.
        let life = await watcher.result()
        let lifetime = try #require(life.lifetime, "the plug-in (pid \(String(describing: life.pid))) never died")
        #expect(lifetime < .seconds(5), "the plug-in lived \(lifetime) past first sight under a 500 ms limit")
        // And the run returned: the deadline plus the drain grace, not the grandchild's 300 s.
        // (This bound is loose: on a 2-core runner this task may wait tens of seconds for a free
        // cooperative thread while other tests block theirs on child processes.)
        #expect(ContinuousClock.now - started < .seconds(150))
    }

    @Test("Timeout: the plug-in and what it started are killed at the deadline")
    func timeout() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let marker = "dcmarker-\(UUID().uuidString)"
        // A grandchild named by exec -a, so that it can be found afterwards; both record their PIDs.
        let (pidFile, grandchildPIDFile) = (dir.file("pid"), dir.file("grandchild-pid"))
        let path = try plugin(
            dir, "dcprovider-slow",
            """
            (echo $BASHPID > '\(grandchildPIDFile).tmp'; mv '\(grandchildPIDFile).tmp' '\(grandchildPIDFile)'; exec -a \(marker) sleep 300) &
            echo $$ > '\(pidFile).tmp'; mv '\(pidFile).tmp' '\(pidFile)'
            exec sleep 301
            """)
        let watcher = LifetimeWatcher(pidFile: pidFile)
        let grandchild = LifetimeWatcher(pidFile: grandchildPIDFile)
        let error = await refusal {
            _ = try await provide(path, limits: .init(timeout: .milliseconds(500)), options: ["dir": [dir.path]])
        }
        #expect(error?.code == .providerTimedOut)
        // Killed at the deadline, not after the plug-in's 300 s: how long the plug-in lived is
        // measured by a thread of the watcher's own, not by this task (which can resume late).
        for (name, life) in [("plug-in", await watcher.result()), ("its background child", await grandchild.result())] {
            let lifetime = try #require(life.lifetime, "the \(name) (pid \(String(describing: life.pid))) never died")
            #expect(lifetime < .seconds(5), "the \(name) lived \(lifetime) past first sight under a 500 ms limit")
        }
        // The plug-in's background child is gone too: the whole process group was killed.
        #expect(try run("pgrep", ["-f", marker]).status == 1, "a process named \(marker) survived")
    }

    @Test(
        "Crash, non-zero exit, over-long output, bad JSON, wrong version",
        arguments: [
            ("crash", "kill -SEGV $$", DCError.Code.providerFailed),
            ("exit 3", "cat > /dev/null; exit 3", .providerFailed),
            ("endless output", "cat > /dev/null; yes", .providerProtocol),
            ("no output", "cat > /dev/null; exit 0", .providerProtocol),
            ("invalid JSON", "cat > /dev/null; echo '{not json'", .providerProtocol),
            (
                "truncated JSON", #"cat > /dev/null; printf '{"protocol":1,"credential":{"entries":[{"tag":"sign'"#,
                .providerProtocol
            ),
            (
                "two JSON objects",
                #"cat > /dev/null; echo '{"protocol":1,"credential":{"entries":[]}}{"protocol":1}'"#, .providerProtocol
            ),
            (
                "unknown protocol version", #"cat > /dev/null; echo '{"protocol":2,"credential":{"entries":[]}}'"#,
                .providerProtocol
            ),
            ("no entries", #"cat > /dev/null; echo '{"protocol":1,"credential":{"entries":[]}}'"#, .providerProtocol),
            (
                "unknown tag",
                #"cat > /dev/null; echo '{"protocol":1,"credential":{"entries":[{"tag":"pivAuth","certificate":"","privateKey":""}]}}'"#,
                .providerProtocol
            ),
            (
                "bad base64",
                #"cat > /dev/null; echo '{"protocol":1,"credential":{"entries":[{"tag":"signing","certificate":"***","privateKey":"AA=="}]}}'"#,
                .providerProtocol
            ),
        ] as [(String, String, DCError.Code)])
    func misbehaviour(name: String, script: String, expected: DCError.Code) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try plugin(dir, "dcprovider-bad", script)
        let error = await refusal {
            _ = try await provide(path, limits: .init(timeout: .seconds(10), stdoutLimit: 64 << 10))
        }
        #expect(error?.code == expected, "\(String(describing: error))")
        #expect(error?.subject == path)
        #expect(error?.description.contains("\n") == false)
    }

    @Test("Duplicate tags, a key that does not match, a PKCS#1 key, trailing bytes: refused with the reader's codes")
    func lyingEntries() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let head = #"{"protocol":1,"credential":{"entries":["#
        let cases: [(String, DCError.Code)] = [
            (
                head + (try entryJSON("signing", f.signing)) + "," + (try entryJSON("signing", f.signing)) + "]}}",
                .duplicateTag
            ),
            (head + (try entryJSON("signing", f.signing, key: f.authentication)) + "]}}", .keyCertificateMismatch),
            (
                head
                    + #"{"tag":"encryption","certificate":"\#(b64(try HostileInput.der(of: f.encryption.certificate)))","privateKey":"\#(b64(try OpenSSLFixtures.openssl(["rsa", "-in", f.encryption.key, "-traditional", "-outform", "DER"])))"}]}}"#,
                .malformedInput
            ),
            (
                head
                    + #"{"tag":"signing","certificate":"\#(b64(try HostileInput.der(of: f.signing.certificate) + [0]))","privateKey":"\#(b64(try HostileInput.pkcs8(of: f.signing.key)))"}]}}"#,
                .trailingData
            ),
        ]
        for (answer, expected) in cases {
            let error = await refusal { _ = try await provide(try answering(dir, answer)) }
            #expect(error?.code == expected, "\(String(describing: error))")
        }
    }

    @Test("A plug-in that exits without reading a large request does not take the caller down (SIGPIPE)")
    func brokenPipe() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try plugin(dir, "dcprovider-deaf", "exec 0<&-; sleep 0.3; exit 4")
        // 1 MiB of options: more than a pipe buffer, so the write must meet the closed pipe.
        let options = ["padding": [String(repeating: "x", count: 1 << 20)]]
        for _ in 0..<5 {
            let error = await refusal { _ = try await provide(path, options: options, passphrase: "secret") }
            #expect(error?.code == .providerFailed)
        }
    }

    @Test("A reported error maps to its code; the message is escaped")
    func reportedError() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try answering(
            dir, #"{"protocol":1,"error":{"code":"wrongPassphrase","message":"vault said no\u001b[2J"}}"#, status: 1)
        let error = await refusal { _ = try await provide(path) }
        #expect(error?.code == .wrongPassphrase)
        #expect(error?.code.category.exitStatus == 77)
        #expect(error?.description.contains("vault said no\\u{1b}[2J") == true)
        let unknown = try answering(
            dir, #"{"protocol":1,"error":{"code":"quotaExceeded","message":"try later"}}"#, status: 1)
        #expect(await refusal { _ = try await provide(unknown) }?.code == .providerFailed)
    }

    @Test("stderr is passed through line by line with control characters escaped")
    func stderrPassThrough() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let answer = try dir.write(
            "a.json", #"{"protocol":1,"credential":{"entries":["# + (try entryJSON("signing", f.signing)) + "]}}")
        let path = try plugin(
            dir, "dcprovider-chatty",
            "cat > /dev/null; printf 'working\\n\\033]0;owned\\007done\\n' >&2; cat '\(answer)'")
        let lines = Lines()
        _ = try await provide(path, lines: lines)
        #expect(lines.all == ["dcprovider-chatty: working", "dcprovider-chatty: \\u{1b}]0;owned\\u{7}done"])
    }

    @Test(
        "The passphrase goes over stdin only: the plug-in's argv is exactly its path, its environment exactly the minimal one taken from ours and its private TMPDIR, it has only descriptors 0, 1 and 2, and no encoding of the passphrase is in either or in its forwarded stderr"
    )
    func secretsOnStdinOnly() async throws {
        let dir = try TemporaryDirectory("exec-secrets")
        defer { dir.remove() }
        // Characters that every encoding spells differently: space, slash, plus, ampersand, equals,
        // percent and a non-ASCII letter.
        let secret = "hunter2 \u{FC}/+&=%-\(UUID().uuidString)"
        let answer = try dir.write(
            "a.json", #"{"protocol":1,"credential":{"entries":["# + (try entryJSON("signing", f.signing)) + "]}}")
        // The plug-in records its argv (NUL-separated), the environment it was started with
        // (Python's os.environb: what execve gave it, nothing added), the descriptors it has
        // open before it opens any, what came on stdin, and talks on stderr. (It is Python, not
        // bash: a confined plug-in cannot read /proc, not even /proc/self.)
        let path = try dir.write(
            "dcprovider-spy",
            """
            #!/usr/bin/python3
            import json, os, sys
            descriptors = []
            for fd in range(1024):
                try:
                    os.fstat(fd)
                    descriptors.append(fd)
                except OSError:
                    pass
            data = sys.stdin.buffer.read()
            out = json.loads(data)["options"]["dir"][0]
            def record(name, content):
                with open(os.path.join(out, name), "wb") as f:
                    f.write(content)
            record("stdin", data)
            record("argv", b"".join(os.fsencode(a) + b"\\0" for a in sys.argv))
            record("environ", b"".join(k + b"=" + v + b"\\0" for k, v in os.environb.items()))
            record("fds", "\\n".join(str(fd) for fd in descriptors).encode() + b"\\n")
            sys.stderr.write("working for %s\\n" % os.environ.get("USER", ""))
            sys.stdout.write(open('\(answer)').read())
            """)
        chmod(path, 0o755)
        let lines = Lines()
        let before = ProcessInfo.processInfo.environment
        _ = try await provide(
            path, options: ["account": ["alice"], "dir": [dir.path]], passphrase: secret, lines: lines)
        let after = ProcessInfo.processInfo.environment

        // The contract (docs/PROVIDER-PROTOCOL.md): started with no arguments, with the minimal environment.
        let argv = try readBytes(dir.file("argv")).split(separator: 0, omittingEmptySubsequences: false).dropLast()
            .map { String(decoding: $0, as: UTF8.self) }
        #expect(argv == [path])
        var environment = Dictionary(
            try readBytes(dir.file("environ")).split(separator: 0).map { entry -> (String, String) in
                let text = String(decoding: entry, as: UTF8.self)
                let equals = text.firstIndex(of: "=") ?? text.endIndex
                return (String(text[..<equals]), String(text[equals...].dropFirst()))
            }, uniquingKeysWith: { first, _ in first })
        // Its own temporary directory, made for the run and gone after it.
        let temporary = environment.removeValue(forKey: "TMPDIR") ?? ""
        #expect(temporary.contains("/dcprovider-"))
        #expect(!FileManager.default.fileExists(atPath: temporary))
        // (Another test may set SOFTHSM2_CONF in this process meanwhile: either snapshot is ours.)
        #expect(
            environment == ChildEnvironment.minimal(from: before)
                || environment == ChildEnvironment.minimal(from: after),
            "differs in \(Set(environment.keys).symmetricDifference(ChildEnvironment.minimal(from: before).keys).sorted()) or in a value"
        )
        // Nothing but what the test's Sandbox-free process would pass anyway: not the whole of ours.
        #expect(environment.keys.allSatisfy { ChildEnvironment.minimal(from: [$0: ""]).count == 1 })
        // Descriptors: 0, 1 and 2, nothing else.
        #expect(
            String(decoding: try readBytes(dir.file("fds")), as: UTF8.self).split(separator: "\n") == ["0", "1", "2"])
        // USER is not among the variables passed on.
        #expect(lines.all == ["dcprovider-spy: working for "])

        // No form of the passphrase anywhere the plug-in's command line, environment or chatter goes.
        let secretBytes = Array(secret.utf8)
        #expect(SecretEncodings.found(secretBytes, in: try readBytes(dir.file("argv"))) == [])
        #expect(SecretEncodings.found(secretBytes, in: try readBytes(dir.file("environ"))) == [])
        #expect(SecretEncodings.found(secretBytes, in: lines.all.joined(separator: "\n")) == [])

        // It went over stdin, in the request, base64-encoded.
        let request = try JSONSerialization.jsonObject(with: Data(try readBytes(dir.file("stdin")))) as? [String: Any]
        #expect(request?["protocol"] as? Int == 1)
        #expect(request?["operation"] as? String == "provide")
        #expect((request?["options"] as? [String: [String]]) == ["account": ["alice"], "dir": [dir.path]])
        #expect(request?["passphrase"] as? String == Data(secret.utf8).base64EncodedString())
    }

    @Test("Every encoding the leak check knows is found where it is, and nothing where it is not")
    func leakCheckFindsEveryEncoding() {
        let secret = Array("hunter2 \u{FC}/+&=%-x".utf8)
        for (name, text) in SecretEncodings.all(of: secret) {
            #expect(SecretEncodings.found(secret, in: "--pass=\(text) ").contains(name), "\(name)")
        }
        #expect(SecretEncodings.found(secret, in: "hunter2 and nothing else") == [])
    }

    @Test("Discovery finds dcprovider-NAME executables on the search path, first wins")
    func discovery() throws {
        let first = try TemporaryDirectory()
        let second = try TemporaryDirectory()
        defer {
            first.remove()
            second.remove()
        }
        _ = try plugin(first, "dcprovider-alpha", "exit 0")
        _ = try plugin(second, "dcprovider-alpha", "exit 0")
        _ = try plugin(second, "dcprovider-beta", "exit 0")
        _ = try second.write("dcprovider-notexec", "x")
        _ = try plugin(second, "dcprovider-Bad_Name", "exit 0")
        let found = ExecProvider.discover(searchPath: "\(first.path):\(second.path):/nonexistent")
        #expect(found.map(\.name) == ["alpha", "beta"])
        #expect(found[0].path == first.file("dcprovider-alpha"))
    }
}
