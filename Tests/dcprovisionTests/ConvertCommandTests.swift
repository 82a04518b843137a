import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

private func dcprovision(_ arguments: [String], stdin: [UInt8]? = nil) throws -> ProcessResult {
    try run(Binaries.dcprovision, arguments, stdin: stdin, timeout: 30)
}

@Suite("dcprovision convert", .ownThreads, .timeLimit(.minutes(3)))
struct ConvertCommandTests {
    @Test("Writes DER certificates and a 0600 PKCS#8 key, identical to the openssl CLI")
    func converts() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pass = try dir.write("pass", fixturePassphrase + "\n")
        let p12 = try dir.write(
            "alice.p12",
            try OpenSSLFixtures.openssl([
                "pkcs12", "-export", "-inkey", f.signing.key, "-in", f.signing.certificate, "-certfile",
                f.ca.certificate,
                "-passout", "file:\(pass)",
            ]))
        let out = dir.file("out")
        let result = try dcprovision([
            "convert", p12, f.encryption.certificate, "--out-dir", out, "--passphrase-file", pass,
        ])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: out).sorted() == [
                "alice.2.cert.der", "alice.cert.der", "alice.key.der", "encryption.cert.der",
            ])
        #expect(result.stdoutText.split(separator: "\n").count == 4)
        #expect(
            try readBytes(out + "/alice.cert.der")
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.signing.certificate, "-outform", "DER"])))
        #expect(
            try readBytes(out + "/encryption.cert.der")
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.encryption.certificate, "-outform", "DER"])))
        #expect(
            try readBytes(out + "/alice.2.cert.der")
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.ca.certificate, "-outform", "DER"])))
        #expect(
            try readBytes(out + "/alice.key.der")
                == (try OpenSSLFixtures.openssl([
                    "pkcs8", "-topk8", "-nocrypt", "-in", f.signing.key, "-outform", "DER",
                ])))
        var info = stat()
        stat(out + "/alice.key.der", &info)
        #expect(info.st_mode & 0o777 == 0o600)
        stat(out, &info)
        #expect(info.st_mode & 0o777 == 0o700)
    }

    @Test(
        "Durable before published: into a new directory, every file and the staging directory are synced before the directory gets its name, and the parent after",
        .enabled(if: geteuid() == 0, notDumpableReason), arguments: [1, 12])
    func durableBeforeDirectoryPublished(files: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let out = dir.file("out")
        let done = try tracedConversion(of: files, in: dir, calls: "fsync,rename,renameat,renameat2")
        let lines = done.map(\.call)
        let publish = try #require(done.last { $0.call.contains("rename") && $0.call.contains("\"out\"") }?.line)
        let before = done.filter { $0.line < publish && $0.call.contains("fsync(") && $0.call.hasSuffix(") = 0") }
            .map(\.call)
        let stagedSyncs = before.filter { $0.contains("/.out\(AtomicFileSet.stagingMarker)") && $0.contains("/.c") }
        #expect(stagedSyncs.count == files, "a fsync of each staged file before the directory's rename: \(lines)")
        #expect(
            before.contains { $0.contains("/.out\(AtomicFileSet.stagingMarker)") && !$0.contains("/.c") },
            "the staging directory synced before its rename: \(lines)")
        let parent = (dir.path as NSString).lastPathComponent
        #expect(
            done.contains { $0.line > publish && $0.call.contains("fsync(") && $0.call.contains("/\(parent)>") },
            "the parent directory synced after the rename: \(lines)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: out).count == files)
    }

    @Test(
        "Durable before published: into a directory that holds files, every staged file is synced (fsync) before any output name appears, and the directory is synced after the last",
        .enabled(if: geteuid() == 0, notDumpableReason), arguments: [1, 12])
    func durableBeforePublished(files: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(mkdir(dir.file("out"), 0o700) == 0)
        _ = try dir.write("out/README", "not ours\n")
        let calls = try tracedConversion(of: files, in: dir, calls: "fsync,linkat").map(\.call)
        let firstLink = try #require(calls.firstIndex { $0.contains("linkat(") })
        let lastLink = try #require(calls.lastIndex { $0.contains("linkat(") })
        let stagedSyncs = calls[..<firstLink].filter {
            $0.contains("fsync(") && $0.contains(AtomicFileSet.stagingMarker) && $0.hasSuffix("= 0")
        }
        #expect(stagedSyncs.count == files, "a fsync of each staged file before the first link: \(calls)")
        #expect(
            calls[lastLink...].contains { $0.contains("fsync(") && $0.hasSuffix("/out>) = 0") },
            "the output directory synced after the last link: \(calls)")
    }

    @Test(
        "kill -9 at random points during 100 conversions into a new directory: the directory is absent or complete, never partial, and the next run clears the staging files"
    )
    func killDuringConversions() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let certificate = try String(contentsOfFile: f.signing.certificate, encoding: .utf8)
        let key = try String(contentsOfFile: f.signing.key, encoding: .utf8)
        var inputs: [String] = []
        for index in 1...20 {
            inputs.append(try dir.write("pair-\(index).crt", certificate))
            inputs.append(try dir.write("pair-\(index).key", key))
        }
        // The complete output, and how long a whole run takes (the quickest of three: the first
        // one loads a cold binary): the kills land within that time.
        let reference = dir.file("reference")
        var runtime = Duration.seconds(60)
        for attempt in 0..<3 {
            let started = ContinuousClock.now
            let process = try SpawnedProcess(
                Binaries.dcprovision, ["convert"] + inputs + ["--out-dir", reference, "--force"])
            let status = process.wait()
            runtime = min(runtime, ContinuousClock.now - started)
            #expect(status == 0, "reference run \(attempt)")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: reference).sorted()
        #expect(names.count == 40)
        let expected = try Dictionary(uniqueKeysWithValues: names.map { ($0, try readBytes(reference + "/" + $0)) })
        let microseconds =
            Int(runtime.components.seconds) * 1_000_000 + Int(runtime.components.attoseconds / 1_000_000_000_000)
        var killedMidway = 0
        for round in 0..<100 {
            let out = dir.file("out-\(round)")
            let process = try SpawnedProcess(Binaries.dcprovision, ["convert"] + inputs + ["--out-dir", out])
            usleep(useconds_t.random(in: 0...useconds_t(max(1_000, microseconds))))
            process.kill()
            if let status = process.wait(), SpawnedProcess.wasSignaled(status) { killedMidway += 1 }
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []
            let published = entries.filter { !$0.hasPrefix(".") }.sorted()
            #expect(
                entries.allSatisfy { !$0.hasPrefix(".") || $0.contains(AtomicFileSet.stagingMarker) },
                "round \(round): \(entries)")
            // None or all: the set appears with its directory's name, in one rename.
            #expect(published.isEmpty || published == names, "round \(round): \(published)")
            for name in published {
                #expect(try readBytes(out + "/" + name) == expected[name], "round \(round): \(name) is not whole")
            }
            // Run again (--force replaces a complete set): the killed run's staging files go.
            #expect(try dcprovision(["convert"] + inputs + ["--out-dir", out, "--force"]).status == 0)
            #expect(try FileManager.default.contentsOfDirectory(atPath: out).sorted() == names, "round \(round)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter {
                $0.contains(AtomicFileSet.stagingMarker)
            }
            #expect(leftovers.isEmpty, "round \(round): \(leftovers)")
        }
        #expect(killedMidway > 10, "the kills should land while the conversion runs (\(killedMidway) did)")
    }

    @Test(
        "Any refused input means nothing is written, with the input's exit status",
        arguments: HostileInput.all.filter { $0.maximumIterations == nil })
    func refusesAll(input: HostileInput) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad = try input.make(dir)
        let out = dir.file("out")
        var arguments = ["convert", f.authentication.certificate, f.authentication.key, bad, "--out-dir", out]
        if let passphrase = input.passphrase {
            arguments += ["--passphrase-file", try dir.write("pass", passphrase + "\n")]
        }
        let result = try dcprovision(arguments)
        #expect(result.status == input.expected.category.exitStatus, "\(result.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: out))
        #expect(result.stdout.isEmpty)
        // One line on stderr, naming the input, no stack trace, no secret.
        let lines = result.stderrText.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(lines.first?.hasPrefix("dcprovision: \(bad):") == true)
        #expect(!result.stderrText.contains(fixturePassphrase))
    }

    @Test(
        "An existing output directory, empty or not, keeps its mode and its other files; a parent reached through a symbolic link is followed"
    )
    func existingDirectories() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let empty = dir.file("empty")
        #expect(mkdir(empty, 0o750) == 0)
        chmod(empty, 0o750)
        var before = stat()
        #expect(stat(empty, &before) == 0)
        #expect(try dcprovision(["convert", f.authentication.certificate, "--out-dir", empty]).status == 0)
        var info = stat()
        #expect(stat(empty, &info) == 0 && info.st_mode & 0o7777 == 0o750)
        #expect(info.st_ino == before.st_ino, "the directory itself is kept, not replaced")
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty) == ["authentication.cert.der"])
        let shared = dir.file("shared")
        #expect(mkdir(shared, 0o700) == 0)
        _ = try dir.write("shared/notes.txt", "mine\n")
        #expect(try dcprovision(["convert", f.authentication.certificate, "--out-dir", shared]).status == 0)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: shared).sorted() == [
                "authentication.cert.der", "notes.txt",
            ])
        #expect(try readText(dir.file("shared/notes.txt")) == "mine\n")
        // --out-dir LINK/new, where LINK is a symbolic link to a directory.
        #expect(mkdir(dir.file("real"), 0o700) == 0)
        #expect(symlink(dir.file("real"), dir.file("link")) == 0)
        let result = try dcprovision(["convert", f.authentication.certificate, "--out-dir", dir.file("link/new")])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(FileManager.default.fileExists(atPath: dir.file("real/new/authentication.cert.der")))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy {
                !$0.contains(AtomicFileSet.stagingMarker)
            })
    }

    @Test(
        "Attack: the stale-staging cleanup never follows a link planted under a staging name, and never empties another user's directory"
    )
    func staleCleanupAttacks() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // A dead writer's name (pid 2^22 + 1 is above any pid_max) pointing at a victim directory.
        #expect(mkdir(dir.file("victim"), 0o700) == 0)
        _ = try dir.write("victim/precious", "keep me\n")
        #expect(symlink(dir.file("victim"), dir.file(".out\(AtomicFileSet.stagingMarker)4194305-1")) == 0)
        // Another user's directory under a dead writer's name (as root only: only root can make one).
        let foreign = dir.file(".out\(AtomicFileSet.stagingMarker)4194305-2")
        if geteuid() == 0 {
            #expect(mkdir(foreign, 0o755) == 0)
            _ = try dir.write(".out\(AtomicFileSet.stagingMarker)4194305-2/theirs", "not yours\n")
            #expect(chown(foreign, 65534, 65534) == 0)
        }
        let result = try dcprovision(["convert", f.authentication.certificate, "--out-dir", dir.file("out")])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(try readText(dir.file("victim/precious")) == "keep me\n")
        if geteuid() == 0 {
            #expect(try readText(foreign + "/theirs") == "not yours\n")
        }
    }

    @Test("Existing outputs are kept unless --force")
    func existingOutputs() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let out = dir.file("out")
        #expect(try dcprovision(["convert", f.authentication.certificate, "--out-dir", out]).status == 0)
        let replaced = try dir.write("out/authentication.cert.der", "previous")
        let refused = try dcprovision(["convert", f.authentication.certificate, "--out-dir", out])
        #expect(refused.status == 73)
        #expect(try readText(replaced) == "previous")
        #expect(try dcprovision(["convert", f.authentication.certificate, "--out-dir", out, "--force"]).status == 0)
        #expect(try readText(replaced) != "previous")
    }

    @Test("A full disk (a file-size limit) is a clean I/O error and leaves nothing behind")
    func fullDisk() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let out = dir.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        // prlimit caps the size of any file the process writes; the key files exceed it.
        let result = try run(
            "prlimit",
            ["--fsize=300", Binaries.dcprovision, "convert", f.encryption.key, f.signing.certificate, "--out-dir", out])
        #expect(result.status == 74, "\(result.stderrText)")
        #expect(result.stderrText.contains("File too large"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: out).isEmpty)
    }

    @Test("Exit statuses: usage 64, missing input 66, unknown tag 64")
    func exitStatuses() throws {
        #expect(try dcprovision(["convert"]).status == 64)
        #expect(try dcprovision(["convert", "/nonexistent.pem", "--out-dir", "/tmp/x"]).status == 66)
        #expect(try dcprovision(["inspect", "--pem", "nosuchtag=/a.pem"]).status == 64)
        #expect(
            try dcprovision(["convert", "a", "--out-dir", "b", "--passphrase-file", "x", "--passphrase-fd", "0"]).status
                == 64)
    }
}

