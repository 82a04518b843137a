import Foundation
import ServiceHarness
import TestSupport
import Testing

/// What an operator runs dcverify with: the probes a load balancer asks, the metrics Prometheus
/// scrapes, the access log a collector reads. Through a real `dcverify serve` process, real
/// sockets, curl, and Python's json module as the reader of the JSON log.
@Suite("dcverify for operators: /health, /ready, /metrics, JSON access log", .ownThreads, .timeLimit(.minutes(3)))
struct OperationsTests {
    @Test("GET and HEAD /health and /ready answer 200 with where the trust stands; HEAD has no body; POST is 405")
    func probes() throws {
        let sandbox = try Sandbox("ops-probes")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox)
        defer { service.stop() }
        for path in ["/health", "/ready"] {
            let get = try #require(try rawRequest(port: service.port, path))
            #expect(get.status == 200, "\(path)")
            #expect(String(decoding: get.body, as: UTF8.self) == "ok: trust from local files\n", "\(path)")
            let head = try curl(["-I", service.url(path)], sandbox: sandbox)
            #expect(head.stdoutText.hasPrefix("HTTP/1.1 200"), "\(path): \(head.stdoutText)")
            let headRaw = try #require(try rawRequest(port: service.port, path, method: "HEAD"))
            #expect(headRaw.status == 200 && headRaw.body.isEmpty, "\(path)")
            let post = try #require(try rawRequest(port: service.port, path, method: "POST"))
            #expect(post.status == 405, "\(path)")
            #expect(post.values("Allow") == ["GET, HEAD"], "\(path)")
        }
        // The verification path stays GET only.
        let headVerify = try #require(try rawRequest(port: service.port, "/verifyGDAuthToken", method: "HEAD"))
        #expect(headVerify.status == 405)
        #expect(headVerify.values("Allow") == ["GET"])
    }

    @Test(
        "/metrics on its own listener: answers by code, their durations, open connections, the trust's gauges; not on the service's address"
    )
    func metrics() throws {
        let sandbox = try Sandbox("ops-metrics")
        defer { sandbox.remove() }
        let metricsPort = try freeLocalPort()
        let service = try Tokens.startService(in: sandbox, ["--metrics-listen", "127.0.0.1:\(metricsPort)"])
        defer { service.stop() }
        for token in [Tokens.valid, Tokens.valid, Tokens.revoked, Tokens.expired] {
            _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
        }
        _ = try rawRequest(port: service.port, "/verifyGDAuthToken")
        // The service's own address does not publish its metrics.
        #expect(try rawRequest(port: service.port, "/metrics")?.status == 404)
        let scraped = try curl(["http://127.0.0.1:\(metricsPort)/metrics"], sandbox: sandbox)
        #expect(scraped.status == 0, "\(scraped.stderrText)")
        let text = scraped.stdoutText
        #expect(text.contains("Content-Type: text/plain; version=0.0.4"), "\(text)")
        let samples = Self.samples(text)
        #expect(samples[#"dcverify_verifications_total{code="100"}"#] == 2, "\(text)")
        #expect(samples[#"dcverify_verifications_total{code="103"}"#] == 1, "\(text)")
        #expect(samples[#"dcverify_verifications_total{code="102"}"#] == 1, "\(text)")
        #expect(samples[#"dcverify_verifications_total{code="400"}"#] == 1, "\(text)")
        #expect(samples["dcverify_verification_duration_seconds_count"] == 5, "\(text)")
        #expect(samples["dcverify_trust_ready"] == 1, "\(text)")
        #expect(samples["dcverify_trust_failing_closed"] == 0, "\(text)")
        #expect((samples["dcverify_trust_age_seconds"] ?? -1) >= 0, "\(text)")
        // The scrape's own connection is not the service's; every verification's has closed.
        #expect(samples["dcverify_open_connections"] == 0, "\(text)")
        // Nothing of a token in the exposition.
        #expect(!text.contains(Tokens.challenge) && !text.contains(String(Tokens.valid.prefix(20))))
    }

    @Test(
        "The metrics listener cuts a request that does not come whole within the request timeout; twenty idle connections keep no scrape out"
    )
    func metricsListenerLimits() throws {
        let sandbox = try Sandbox("ops-metrics-limits")
        defer { sandbox.remove() }
        let metricsPort = try freeLocalPort()
        let service = try Tokens.startService(
            in: sandbox, ["--metrics-listen", "127.0.0.1:\(metricsPort)", "--request-timeout", "1s"])
        defer { service.stop() }
        // Half a request, then nothing: closed once the request's second is up.
        let half = try RawConnection(port: metricsPort)
        #expect(half.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
        let start = ContinuousClock.now
        let closed = half.readUntilClosed(timeout: .seconds(5)).closed
        #expect(closed && ContinuousClock.now - start < .seconds(3), "\(ContinuousClock.now - start)")
        // Twenty idle connections (more than the 16 served at once: the rest wait in the backlog):
        // the scrape still comes, once the idle ones are cut.
        let idle = try (0..<20).map { _ in try RawConnection(port: metricsPort) }
        let scraped = try curl(["--max-time", "10", "http://127.0.0.1:\(metricsPort)/metrics"], sandbox: sandbox)
        #expect(scraped.stdoutText.contains("dcverify_trust_ready"), "\(scraped.stderrText)")
        _ = idle
        // The service's own address answered throughout.
        #expect(try rawRequest(port: service.port, "/health")?.status == 200)
    }

    @Test("The same address for the metrics and the service is refused in one line, exit 64")
    func metricsOnTheServiceAddress() throws {
        let sandbox = try Sandbox("ops-metrics-same")
        defer { sandbox.remove() }
        let port = try freeLocalPort()
        let refused = try sandbox.run(
            Binaries.dcverify,
            ["serve", "--listen", "127.0.0.1:\(port)", "--metrics-listen", "127.0.0.1:\(port)"]
                + (try Tokens.files(in: sandbox)))
        #expect(refused.status == 64, "\(refused.stderrText)")
        #expect(refused.stderrText.split(separator: "\n").count == 1, "\(refused.stderrText)")
    }

    @Test(
        "--log-format json: one JSON object a line; a request's line has the client, path, status, code and latency, never the token or the challenge"
    )
    func jsonAccessLog() throws {
        let sandbox = try Sandbox("ops-json-log")
        defer { sandbox.remove() }
        let service = try Tokens.startService(in: sandbox, ["--log-format", "json", "--log-level", "debug"])
        let valid = Tokens.valid
        for token in [valid, Tokens.revoked] {
            _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
        }
        // Not a token, with a quote and a backslash (what HTTP lets a header carry): answered 101.
        _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", "a\"b\\c")])
        #expect(service.stop() == 0)
        let log = sandbox.file("dcverify.json")
        try Data(service.logText.utf8).write(to: URL(fileURLWithPath: log))
        // Python's json module reads every line on its own; it prints the access lines' fields.
        let read = try sandbox.run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import json, sys
                for line in open(sys.argv[1]):
                    entry = json.loads(line)
                    assert isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values()), line
                    if entry.get("path") == "/verifyGDAuthToken":
                        print(entry["message"], entry["client"], entry["status"], entry.get("code", "-"),
                              int(entry["latency-us"]) >= 0, entry["time"].endswith("Z"))
                """, log,
            ])
        #expect(read.status == 0, "\(read.stderrText)\n\(service.logText)")
        let lines = read.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.contains("verified 127.0.0.1 200 100 True True"), "\(read.stdoutText)")
        #expect(lines.contains("not verified 127.0.0.1 200 103 True True"), "\(read.stdoutText)")
        #expect(lines.contains("not verified 127.0.0.1 200 101 True True"), "\(read.stdoutText)")
        #expect(!service.logText.contains(Tokens.challenge))
        #expect(!service.logText.contains(String(valid.suffix(30))))
    }

    /// The exposition's samples: `name{labels} value` lines, by `name{labels}`.
    static func samples(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let value = Double(parts[1]) else { continue }
            samples[String(parts[0])] = value
        }
        return samples
    }
}
