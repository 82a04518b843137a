import Foundation
import ServiceHarness
import TestSupport
import Testing

/// Slow clients cannot stall the service: a request head has a short deadline of its own, and one
/// address cannot take the whole connection pool.
@Suite(
    "dcverify against slow clients: the head timeout and the per-address limit", .ownThreads, .timeLimit(.minutes(3)))
struct SlowClientTests {
    @Test(
        "--head-timeout 1: a connection that sends nothing, or dribbles its head a byte every 200 ms, is cut after about 1 s, on a new connection and after an answer on a kept-alive one; a kept-alive connection quiet for 2 s is not cut",
        .timeLimit(.minutes(1)))
    func headTimeout() throws {
        let sandbox = try Sandbox("dcverify-head-timeout")
        defer { sandbox.remove() }
        // The request timeout (Hummingbird's idle timeout) is left at 10 s: only the head timeout
        // can cut these clients in time.
        let service = try Tokens.startService(in: sandbox, ["--head-timeout", "1", "--request-timeout", "10"])
        defer { service.stop() }
        let head = Array(
            "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: \(String(repeating: "a", count: 200))\r\n\r\n".utf8)

        /// Sends `head` a byte every 200 ms until the service closes; how long that took, or nil
        /// if it did not close within 5 s.
        func dribble(on connection: RawConnection) -> Duration? {
            let start = ContinuousClock.now
            for byte in head {
                if !connection.send([byte]) || connection.readUntilClosed(timeout: .milliseconds(200)).closed {
                    return ContinuousClock.now - start
                }
                if ContinuousClock.now - start > .seconds(5) { return nil }
            }
            return nil
        }

        // A connection that sends nothing at all is cut when its head is due.
        let silent = try RawConnection(port: service.port)
        let silentStart = ContinuousClock.now
        let silentClosed = silent.readUntilClosed(timeout: .seconds(5)).closed
        let silentFor = ContinuousClock.now - silentStart
        #expect(
            silentClosed && silentFor >= .milliseconds(800) && silentFor < .milliseconds(2500), "silent: \(silentFor)")

        let fresh = try RawConnection(port: service.port)
        let cut = dribble(on: fresh)
        #expect(
            cut.map { $0 >= .milliseconds(800) && $0 < .milliseconds(2500) } == true, "new connection: \(cut as Any)")

        // A kept-alive connection may stay quiet longer than the head timeout (a proxy's pool)...
        let kept = try RawConnection(port: service.port)
        kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(kept.readResponse(timeout: .seconds(10))?.status == 200)
        Thread.sleep(forTimeInterval: 2)
        kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(kept.readResponse(timeout: .seconds(10))?.status == 200, "a quiet kept-alive connection was cut")
        // ...but once it starts a request, the head is due within the head timeout.
        let cutAfterAnswer = dribble(on: kept)
        #expect(
            cutAfterAnswer.map { $0 >= .milliseconds(800) && $0 < .milliseconds(2500) } == true,
            "kept-alive connection: \(cutAfterAnswer as Any)")
        #expect(try rawRequest(port: service.port, "/health")?.status == 200)
    }

    @Test(
        "5,000 slowloris connections from 127.0.0.2-4 hold at most 256 connections per address; requests from 127.0.0.1 are each answered within 1 s",
        .timeLimit(.minutes(1)))
    func slowlorisFromFewAddresses() throws {
        // 5,000 sockets here, and up to 1,024 in dcverify, which inherits this process's limit:
        // the soft descriptor limit is raised (up to the hard limit) if it is lower.
        try raiseDescriptorLimit(to: 12_000)
        let sandbox = try Sandbox("dcverify-slowloris-flood")
        defer { sandbox.remove() }
        // The defaults (1,024 connections, 256 per address), except that the head and request
        // timeouts are long enough (30 s) for the slow clients to hold what they take for the whole
        // test: only the per-address limit keeps connections free.
        let service = try Tokens.startService(in: sandbox, ["--head-timeout", "30", "--request-timeout", "30"])
        defer { service.stop() }
        // One request first, so that what the first verification sets up is not timed below.
        #expect(
            try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])?
                .values("X-Good-GD-AuthResponseCode") == ["100 OK"])
        let flood = try Slowloris(count: 5000, sources: ["127.0.0.2", "127.0.0.3", "127.0.0.4"], port: service.port)
        // A byte every 100 ms on each slow connection, until the service has sorted them all (every
        // socket connected or closed, and no more open than the per-address limits allow), at
        // most 15 s. (A socket counts as connected once the kernel completes its handshake, even
        // before the service accepts it.)
        let settleBy = ContinuousClock.now + .seconds(15)
        repeat {
            flood.dribble()
            Thread.sleep(forTimeInterval: 0.1)
        } while (flood.connecting > 0 || flood.open > 3 * 256) && ContinuousClock.now < settleBy
        for _ in 0..<5 {
            flood.dribble()
            Thread.sleep(forTimeInterval: 0.1)
        }
        // curl (from 127.0.0.1, the token in a header file, not in its arguments) times each request.
        let header = try sandbox.write("token.header", "X-Good-GD-AuthToken: \(Tokens.valid)\n")
        let curlPath = try which("curl")
        var slowest = 0.0
        var times: [Double] = []
        for _ in 0..<5 {
            let result = try sandbox.run(
                curlPath,
                [
                    "-sS", "-o", "/dev/null", "-D", "-", "-w", "time=%{time_total}\n", "--max-time", "5", "-H",
                    "@" + header, service.url("/verifyGDAuthToken"),
                ], timeout: 20)
            let output = String(decoding: result.stdout, as: UTF8.self)
            let time = output.split(whereSeparator: \.isNewline).last { $0.hasPrefix("time=") }
                .flatMap { Double($0.dropFirst(5)) }
            slowest = max(slowest, time ?? .infinity)
            times.append(time ?? .infinity)
            #expect(output.contains("X-Good-GD-AuthResponseCode: 100 OK"), "\(output) \(result.stderrText)")
            flood.dribble()
        }
        flood.dribble()
        let held = flood.open
        #expect(slowest < 1, "a request from 127.0.0.1 waited \(slowest) s (\(times)); \(flood)")
        #expect(held <= 3 * 256, "the slow clients hold \(held) connections; \(flood)")
        #expect(held >= 3 * 200, "the slowloris held only \(held): it did not run; \(flood)")
    }
}