@Suite("Passphrase sources", .ownThreads, .timeLimit(.minutes(3)))
struct PassphraseCommandTests {
    private func encryptedKey(_ dir: TemporaryDirectory) throws -> String {
        let pass = try dir.write("pass", fixturePassphrase + "\n")
        return try dir.write(
            "enc.pem",
            try OpenSSLFixtures.openssl(["pkcs8", "-topk8", "-in", f.authentication.key, "-passout", "file:\(pass)"]))
    }

    @Test("From a file, from a descriptor, with CRLF")
    func fileAndDescriptor() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let key = try encryptedKey(dir)
        let crlf = try dir.write("crlf", fixturePassphrase + "\r\n")
        #expect(try dcprovision(["convert", key, "--out-dir", dir.file("a"), "--passphrase-file", crlf]).status == 0)
        let viaFd = try dcprovision(
            ["convert", key, "--out-dir", dir.file("b"), "--passphrase-fd", "0"],
            stdin: Array((fixturePassphrase + "\n").utf8))
        #expect(viaFd.status == 0, "\(viaFd.stderrText)")
        let wrong = try dcprovision(
            ["convert", key, "--out-dir", dir.file("c"), "--passphrase-fd", "0"], stdin: Array("nope\n".utf8))
        #expect(wrong.status == 77)
        #expect(!FileManager.default.fileExists(atPath: dir.file("c")))
    }

    @Test("With no source, encrypted input is refused at once, even on a terminal: no prompt")
    func noPromptOnTerminal() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let key = try encryptedKey(dir)
        // script(1) gives the command a pseudo-terminal as stdin/stdout, where OpenSSL's default
        // callback would prompt and block. The timeout turns a hang into a failure.
        let command = "\(Binaries.dcprovision) convert \(key) --out-dir \(dir.file("out")); echo \"exit=$?\""
        let result = try run("script", ["-qec", command, "/dev/null"], timeout: 20)
        #expect(result.stdoutText.contains("exit=77"), "\(result.stdoutText)")
        #expect(result.stdoutText.contains("no passphrase was given"))
        #expect(!result.stdoutText.lowercased().contains("enter pem pass phrase"))
        #expect(!FileManager.default.fileExists(atPath: dir.file("out")))
    }

    @Test("--passphrase-prompt asks on the terminal, once, without echo")
    func promptWhenAsked() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let key = try encryptedKey(dir)
        let command =
            "\(Binaries.dcprovision) convert \(key) --out-dir \(dir.file("out")) --passphrase-prompt; echo \"exit=$?\""
        // The answer is typed a moment after the prompt appears, as a person would; bash only
        // delays the test's stdin into script(1), which relays it to the pseudo-terminal.
        let result = try run(
            "bash", ["-c", "{ sleep 1; cat; } | script -qec \"$0\" /dev/null", command],
            stdin: Array((fixturePassphrase + "\n").utf8), timeout: 20)
        #expect(result.stdoutText.contains("exit=0"), "\(result.stdoutText)")
        #expect(result.stdoutText.contains("Passphrase for"))
        #expect(!result.stdoutText.contains(fixturePassphrase))  // echo was off
        #expect(FileManager.default.fileExists(atPath: dir.file("out/enc.key.der")))
    }

    @Test("--passphrase-prompt without a terminal is refused, not hung")
    func promptWithoutTerminal() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try dcprovision(
            ["convert", try encryptedKey(dir), "--out-dir", dir.file("out"), "--passphrase-prompt"], stdin: [])
        #expect(result.status == 77)
        #expect(result.stderrText.contains("needs a terminal"))
    }
}

