import Foundation
import ServiceHarness
import TestSupport
import Testing
import VerificationService

/// dcverify as a fleet: three instances on three hosts of the test's own (network namespaces with
/// their own addresses, `TestHosts`), behind a real nginx and a real haproxy on this machine, under
/// load from wrk (`Benchmarks/verify.lua` checks every answer is 100 OK). Making hosts needs root,
/// so the suite runs in the root pass of `scripts/test` (CI runs it as root); as an ordinary user it
/// is not run, and says so.
@Suite(
    "Three dcverify instances on three hosts behind nginx and haproxy", .ownThreads, .timeLimit(.minutes(5)),
    .enabled(if: TestHosts.available, "test hosts (network namespaces) need root"))
struct FleetTests {
    /// The instances, their hosts and the files they trust.
    final class Fleet {
        let sandbox: Sandbox
        let hosts: TestHosts
        let files: [String]
        private(set) var instances: [RunningService?]
        let tokens: String

        init(_ label: String, extra: [String] = []) throws {
            sandbox = try Sandbox(label)
            hosts = try TestHosts(count: 3)
            files = try Tokens.files(in: sandbox)
            tokens = try sandbox.write("tokens", (0..<8).map { _ in Tokens.valid }.joined(separator: "\n") + "\n")
            instances = [nil, nil, nil]
            for index in 0..<3 { try start(index, extra) }
        }

        deinit {
            for instance in instances { instance?.stop() }
            hosts.remove()
            sandbox.remove()
        }

        /// Starts instance `index` on its host, on port 8080 of the host's own address.
        func start(_ index: Int, _ extra: [String] = []) throws {
            let host = hosts.hosts[index]
            let command = hosts.command(
                in: host,
                [
                    Binaries.dcverify, "serve", "--listen", "\(host.address):8080",
                    // Behind a balancer every connection comes from its address.
                    "--max-connections-per-address", "1024",
                ] + files + extra)
            instances[index] = try RunningService.start(
                command[0], Array(command.dropFirst()), in: sandbox, name: "dcverify-\(index)")
        }

        /// Kills instance `index` at once (SIGKILL: no drain, connections reset).
        func kill(_ index: Int) {
            instances[index]?.process.kill(SIGKILL)
            _ = instances[index]?.process.wait(timeout: .seconds(10))
            instances[index] = nil
        }

        /// Stops instance `index` gracefully (SIGTERM: the requests in flight finish) and returns its status.
        func stop(_ index: Int) -> Int32? {
            defer { instances[index] = nil }
            return instances[index]?.stop()
        }

        var upstreams: [String] { hosts.hosts.map { "\($0.address):8080" } }
    }

    /// wrk's one JSON line from `Benchmarks/verify.lua`: requests, answers that were not 100 OK, socket errors.
    struct Load: CustomStringConvertible {
        var requests = 0
        var bad = 0
        var socketErrors = 0
        var timeouts = 0
        var description: String {
            "\(requests) requests, \(bad) not 100 OK, \(socketErrors) socket errors, \(timeouts) timeouts"
        }
        var lost: Int { bad + socketErrors + timeouts }
    }

