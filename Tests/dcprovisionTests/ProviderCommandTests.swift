import DerivedCredentials
import Foundation
import TestSupport
import Testing

private func dcprovision(_ arguments: [String], environment: [String: String]? = nil) throws -> ProcessResult {
    var env = try Sandbox.shared().environment
    for (key, value) in environment ?? [:] { env[key] = value }
    return try run(Binaries.dcprovision, arguments, environment: env, timeout: 60)
}

private let sampleFolder = Repository.root + "/Samples/exec-provider"

/// A test CA in `dir/ca` and a credential it issued as PEM files in `dir/issued`, the folder the
/// sample exec provider reads.
private func issuePEMFolder(in dir: TemporaryDirectory) throws {
    #expect(try dcprovision(["testca", "init", dir.file("ca")]).status == 0)
    #expect(
        try dcprovision(["testca", "issue", dir.file("ca"), "--out-dir", dir.file("issued"), "--format", "pem"])
            .status == 0)
}

@Suite("dcprovision testca, providers, and provider sources", .ownThreads, .timeLimit(.minutes(3)))
struct ProviderCommandTests {
    @Test("testca init, issue (der and pem), and the output reads back through its manifest")
    func testCA() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let ca = dir.file("ca")
        let created = try dcprovision(["testca", "init", ca, "--algorithm", "p384"])
        #expect(created.status == 0, "\(created.stderrText)")
        #expect(try dcprovision(["testca", "init", ca]).status == 73)  // never overwritten

