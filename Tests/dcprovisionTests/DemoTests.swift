import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// Collects the command lines of a process and all its descendants while they run. (Other
/// tests run dcprovision at the same time; only the watched process tree counts.)
final class CommandLineWatcher: @unchecked Sendable {
    // `seen` and `running` are guarded by `lock`; the polling thread is the only writer of `seen`.
    private let lock = NSLock()
    private var seen = Set<String>()
    private var running = true

    static func parent(of pid: Int32) -> Int32? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 1 ? Int32(fields[1]) : nil
    }

    func start(root: Int32) {
        Thread {
            while self.lock.withLock({ self.running }) {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                    guard let pid = Int32(name) else { continue }
                    var ancestor: Int32? = pid
                    var depth = 0
                    while let current = ancestor, current != root, current > 1, depth < 16 {
                        ancestor = Self.parent(of: current)
                        depth += 1
                    }
                    guard ancestor == root,
                        let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty
                    else { continue }
                    let line = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
                    _ = self.lock.withLock { self.seen.insert(line) }
                }
                usleep(500)
            }
        }.start()
    }

    func stop() -> Set<String> {
        lock.withLock {
            running = false
            return seen
        }
    }
}

@Suite("dcprovision demo")
struct DemoTests {
    @Test("The round trip runs through real handler processes, and no secret is ever on a command line")
    func demo() throws {
        let watcher = CommandLineWatcher()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.dcprovision)
        process.arguments = ["demo", "--keep"]
        let outputPipe = Pipe()
        process.standardOutput = outputPipe
        process.standardError = outputPipe
        try process.run()
        watcher.start(root: process.processIdentifier)
        let outputData = outputPipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let commandLines = watcher.stop()
        #expect(process.terminationStatus == 0, "\(String(decoding: outputData, as: UTF8.self))")
        let output = String(decoding: outputData, as: UTF8.self)
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
            "Demo credential, renewed", "(+2 retired)", "queued: org.example.dcclient:/deliver",
            "announced availability",
            "delivering queued request",
        ] {
            #expect(output.contains(expected), "missing: \(expected)")
        }
        // The handlers really ran as processes launched through the scheme handlers.
        #expect(
            commandLines.contains {
                $0.contains("handle-url org.example.dcprovision:/new?v=1&client=dcclient&request=")
            })
        #expect(
            commandLines.contains {
                $0.contains("handle-url org.example.dcclient:/deliver?v=1&client=dcclient&request=")
            })
        #expect(commandLines.contains { $0.contains("handle-url org.example.dcprovision:/result?v=1&request=") })
        // No secret on any command line: not the client's passphrase, no PEM, no base64 blob (a long
        // mixed-case run; ids and digests are lowercase hex, paths are broken up by '/').
        let passphrase = try readText(sandbox + "/client-passphrase").trimmingCharacters(in: .whitespacesAndNewlines)
        let base64Run = try Regex("[A-Za-z0-9+]{48,}")
        for line in commandLines {
            #expect(!line.contains(passphrase))
            #expect(!line.contains("PRIVATE KEY") && !line.contains("BEGIN"))
            let blobs = line.matches(of: base64Run).map { String(line[$0.range]) }.filter {
                $0.contains(where: \.isUppercase)
            }
            #expect(blobs.isEmpty, "\(line)")
        }
        // Nothing is left in the spool, and the client's store holds no plaintext key.
        let spool = sandbox + "/home/.local/share/dcclient/spool"
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
        let store = sandbox + "/home/.local/share/dcclient/store"
        for name in try FileManager.default.contentsOfDirectory(atPath: store) where name != "processed" {
            let bytes = try readBytes(store + "/" + name)
            #expect(!String(decoding: bytes, as: UTF8.self).contains("PRIVATE KEY"), "\(name)")
        }
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