    /// Runs wrk against `url` for `seconds` while `during` acts on the fleet, and reads its counts.
    static func load(_ fleet: Fleet, _ url: String, seconds: Int, during: () throws -> Void) throws -> Load {
        let output = fleet.sandbox.file("wrk-\(UUID().uuidString).out")
        let wrk = try SpawnedProcess(
            try which("wrk"),
            [
                "-t1", "-c8", "-d\(seconds)s", "--timeout", "3s", "-s", Repository.root + "/Benchmarks/verify.lua", url,
                "--", fleet.tokens, "100",
            ], environment: fleet.sandbox.environment, output: output)
        try during()
        let status = wrk.wait(timeout: .seconds(Double(seconds + 30)))
        #expect(status.map { ($0 >> 8) & 0xFF } == 0, "wrk: \(RunningService.readLog(output))")
        let text = RunningService.readLog(output)
        guard let line = text.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Int]
        else {
            Issue.record("wrk printed no counts: \(text)")
            return Load()
        }
        return Load(
            requests: object["requests"] ?? 0, bad: object["bad"] ?? 0, socketErrors: object["socket_errors"] ?? 0,
            timeouts: object["timeouts"] ?? 0)
    }

    /// nginx in front: round robin, a failed upstream's request retried on the next (a GET is
    /// idempotent), an instance that failed left alone for a while.
    static func nginx(_ fleet: Fleet) async throws -> (NginxServer, String) {
        let port = try freeLocalPort()
        let servers = fleet.upstreams.map { "  server \($0) max_fails=1 fail_timeout=2s;" }.joined(separator: "\n")
        let nginx = try await NginxServer(
            in: fleet.sandbox,
            http: """
                log_format fleet '$status $upstream_status';
                access_log \(fleet.sandbox.file("nginx/logs/access.log")) fleet buffer=64k flush=1s;
                upstream dcverify {
                \(servers)
                  keepalive 16;
                }
                server {
                  listen 127.0.0.1:\(port);
                  location / {
                    proxy_pass http://dcverify;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_next_upstream error timeout http_502 http_503;
                    proxy_next_upstream_tries 3;
                    proxy_connect_timeout 1s;
                  }
                }
                """)
        return (nginx, "http://127.0.0.1:\(port)/verifyGDAuthToken")
    }

    /// What nginx answered, and what the instances answered it, by count: for a failure's message.
    static func statuses(_ nginx: NginxServer) -> String {
        let lines = RunningService.readLog(nginx.prefix + "/logs/access.log").split(separator: "\n")
        let counts = Dictionary(grouping: lines, by: { String($0) }).mapValues(\.count).sorted { $0.value > $1.value }
        return "nginx answered (status, upstream statuses): "
            + counts.prefix(8).map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
    }

    /// haproxy in front: active checks of `/ready` every 200 ms, and a request that failed on its
    /// way (refused, reset, no answer) retried on another instance. haproxy writes every header
    /// name in lower case; application servers compare `X-Good-GD-*` names case-sensitively, so
    /// `h1-case-adjust` gives them their case back (docs/OPERATING.md says so).
    static func haproxy(_ fleet: Fleet) throws -> (SpawnedProcess, String) {
        let names = ["X-Good-GD-AuthResponseCode"] + VerificationHeaders.identity
        let adjust = names.map { "  h1-case-adjust \($0.lowercased()) \($0)" }.joined(separator: "\n")
        let port = try freeLocalPort()
        let servers = fleet.upstreams.enumerated().map { index, address in
            "  server dcverify\(index) \(address) check inter 200ms fall 1 rise 2"
        }.joined(separator: "\n")
        let configuration = try fleet.sandbox.write(
            "haproxy.cfg",
            """
            global
              maxconn 256
            \(adjust)
            defaults
              mode http
              timeout connect 1s
              timeout client 10s
              timeout server 5s
              retries 3
              option redispatch 1
              retry-on all-retryable-errors
            frontend verify
              bind 127.0.0.1:\(port)
              option h1-case-adjust-bogus-client
              default_backend dcverify
            backend dcverify
              balance roundrobin
              option httpchk HEAD /ready
              http-check expect status 200
            \(servers)

            """)
        let process = try SpawnedProcess(
            "/usr/sbin/haproxy", ["-db", "-f", configuration], environment: fleet.sandbox.environment,
            output: fleet.sandbox.file("haproxy.out"))
        // Ready when it answers through a backend that its checks found up.
        let url = "http://127.0.0.1:\(port)/verifyGDAuthToken"
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let answer = try? rawRequest(
                port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)]),
                answer.values("X-Good-GD-AuthResponseCode") == ["100 OK"]
            {
                return (process, url)
            }
            usleep(100_000)
        }
        process.kill()
        throw TestHosts.Failure(
            description: "haproxy did not serve: \(RunningService.readLog(fleet.sandbox.file("haproxy.out")))")
    }

    @Test(
        "kill -9 of one instance under load loses no request at the client, behind nginx and behind haproxy; a rolling restart fails none"
    )
    func killAndRollingRestart() async throws {
        let fleet = try Fleet("fleet-kill")
        let (nginx, nginxURL) = try await Self.nginx(fleet)
        defer { nginx.stop() }
        let (haproxy, haproxyURL) = try Self.haproxy(fleet)
        defer {
            haproxy.kill(SIGTERM)
            _ = haproxy.wait(timeout: .seconds(10))
        }
        for (name, url) in [("nginx", nginxURL), ("haproxy", haproxyURL)] {
            // One instance killed a second into five seconds of load, then started again.
            let killed = try Self.load(fleet, url, seconds: 5) {
                sleep(1)
                fleet.kill(1)
                sleep(1)
                try fleet.start(1)
            }
            #expect(killed.requests > 100, "\(name): \(killed)")
            #expect(killed.lost == 0, "\(name), kill -9: \(killed); \(Self.statuses(nginx))")
            // Every instance stopped gracefully and started again in turn, under load, the next one
            // only once the balancer can have the last one back (nginx retries an instance it saw
            // fail after fail_timeout, 2 s; haproxy once two checks, 400 ms, found it ready).
            let rolled = try Self.load(fleet, url, seconds: 10) {
                for index in 0..<3 {
                    usleep(500_000)
                    #expect(fleet.stop(index) == 0)
                    try fleet.start(index)
                    usleep(2_200_000)
                }
            }
            #expect(rolled.requests > 100, "\(name): \(rolled)")
            #expect(rolled.lost == 0, "\(name), rolling restart: \(rolled); \(Self.statuses(nginx))")
            print("fleet, \(name): kill -9 under load: \(killed); rolling restart: \(rolled)")
        }
    }
}
