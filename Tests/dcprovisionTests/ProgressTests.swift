import Foundation
import TestSupport
import Testing

/// `command` run by bash under script(1), which gives it a pseudo-terminal as standard input,
/// output and error; what it printed there comes back on script's standard output.
private func onTerminal(_ command: String, in sandbox: Sandbox? = nil, timeout: TimeInterval = 120) throws -> String {
    guard let sandbox else { return try run("script", ["-qec", command, "/dev/null"], timeout: timeout).stdoutText }
    return try sandbox.run("script", ["-qec", command, "/dev/null"], timeout: timeout).stdoutText
}

@Suite("Progress where time goes, silence where it does not", .ownThreads, .timeLimit(.minutes(5)))
struct ProgressTests {
    @Test(
        "testca issue of 24 RSA keys draws one line redrawn with \\r on a terminal; a pipe and --quiet get none")
    func batchIssuance() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let ca = dir.file("ca")
        #expect(try run(Binaries.dcprovision, ["testca", "init", ca, "--key-algorithm", "rsa2048"]).status == 0)
        let issue = "\(Binaries.dcprovision) testca issue \(ca) --escrow-history 20 --key-algorithm rsa2048"
        let terminal = try onTerminal("\(issue) --out-dir \(dir.file("a")) >/dev/null; echo \"exit=$?\"")
        #expect(terminal.contains("exit=0"), "\(terminal)")
        // One line, redrawn in place: carriage returns and no line of its own per key.
        #expect(terminal.contains("\rdcprovision: issuing keys "), "\(terminal.debugDescription)")
        #expect(terminal.contains("/24"))
        #expect(!terminal.contains("issuing keys 1/24\n"))
        let quiet = try onTerminal("\(issue) --out-dir \(dir.file("b")) --quiet >/dev/null; echo \"exit=$?\"")
        #expect(quiet.contains("exit=0"))
        #expect(!quiet.contains("issuing"), "\(quiet.debugDescription)")
        let piped = try run(
            Binaries.dcprovision,
            [
                "testca", "issue", ca, "--escrow-history", "20", "--key-algorithm", "rsa2048", "--out-dir",
                dir.file("c"),
            ],
            timeout: 120)
        #expect(piped.status == 0)
        #expect(piped.stderr.isEmpty, "\(piped.stderrText)")
    }

    @Test("A conversion of 50 files under a second prints no progress on a terminal, and a count instead of 50 paths")
    func fastConversionIsQuiet() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let certificate = try readBytes(OpenSSLFixtures.shared.authentication.certificate)
        let inputs = try (1...50).map { try dir.write("c\($0).pem", certificate) }
        try inputs.joined(separator: "\n").write(toFile: dir.file("list"), atomically: false, encoding: .utf8)
        let command =
            "xargs -a \(dir.file("list")) \(Binaries.dcprovision) convert --out-dir \(dir.file("out")); echo \"exit=$?\""
        let terminal = try onTerminal(command)
        #expect(terminal.contains("exit=0"), "\(terminal)")
        #expect(!terminal.contains("reading"), "\(terminal)")
        #expect(terminal.contains("50 files written into \(dir.file("out"))"))
        #expect(terminal.split(whereSeparator: \.isNewline).count == 2, "\(terminal)")
        // A pipe gets every path, for scripts.
        let piped = try run(
            Binaries.dcprovision, ["convert", "--out-dir", dir.file("piped")] + inputs, timeout: 60)
        #expect(piped.status == 0)
        #expect(piped.stdoutText.split(separator: "\n").count == 50)
        #expect(piped.stderr.isEmpty)
    }
}

/// Secure-file transfers that outlast the progress delay. The transfer is held back by a real pipe
/// (the data comes in two parts two seconds apart, or the reader starts two seconds late) rather
/// than by a large file, so the test takes the same time on a fast disk as on a slow one.
@Suite("Progress for secure files put and get", .ownThreads, .timeLimit(.minutes(3)))
struct SecureFileProgressTests {
    @Test("files put and get longer than a second draw one line of bytes on a terminal; --quiet and a pipe get none")
    func transfers() throws {
        let tools = try Tools("files-progress")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let dcclient = Binaries.directory + "/dcclient"
        let slowly = "{ head -c 1048576 /dev/zero; sleep 2; head -c 1048576 /dev/zero; }"
        let put = try onTerminal("\(slowly) | \(dcclient) files put big; echo \"exit=$?\"", in: tools.sandbox)
        #expect(put.contains("exit=0"), "\(put)")
        #expect(put.contains("\rdcclient: storing big 1.0 MiB"), "\(put.debugDescription)")
        #expect(put.contains("stored big"))
        // The line is cleared before what comes next: no "storing" line of its own.
        #expect(!put.contains("storing big 1.0 MiB\n"), "\(put.debugDescription)")
        let quiet = try onTerminal(
            "\(slowly) | \(dcclient) files put big2 --quiet; echo \"exit=$?\"", in: tools.sandbox)
        #expect(quiet.contains("exit=0"))
        #expect(!quiet.contains("storing"), "\(quiet.debugDescription)")

        // get: standard output is a pipe whose reader starts late, standard error the terminal.
        let get = try onTerminal(
            "\(dcclient) files get big | { sleep 2; wc -c; }; echo \"exit=$?\"", in: tools.sandbox)
        #expect(get.contains("2097152"), "\(get.debugDescription)")
        #expect(get.contains("\rdcclient: reading big "), "\(get.debugDescription)")
        // Everything piped: no progress, only the data.
        let piped = try tools.sandbox.run(
            "bash", ["-c", "\(dcclient) files get big | { sleep 2; wc -c; }"], timeout: 60)
        #expect(piped.stdoutText.contains("2097152"))
        #expect(piped.stderr.isEmpty, "\(piped.stderrText)")
    }
}