/// Converts `files` certificates (`c1.pem`…) into `dir`/out under strace, which records the system
/// calls named in `calls` in the order the kernel saw them, from every thread (-f), each
/// descriptor shown with its path (-y); returns them as ``finishedCalls(_:)`` reads them.
private func tracedConversion(of files: Int, in dir: TemporaryDirectory, calls: String) throws -> [(
    line: Int, call: String
)] {
    let certificate = try String(contentsOfFile: f.encryption.certificate, encoding: .utf8)
    let inputs = try (1...files).map { try dir.write("c\($0).pem", certificate) }
    let trace = dir.file("sync.trace")
    let result = try run(
        "strace",
        ["-f", "-qq", "-y", "-e", "trace=" + calls, "-o", trace, Binaries.dcprovision, "convert"] + inputs + [
            "--out-dir", dir.file("out"),
        ],
        timeout: 60)
    #expect(result.status == 0, "\(result.stderrText)")
    return try finishedCalls(trace)
}

/// The calls in an `strace -f` log, each with the index of the line that shows its result. With
/// several threads, strace splits a call that another thread interrupts into
/// `fsync(5</path> <unfinished ...>` and, later, `<... fsync resumed>)   = 0` on the same thread;
/// such a call is joined into one, done at the line of its result, and runs of spaces are
/// collapsed.
private func finishedCalls(_ trace: String) throws -> [(line: Int, call: String)] {
    var pending: [Substring: String] = [:]
    var done: [(line: Int, call: String)] = []
    for (index, line) in try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").enumerated() {
        let thread = line.prefix { $0 != " " }
        if line.hasSuffix("<unfinished ...>") {
            pending[thread] = String(line.dropLast("<unfinished ...>".count)).trimmingCharacters(in: .whitespaces)
        } else if line.contains(" resumed>") {
            let rest = line.drop { $0 != ">" }.dropFirst()
            done.append((index, (pending.removeValue(forKey: thread) ?? String(thread) + " ?(") + rest))
        } else {
            done.append((index, String(line)))
        }
    }
    return done.map { ($0.line, $0.call.split(whereSeparator: \.isWhitespace).joined(separator: " ")) }
}

/// Why the tests that read strace's decoded arguments run as root only: the tools are not dumpable
/// (they may hold secrets), so strace run by an ordinary user cannot read their memory, and sees
/// the system calls but not the paths and strings they pass. The run as root (scripts/test runs the
/// suite both ways) holds these tests.
let notDumpableReason: Comment =
    "strace as an ordinary user cannot read the arguments of a tool that is not dumpable: run as root"
