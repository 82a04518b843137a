import Foundation
import ServiceHarness
import TestSupport
import Testing

/// The service is stateless, so instances scale out behind a load balancer: two of them behind a
/// real nginx (Debian's, run unprivileged from a configuration in the sandbox).
@Suite(
    "Two dcverify instances behind nginx: any instance answers any token the same", .ownThreads, .timeLimit(.minutes(3))
)
struct LoadBalancerTests {
    @Test("two instances behind nginx: both answer, and with one stopped the other still says 100 OK")
    func twoInstancesBehindNginx() async throws {
        let sandbox = try Sandbox("dcverify-nginx")
        defer { sandbox.remove() }
        let first = try Tokens.startService(in: sandbox, name: "first")
        let second = try Tokens.startService(in: sandbox, name: "second")
        defer {
            first.stop()
            second.stop()
        }
        let port = try freeLocalPort()
        let nginx = try await NginxServer(
            in: sandbox,
            http: """
                access_log off;
                upstream dcverify {
                  server 127.0.0.1:\(first.port) max_fails=1 fail_timeout=30s;
                  server 127.0.0.1:\(second.port) max_fails=1 fail_timeout=30s;
                  keepalive 4;
                }
                server {
                  listen 127.0.0.1:\(port);
                  location / {
                    proxy_pass http://dcverify;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_next_upstream error timeout;
                    proxy_connect_timeout 2s;
                  }
                }
                """)
        defer { nginx.stop() }

        func verifyThroughNginx() throws -> RawResponse? {
            try rawRequest(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])
        }
        // Round robin: four requests reach both instances; each says 100 OK with the identity.
        for _ in 0..<4 {
            let response = try #require(try verifyThroughNginx())
            #expect(response.status == 200)
            #expect(response.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
            #expect(response.values("X-Good-GD-AuthChallenge") == [Tokens.challenge])
        }
        #expect(first.logText.contains("dc.code=100"), "the first instance answered nothing")
        #expect(second.logText.contains("dc.code=100"), "the second instance answered nothing")

        // One instance stops (gracefully, as a rolling restart does); the other carries on.
        #expect(first.stop() == 0)
        for _ in 0..<4 {
            let response = try #require(try verifyThroughNginx())
            #expect(response.status == 200)
            #expect(response.values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        }
        let refused = try #require(
            try rawRequest(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.revoked)]))
        #expect(refused.values("X-Good-GD-AuthResponseCode") == ["103 Revoked"])
        #expect(refused.goodFields == ["X-Good-GD-AuthResponseCode"])
    }
}
