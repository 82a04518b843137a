import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// Every program a command started, as `strace -f -e execve` saw it: one line per exec, with the
/// argv and (`-v`) the environment the child got. strace is the oracle: it records each exec as it
/// happens, however short-lived the process, which polling `/proc` cannot promise.
struct ExecTrace {
    let lines: [String]

    /// Runs `executable` under strace in `sandbox`, returning its result and the trace.
    static func run(_ executable: String, _ arguments: [String], in sandbox: TestSupport.Sandbox, timeout: TimeInterval)
        throws -> (ProcessResult, ExecTrace)
    {
        let traceFile = sandbox.file("execve.trace")
        let result = try sandbox.run(
            "strace",
            ["-f", "-qq", "-v", "-s", "1000000", "-e", "trace=execve", "-o", traceFile, executable] + arguments,
            timeout: timeout)
        let lines = try String(contentsOfFile: traceFile, encoding: .utf8).split(separator: "\n").map(String.init)
        return (result, ExecTrace(lines: lines.filter { $0.contains("execve(") && $0.hasSuffix("= 0") }))
    }

    /// The lines whose argv contains `text`.
    func execs(containing text: String) -> [String] { lines.filter { $0.contains(text) } }
}

@Suite("dcprovision demo", .ownThreads, .timeLimit(.minutes(3)))
struct DemoTests {
    @Test(
        "The round trip runs through real handler processes, and no secret reaches a child's argv or environment",
        .enabled(if: geteuid() == 0, notDumpableReason))
    func demo() throws {
        let box = try TestSupport.Sandbox("demo-trace")
        defer { box.remove() }
        let (result, trace) = try ExecTrace.run(Binaries.dcprovision, ["demo", "--keep"], in: box, timeout: 120)
        #expect(result.status == 0, "\(result.stdoutText)\(result.stderrText)")
        let output = result.stdoutText + result.stderrText
        let sandbox = try #require(
            output.split(separator: "\n").first.flatMap { line -> String? in
                guard let open = line.firstIndex(of: "("), let close = line.lastIndex(of: ")") else { return nil }
                return String(line[line.index(after: open)..<close])
            })
        defer { try? FileManager.default.removeItem(atPath: sandbox) }
        for expected in [
            "client support: present", "can send: the client's secure services are available",
            "sealed: CMS AuthEnvelopedData",
            "dcclient: received request", "(MAC verified)", "serviceUnavailable (AppConnect -1002)",
            "(exit status 69, as expected)",
            "Demo credential, renewed", "queued: org.example.dcclient:/deliver",
            // The renewal keeps the old encryption and escrow pairs (the escrow history, the same
            // two retired pairs in both credentials, once): a note encrypted before it opens after.
            "(+2 retired)", "(+4 retired)", "sealed \"Meet at the usual place at noon.\" to it",
            "$ dcclient decrypt $SANDBOX/note.p7m\n   Meet at the usual place at noon.",
            "announced availability",
            "delivering queued request",
            // The managed app's life after the delivery.
            "authorization:    authorized", "Quarterly report: confidential",
            "dcclient: policy 2: unauthorized: Your device is out of compliance",
            "the app is unauthorized: Your device is out of compliance", "(exit status 77, as expected)",
            "dcclient: policy 3: authorized", "acknowledged its authorization state (policy 4): applied",
            "dcclient: retired: keys, credential and secure files erased",
            // The auth token at the end: verified by a running dcverify, then revoked by the retire.
            "client dcclient (org.example.dcclient:)  authorized  policy 3",
            "auth-token delegation", "X-Good-GD-AuthResponseCode: 100 OK",
            "X-Good-GD-UserID: demo.user@example.com", "X-Good-GD-Server: app.example.com",
            "X-Good-GD-AuthResponseCode: 103 Revoked",
        ] {
            #expect(output.contains(expected), "missing: \(expected)")
        }
        // The handlers really ran as processes launched through the scheme handlers.
        for message in [
            "\"handle-url\", \"org.example.dcprovision:/new?v=2&client=dcclient&request=",
            "\"handle-url\", \"org.example.dcclient:/deliver?v=2&client=dcclient&request=",
            "\"handle-url\", \"org.example.dcprovision:/result?v=2&request=",
            "\"handle-url\", \"org.example.dcprovision:/available?v=2&client=dcclient&time=",
        ] {
            #expect(!trace.execs(containing: message).isEmpty, "no exec of \(message)")
        }
        let commandLines = trace.lines
        let passphrase = try String(contentsOfFile: sandbox + "/client-passphrase", encoding: .utf8)
            .trimmingCharacters(in: .newlines)
        let leaks = SecretEncodings.found(Array(passphrase.utf8), in: commandLines.joined(separator: "\n"))
        #expect(leaks.isEmpty, "the passphrase reached a child's argv or environment as \(leaks)")
        // No secret on any command line or in any child's environment: not the client's passphrase
        // in any encoding (above), no PEM, no base64 blob (a long mixed-case run; ids and digests are
        // lowercase hex, paths are broken up by '/').
        let base64Run = try Regex("[A-Za-z0-9+]{48,}")
        for line in commandLines {
            #expect(!line.contains("PRIVATE KEY") && !line.contains("BEGIN"))
            let blobs = line.matches(of: base64Run).map { String(line[$0.range]) }.filter {
                $0.contains(where: \.isUppercase)
            }
            #expect(blobs.isEmpty, "\(line)")
        }
        // The app was retired: no spool, and the store keeps only its configuration and the
        // policy that retired it (with its number and the provider key it verifies with).
        #expect(!FileManager.default.fileExists(atPath: sandbox + "/home/.local/share/dcclient/apps/dcclient/spool"))
        let store = sandbox + "/home/.local/share/dcclient/apps/dcclient/store"
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: store)) == [
                ".lock", "client.json", "policy.json", "policy.sequence", "provider.json",
            ])
    }

    @Test("Without a dcverify next to it (a fresh clone's swift run), the demo verifies auth tokens in its own process")
    func withoutVerificationService() throws {
        let box = try TestSupport.Sandbox("demo-no-dcverify")
        defer { box.remove() }
        // dcprovision and dcclient alone in a directory, as `swift run dcprovision demo` builds them
        // (hard links where the file system allows, else copies: the demo looks next to the binary).
        let bin = box.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        for tool in ["dcprovision", "dcclient"] {
            do {
                try FileManager.default.linkItem(atPath: Binaries.directory + "/" + tool, toPath: bin + "/" + tool)
            } catch {
                try FileManager.default.copyItem(atPath: Binaries.directory + "/" + tool, toPath: bin + "/" + tool)
            }
        }
        let result = try box.run(bin + "/dcprovision", ["demo"], timeout: 120)
        #expect(result.status == 0, "\(result.stdoutText)\(result.stderrText)")
        let output = result.stdoutText
        for expected in [
            "dcverify, the verification service application servers call, is not built here",
            "AuthTokenVerifier.verify(<the token>)", "response code: 100 OK", "user: demo.user@example.com",
            "server: app.example.com", "response code: 103 Revoked", "Sandbox removed.",
        ] {
            #expect(output.contains(expected), "missing: \(expected)")
        }
        #expect(!output.contains("$ dcverify serve"))
    }

    @Test("Without --keep the sandbox is removed")
    func cleansUp() throws {
        let result = try run(Binaries.dcprovision, ["demo"], timeout: 120)
        #expect(result.status == 0)
        let line = try #require(result.stdoutText.split(separator: "\n").first)
        let sandbox = String(line[line.index(after: line.firstIndex(of: "(")!)..<line.lastIndex(of: ")")!])
        #expect(!FileManager.default.fileExists(atPath: sandbox))
        #expect(result.stdoutText.contains("Sandbox removed."))
    }
}
