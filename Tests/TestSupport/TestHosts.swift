import Foundation
import Synchronization

/// Hosts of a test's own: network namespaces it makes (`ip netns`, root only), each joined to this
/// machine by a veth pair on a /30 of its own in 10.231.0.0/16, so that each has an address of its
/// own that only this machine reaches (nothing is routed anywhere else). A service started in one
/// (``command(in:_:)``) listens on that address as a separate machine's would; a load balancer on
/// this machine reaches it through the veth. ``remove()`` (called when the value goes) deletes the
/// namespaces, and with them their veth pairs and addresses.
public final class TestHosts: Sendable {
    /// One host: its namespace, its address, and this machine's address on the link to it.
    public struct Host: Sendable {
        /// The namespace's name (`ip netns exec NAME`).
        public let name: String
        /// The host's address, on its side of the veth pair.
        public let address: String
        /// This machine's address on the same link.
        public let gateway: String
    }

    /// The hosts, in the order made.
    public let hosts: [Host]

    /// Blocks of 10.231.0.0/16 handed out in this process: one /30 a host, starting at a place
    /// taken from the process id (the 128 blocks of one of 64 regions below 10.231.128.0, where
    /// the fleet benchmark's are), so that two test runs on one machine do not share a subnet.
    private static let firstBlock = Int(getpid() % 64) * 128
    private static let nextBlock = Atomic<Int>(firstBlock)

    /// Makes `count` hosts. Throws (leaving none behind) when `ip` fails, as it does without root.
    public init(count: Int) throws {
        var made: [Host] = []
        let tag = String(getpid() % 100_000)
        do {
            for _ in 0..<count {
                let block = Self.nextBlock.add(1, ordering: .relaxed).newValue
                guard block < Self.firstBlock + 128 else {
                    throw Failure(description: "no more test host addresses in this process's region")
                }
                let base = block * 4
                let prefix = "10.231.\(base / 256)."
                let host = Host(
                    name: "dctest-\(tag)-\(block)", address: prefix + String(base % 256 + 2),
                    gateway: prefix + String(base % 256 + 1))
                // Interface names are at most 15 bytes: "dcv" and "dcn", the pid's tag and the block.
                let outside = "dcv\(tag)x\(block)"
                let inside = "dcn\(tag)x\(block)"
                try Self.ip(["netns", "add", host.name])
                made.append(host)
                try Self.ip(["link", "add", outside, "type", "veth", "peer", "name", inside])
                do {
                    try Self.ip(["link", "set", inside, "netns", host.name])
                } catch {
                    // Not yet in the namespace: deleting that would not take the pair with it.
                    _ = try? Self.ip(["link", "del", outside])
                    throw error
                }
                try Self.ip(["addr", "add", host.gateway + "/30", "dev", outside])
                try Self.ip(["link", "set", outside, "up"])
                try Self.ip(["netns", "exec", host.name, "ip", "addr", "add", host.address + "/30", "dev", inside])
                try Self.ip(["netns", "exec", host.name, "ip", "link", "set", inside, "up"])
                try Self.ip(["netns", "exec", host.name, "ip", "link", "set", "lo", "up"])
            }
        } catch {
            for host in made { _ = try? Self.ip(["netns", "del", host.name]) }
            throw error
        }
        hosts = made
    }

    deinit { remove() }

    /// The command line that runs `arguments` on `host` (in its network namespace).
    public func command(in host: Host, _ arguments: [String]) -> [String] {
        ["/usr/sbin/ip", "netns", "exec", host.name] + arguments
    }

    /// Deletes every host: its namespace, its veth pair, its addresses.
    public func remove() {
        for host in hosts { _ = try? Self.ip(["netns", "del", host.name]) }
    }

    /// Whether this process may make test hosts (root, with `ip`).
    public static var available: Bool { geteuid() == 0 && access("/usr/sbin/ip", X_OK) == 0 }

    @discardableResult
    static func ip(_ arguments: [String]) throws -> ProcessResult {
        let result = try run(
            "/usr/sbin/ip", arguments, environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeout: 30)
        guard result.status == 0 else {
            throw Failure(description: "ip \(arguments.joined(separator: " ")): \(result.stderrText)")
        }
        return result
    }

    /// The test hosts could not be made.
    public struct Failure: Error, CustomStringConvertible {
        /// What `ip` (or the fixture) said.
        public var description: String

        /// A failure saying `description`.
        public init(description: String) { self.description = description }
    }
}
