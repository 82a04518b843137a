import Foundation
import ServiceHarness
import TestSupport
import Testing

/// A flood of requests does not flood the log: per-request lines are limited, the summary counts
/// every request exactly, errors always get through, and no line holds a token or a challenge.
@Suite("dcverify's log under load: bounded, counted exactly, without secrets", .ownThreads, .timeLimit(.minutes(3)))
struct LogFloodTests {
    @Test(
        "3,000 requests make at most 10 request lines a second, and the summary at exit counts each outcome exactly; an error during the flood is logged; no token or challenge in the log",
        .timeLimit(.minutes(1)))
    func floodIsSummarized() throws {
        let sandbox = try Sandbox("dcverify-log-flood")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        let garbage = "tok-garbage-secret-4711"
        // Each kind of request 600 times: 100 OK, 102, 103, 101 and 400 (no token).
        let kinds: [(token: String?, key: String)] = [
            (Tokens.valid, "dc.code.100"), (Tokens.expired, "dc.code.102"), (Tokens.revoked, "dc.code.103"),
            (garbage, "dc.code.101"), (nil, "dc.refused"),
        ]
        let start = ContinuousClock.now
        // Pipelined on five kept-alive connections, 50 requests a write.
        let connections = try (0..<5).map { _ in try RawConnection(port: service.port) }
        for round in 0..<12 {
            for (connection, kind) in zip(connections, kinds) {
                let request =
                    "GET /verifyGDAuthToken HTTP/1.1\r\nHost: x\r\n"
                    + (kind.token.map { "X-Good-GD-AuthToken: \($0)\r\n" } ?? "") + "\r\n"
                connection.send(String(repeating: request, count: 50))
            }
            for connection in connections {
                var received: [UInt8] = []
                let deadline = ContinuousClock.now + .seconds(20)
                while RawResponse.all(in: received).count < 50 && ContinuousClock.now < deadline {
                    received += connection.readUntilClosed(timeout: .milliseconds(20)).bytes
                }
                #expect(RawResponse.all(in: received).count == 50, "round \(round)")
            }
            if round == 6 {
                // An error in the middle of the flood: a revocation list that cannot be read,
                // re-read on SIGHUP, is reported and the last good one kept.
                _ = try sandbox.write("revocations.json", "not json")
                service.process.kill(SIGHUP)
            }
        }
        let elapsed = ContinuousClock.now - start
        let errorDeadline = ContinuousClock.now + .seconds(10)
        while !service.logText.contains(" error dcverify: ") && ContinuousClock.now < errorDeadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(service.stop() == 0)
        let lines = service.logText.split(separator: "\n").map(String.init)

        #expect(lines.contains { $0.contains(" error dcverify: ") }, "no error line")
        let requestLines = lines.filter {
            $0.contains("dcverify: verified") || $0.contains("\"not verified\"") || $0.contains("\"refused:")
        }
        let seconds = Int(elapsed.components.seconds) + 2
        #expect(requestLines.count > 0)
        #expect(requestLines.count <= 10 * seconds, "\(requestLines.count) request lines in \(elapsed)")
        #expect(lines.count <= 10 * seconds + 20, "\(lines.count) lines in \(elapsed)")

        // The summary lines (one, at exit, unless a minute passed) add up to exactly what was sent.
        let summaries = lines.filter { $0.contains("dcverify: summary ") }
        #expect(!summaries.isEmpty, "no summary line")
        func total(_ key: String) -> Int {
            summaries.reduce(0) { sum, line in
                let field = line.split(separator: " ").first { $0.hasPrefix(key + "=") }
                return sum + (field.flatMap { Int($0.dropFirst(key.count + 1)) } ?? 0)
            }
        }
        for kind in kinds {
            #expect(total(kind.key) == 600, "\(kind.key): \(summaries)")
        }
        #expect(total("dc.requests") == 3000, "\(summaries)")
        #expect(total("dc.unlogged") == 3000 - requestLines.count, "\(summaries)")

        let log = lines.joined(separator: "\n")
        let parts = [Tokens.valid, Tokens.expired, Tokens.revoked].flatMap {
            $0.split(whereSeparator: { "~.".contains($0) })
        }
        for secret in [Tokens.valid, Tokens.expired, Tokens.revoked, garbage, Tokens.challenge, "7f3a"]
            + parts.map(String.init)
        {
            #expect(!log.contains(secret), "the log holds '\(secret)'")
        }
    }
}