        let der = try dcprovision(["testca", "issue", ca, "--out-dir", dir.file("der"), "--escrow-history", "2"])
        #expect(der.status == 0, "\(der.stderrText)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: dir.file("der")).sorted() == [
                "authentication.cert.der", "authentication.key.der", "chain.pem", "encryption.cert.der",
                "encryption.key.der",
                "escrow-history-1.cert.der", "escrow-history-1.key.der", "escrow-history-2.cert.der",
                "escrow-history-2.key.der",
                "escrow.cert.der", "escrow.key.der", "manifest.json", "signing.cert.der", "signing.key.der",
            ])
        let pem = try dcprovision([
            "testca", "issue", ca, "--out-dir", dir.file("pem"), "--format", "pem", "--common-name", "Bob",
        ])
        #expect(pem.status == 0, "\(pem.stderrText)")
        for folder in ["der", "pem"] {
            let inspected = try dcprovision([
                "inspect", "--manifest", dir.file("\(folder)/manifest.json"), "--trust-anchor",
                dir.file("\(folder)/chain.pem"),
                "--strict",
            ])
            #expect(inspected.status == 0, "\(inspected.stdoutText)\(inspected.stderrText)")
            #expect(inspected.stdoutText.contains("EC P-384"))
        }
        // A negative profile is only made when asked, and fails validation.
        let broken = try dcprovision(["inspect", "--testca", ca, "--option", "negative=wrong-key-usage"])
        #expect(broken.status == 65)
        #expect(broken.stdoutText.contains("key-usage-insufficient"))
    }

    @Test("inspect and convert take --testca and --provider sources")
    func providerSources() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let ca = dir.file("ca")
        #expect(try dcprovision(["testca", "init", ca]).status == 0)
        let inspected = try dcprovision(["inspect", "--testca", ca, "--option", "common-name=Carol", "--json"])
        #expect(inspected.status == 0, "\(inspected.stderrText)")
        #expect(inspected.stdoutText.contains("CN=Carol"))
        let viaId = try dcprovision(["inspect", "--provider", "testca", "--option", "dir=\(ca)"])
        #expect(viaId.status == 0, "\(viaId.stderrText)")
        let converted = try dcprovision(["convert", "--testca", ca, "--out-dir", dir.file("out")])
        #expect(converted.status == 0, "\(converted.stderrText)")
        #expect(FileManager.default.fileExists(atPath: dir.file("out/signing.key.der")))
        // Mixing source families, or an unknown option, is a usage error.
        #expect(try dcprovision(["inspect", "--testca", ca, "--pem", "signing=/x"]).status == 64)
        #expect(try dcprovision(["inspect", "--testca", ca, "--option", "colour=blue"]).status == 64)
        #expect(try dcprovision(["inspect", "--provider", "nosuch"]).status == 64)
    }

    @Test("A plug-in that exits without reading its request: exit 69, not killed by SIGPIPE")
    func deafPlugin() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // It closes its input and keeps running, so our next write meets a closed pipe.
        let path = try dir.write("dcprovider-deaf", "#!/bin/bash\nexec 0<&-\nsleep 0.5\nexit 4\n")
        chmod(path, 0o755)
        // Ten 100 KB options: a request far larger than a pipe buffer, so the write meets the closed pipe.
        let padding = (0..<10).flatMap { ["--option", "p\($0)=" + String(repeating: "x", count: 100_000)] }
        let result = try dcprovision(["inspect", "--provider", "exec:\(path)"] + padding)
        #expect(result.status == 69, "\(result.stderrText)")
        #expect(result.stderrText.contains("exited with status 4"))
    }

    @Test("A plug-in that answers and leaves a detached grandchild holding its stdout: the answer is used at once")
    func detachedGrandchild() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try issuePEMFolder(in: dir)
        // The grandchild leaves the plug-in's process group and session (setsid) and keeps its
        // stdout and stderr open for 30 s; the plug-in then becomes the sample provider and answers.
        // The sample sits next to the plug-in: a plug-in reads its own directory.
        let marker = "dcdetached-\(UUID().uuidString)"
        let sample = try dir.write("dcprovider-sample", try readText(sampleFolder + "/dcprovider-sample"))
        chmod(sample, 0o755)
        let path = try dir.write(
            "dcprovider-detach", "#!/bin/bash\nsetsid bash -c 'exec -a \(marker) sleep 30' &\nexec '\(sample)'\n")
        chmod(path, 0o755)
        defer { _ = try? run("pkill", ["-f", marker]) }
        let started = ContinuousClock.now
        let result = try dcprovision(["inspect", "--provider", "exec:\(path)", "--option", "dir=\(dir.file("issued"))"])
        let elapsed = ContinuousClock.now - started
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(result.stdoutText.contains("authentication"), "\(result.stdoutText)")
        // Not the grandchild's 30 s: the plug-in's exit plus a short grace (loose for a loaded machine).
        #expect(elapsed < .seconds(10), "dcprovision took \(elapsed)")
    }

    @Test("Exec providers: found on DCPROVISION_PROVIDER_PATH, listed, and used by name or path")
    func execProviders() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try issuePEMFolder(in: dir)
        let environment = ["DCPROVISION_PROVIDER_PATH": sampleFolder]

        let listing = try dcprovision(["providers"], environment: environment)
        #expect(listing.status == 0)
        #expect(listing.stdoutText.contains("pem  [built-in]"))
        #expect(listing.stdoutText.contains("testca  [built-in]"))
        #expect(listing.stdoutText.contains("sample  [exec]  Sample exec provider (PEM folder), version 1.0"))
        let json = try dcprovision(["providers", "--json"], environment: environment)
        let entries = try jsonPayload(json.stdout, "providers") as? [[String: Any]]
        #expect(entries?.map { $0["id"] as? String } == ["cmp", "derive", "pem", "pkcs11", "sample", "testca"])

        let byName = try dcprovision(
            ["inspect", "--provider", "sample", "--option", "dir=\(dir.file("issued"))"], environment: environment)
        #expect(byName.status == 0, "\(byName.stderrText)")
        #expect(byName.stderrText.contains("dcprovider-sample: sample provider: reading the folder"))
        let byPath = try dcprovision([
            "inspect", "--provider", "exec:\(sampleFolder)/dcprovider-sample", "--option", "dir=\(dir.file("issued"))",
        ])
        #expect(byPath.status == 0, "\(byPath.stderrText)")
        let failing = try dcprovision(["inspect", "--provider", "exec:\(sampleFolder)/dcprovider-sample"])
        #expect(failing.status == 64)
        #expect(failing.stderrText.contains("the provider reported usage: give the option dir=FOLDER once"))
    }

    @Test("A plug-in's exit status is judged even when dcprovision was started with SIGCHLD ignored")
    func ignoredSIGCHLD() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // A plug-in that answers well-formed JSON and then exits 3: only its status gives it away.
        let plugin = try dir.write(
            "dcprovider-liar",
            """
            #!/bin/sh
            cat > /dev/null
            echo '{"protocol":1,"credential":{"entries":[]}}'
            exit 3

            """)
        #expect(chmod(plugin, 0o755) == 0)
        // A parent that ignores SIGCHLD passes that on through exec (python3 sets it, then execs).
        let started = try run(
            "/usr/bin/python3",
            [
                "-c",
                "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                    + "os.execv(sys.argv[1], sys.argv[1:])",
                Binaries.dcprovision, "inspect", "--provider", "exec:\(plugin)",
            ], environment: try Sandbox.shared().environment, timeout: 60)
        #expect(started.status == 69, "\(started.stderrText)")
        #expect(started.stderrText.contains("the provider exited with status 3"), "\(started.stderrText)")
    }
}
