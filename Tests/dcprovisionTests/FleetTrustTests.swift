import Foundation
import ServiceHarness
import TestSupport
import Testing

/// Trust fetched by a fleet: three `dcverify serve --trust-url` instances on three test hosts of
/// their own (network namespaces, `TestHosts`), the provider's published directory served by a
/// fourth server (Debian's nginx on this machine, listening on each host's link), a real
/// `dcclient` token asked of every instance with curl. Making hosts needs root, so the suite runs
/// in the root pass of `scripts/test` (CI runs it as root); as an ordinary user it is not run.
///
/// This is the short form: a staleness bound of 6 s instead of an operator's minutes.
@Suite(
    "Trust fetched by three verifiers on three hosts", .ownThreads, .timeLimit(.minutes(3)),
    .enabled(if: TestHosts.available, "test hosts (network namespaces) need root"))
struct FleetTrustTests {
    /// The answer code `instance` gives `token`, asked with curl from this machine.
    static func code(_ token: String, at address: String, _ tools: Tools) -> String? {
        guard let headerFile = try? tools.sandbox.write("token-header", "X-Good-GD-AuthToken: \(token)\n"),
            let result = try? tools.sandbox.run(
                try which("curl"),
                [
                    "-sS", "-D", "-", "-o", "/dev/null", "--max-time", "5", "-H", "@" + headerFile,
                    "http://\(address):8080/verifyGDAuthToken",
                ], timeout: 20)
        else { return nil }
        return result.stdoutText.split(separator: "\r\n").first { $0.hasPrefix("X-Good-GD-AuthResponseCode: ") }
            .map { String($0.dropFirst("X-Good-GD-AuthResponseCode: ".count)) }
    }

    @Test(
        "Every instance answers 100, then with the trust server down keeps the last good list until the bound and then fails closed (101, /ready 503); back, all recover; a revocation answers 103 on all three within max-age + 1 s"
    )
    func revocationEverywhere() async throws {
        let (tools, directory) = try TrustPublicationTests.world("fleet-trust")
        let sandbox = tools.sandbox
        defer { sandbox.remove() }
        let hosts = try TestHosts(count: 3)
        defer { hosts.remove() }
        let port = try freeLocalPort()
        let listen = hosts.hosts.map { "\($0.gateway):\(port)" }
        func startNginx() async throws -> NginxServer {
            try await TrustPublicationTests.servePublished(directory, in: sandbox, listen: listen)
        }
        var nginx = try await startNginx()
        defer { nginx.stop() }
        let bound = 6
        var instances: [RunningService] = []
        defer { for instance in instances { instance.stop() } }
        for (index, host) in hosts.hosts.enumerated() {
            let command = hosts.command(
                in: host,
                [
                    Binaries.dcverify, "serve", "--listen", "\(host.address):8080", "--trust-over-http", "--trust-url",
                    "http://\(host.gateway):\(port)/", "--trust-key", directory + "/trust-key.jwks", "--trust-max-age",
                    "\(bound)s",
                ])
            instances.append(
                try RunningService.start(command[0], Array(command.dropFirst()), in: sandbox, name: "dcverify-\(index)")
            )
        }
        let addresses = hosts.hosts.map(\.address)
        func codes(_ token: String) -> [String?] { addresses.map { Self.code(token, at: $0, tools) } }
        func ready() -> [Int?] {
            addresses.map { address in
                let result = try? sandbox.run(
                    try which("curl"), ["-s", "-o", "/dev/null", "-w", "%{http_code}", "http://\(address):8080/ready"],
                    timeout: 20)
                return result.flatMap { Int($0.stdoutText) }
            }
        }
        let token = try tools.check("dcclient", ["token", "--challenge", "fleet 1"]).stdoutText
            .trimmingCharacters(in: .newlines)
        #expect(codes(token) == ["100 OK", "100 OK", "100 OK"], "\(instances.map(\.logText))")
        #expect(ready() == [200, 200, 200])

        // The trust server down: every instance keeps the last good list until the bound, then
        // refuses every token, and its /ready says it is not to be sent traffic.
        nginx.stop()
        let down = ContinuousClock.now
        #expect(codes(token) == ["100 OK", "100 OK", "100 OK"])
        try await eventually(timeout: .seconds(30)) { codes(token) == Array(repeating: "101 Invalid Token", count: 3) }
        let held = ContinuousClock.now - down
        #expect(held >= .seconds(bound - 2) && held <= .seconds(bound + 4), "\(held)")
        #expect(ready() == [503, 503, 503])
        // Back: all recover.
        nginx = try await startNginx()
        try await eventually(timeout: .seconds(30)) { codes(token) == ["100 OK", "100 OK", "100 OK"] }

        // A revocation by the provider: 103 on every instance within max-age (1 s) + 1 s.
        try tools.check("dcprovision", ["unauthorize"] + TrustPublicationTests.scheme)
        let revoked = ContinuousClock.now
        try await eventually(timeout: .seconds(10)) { codes(token) == Array(repeating: "103 Revoked", count: 3) }
        let propagation = ContinuousClock.now - revoked
        print(
            "fleet: trust held \(held) with the source down (bound \(bound) s); revocation on all three in \(propagation)"
        )
        #expect(propagation <= .seconds(2), "\(propagation)")
    }
}