/// Raises this process's soft limit on open descriptors to `wanted` (or the hard limit, if lower);
/// children started afterwards inherit it.
func raiseDescriptorLimit(to wanted: rlim_t) throws {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { throw POSIXError(.EPERM) }
    guard limit.rlim_cur < wanted else { return }
    limit.rlim_cur = min(wanted, limit.rlim_max)
    guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { throw POSIXError(.EPERM) }
    try #require(limit.rlim_cur >= 5500, "the descriptor limit (hard \(limit.rlim_max)) is too low for 5,000 sockets")
}

/// Many TCP connections to 127.0.0.1 that each send a request head that never ends, one byte at a
/// time: a slowloris. Each socket is bound to one of `sources` (loopback addresses other than
/// 127.0.0.1) so that the service sees the attack come from other addresses than the test's own
/// requests.
final class Slowloris: CustomStringConvertible {
    private var fds: [Int32] = []
    private var state: [State]
    private var sent: [Int]
    private static let head = Array(
        ("GET /verifyGDAuthToken HTTP/1.1\r\nHost: x\r\nX-Slow: " + String(repeating: "a", count: 4000)).utf8)

    private enum State { case connecting, open, closed }

    /// Starts `count` non-blocking connections to `127.0.0.1:port`, spread over `sources`.
    init(count: Int, sources: [String], port: Int) throws {
        state = Array(repeating: .connecting, count: count)
        sent = Array(repeating: 0, count: count)
        fds.reserveCapacity(count)
        for index in 0..<count {
            let fd = socket(
                AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            fds.append(fd)
            var source = sockaddr_in()
            source.sin_family = sa_family_t(AF_INET)
            source.sin_addr.s_addr = inet_addr(sources[index % sources.count])
            var target = sockaddr_in()
            target.sin_family = sa_family_t(AF_INET)
            target.sin_port = in_port_t(UInt16(port).bigEndian)
            target.sin_addr.s_addr = inet_addr("127.0.0.1")
            let size = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &source) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) }
            }
            guard bound == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            let connected = withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, size) }
            }
            if connected != 0 && errno != EINPROGRESS { state[index] = .closed }
        }
    }

    deinit { for fd in fds { close(fd) } }

    /// Sends the next byte of the head on every connected socket, and notes the sockets the
    /// service has closed (or answered, which it must not).
    func dribble() {
        var polls = fds.indices.filter { state[$0] != .closed }.map {
            pollfd(fd: fds[$0], events: Int16(POLLIN | POLLOUT), revents: 0)
        }
        let indices = fds.indices.filter { state[$0] != .closed }
        guard poll(&polls, nfds_t(polls.count), 0) >= 0 else { return }
        var scratch = [UInt8](repeating: 0, count: 4096)
        for (index, polled) in zip(indices, polls) {
            let events = Int32(polled.revents)
            if events & (POLLERR | POLLHUP) != 0 {
                state[index] = .closed
            } else if events & POLLIN != 0 {
                // The service closed it (0, or a reset) or answered it: either way it no longer waits.
                _ = scratch.withUnsafeMutableBytes { recv(fds[index], $0.baseAddress!, $0.count, Int32(MSG_DONTWAIT)) }
                state[index] = .closed
            } else if events & POLLOUT != 0 {
                state[index] = .open
                if sent[index] < Self.head.count {
                    let count = Self.head.withUnsafeBytes {
                        send(fds[index], $0.baseAddress! + sent[index], 1, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
                    }
                    if count > 0 { sent[index] += count }
                }
            }
        }
    }

    /// Sockets still connecting (the service's backlog is full).
    var connecting: Int { state.count(where: { $0 == .connecting }) }
    /// Sockets connected and not closed by the service: connections it holds or has in its backlog.
    var open: Int { state.count(where: { $0 == .open }) }
    /// Sockets the service closed.
    var closed: Int { state.count(where: { $0 == .closed }) }

    /// The three counts.
    var description: String { "slowloris: \(open) open, \(connecting) connecting, \(closed) closed" }
}
