import AuthTokens
import CredentialCoding
import Foundation
import Synchronization
import TestSupport
import Testing

/// An HTTP/1.1 response as the bytes came: the status code, and the header fields with their
/// names in the case they had on the wire.
public struct RawResponse: Sendable {
    /// The status code.
    public var status: Int
    /// The header fields, names as they came.
    public var fields: [(name: String, value: String)]
    /// The body.
    public var body: [UInt8]

    /// The values of the fields named exactly `name` (case-sensitive, as app servers compare).
    public func values(_ name: String) -> [String] { fields.filter { $0.name == name }.map(\.value) }

    /// The values of the fields named `name` in any case.
    public func valuesIgnoringCase(_ name: String) -> [String] {
        fields.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// The names of the fields that start with `X-Good-GD-`, in any case, as they came.
    public var goodFields: [String] {
        fields.map(\.name).filter { $0.lowercased().hasPrefix("x-good-gd-") }
    }

    /// Every whole response in `bytes`, in order (each announces its body's `Content-Length`).
    public static func all(in bytes: [UInt8]) -> [RawResponse] {
        var responses: [RawResponse] = []
        var rest = bytes[...]
        while let end = rest.firstRange(of: Array("\r\n\r\n".utf8)), let response = RawResponse(Array(rest)),
            let length = response.valuesIgnoringCase("Content-Length").first.flatMap(Int.init),
            rest.distance(from: rest.startIndex, to: end.upperBound) + length <= rest.count
        {
            var whole = response
            whole.body = Array(rest[end.upperBound..<(end.upperBound + length)])
            responses.append(whole)
            rest = rest[(end.upperBound + length)...]
        }
        return responses
    }

    /// Parses the first response in `bytes`; nil if there is none.
    public init?(_ bytes: [UInt8]) {
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), let status = Int(statusLine[1]) else {
            return nil
        }
        self.status = status
        fields = lines.compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (
                String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            )
        }
        body = Array(bytes[end.upperBound...])
    }
}

/// A TCP connection to 127.0.0.1 that writes exactly the bytes given: for what curl would not send
/// (a header twice, a request dribbled a byte at a time) and to see header names as they are.
public final class RawConnection {
    /// The connected socket.
    public let fd: Int32

    /// Connects to 127.0.0.1:`port`.
    public init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
    }

    deinit { close(fd) }

    /// Writes all of `bytes`; false when the peer has closed the connection.
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }

    /// Writes `text` as UTF-8.
    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// Reads until the peer closes or `timeout` passes; returns what came and whether it closed.
    public func readUntilClosed(timeout: Duration) -> (bytes: [UInt8], closed: Bool) {
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, 50)
            if ready < 0 && errno != EINTR { return (received, true) }
            guard ready > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return (received, true) }
            received += buffer[..<count]
        }
        return (received, false)
    }

    /// Reads until a whole response has come (its head and the `Content-Length` body bytes that
    /// the service's answers announce), the peer closes, or `timeout` passes.
    public func readResponse(timeout: Duration = .seconds(30)) -> RawResponse? {
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            if let response = RawResponse(received),
                let length = response.valuesIgnoringCase("Content-Length").first.flatMap(Int.init),
                response.body.count >= length
            {
                return response
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if count <= 0 { return RawResponse(received) }
            received += buffer[..<count]
        }
        return nil
    }
}

/// One request on a fresh connection: `METHOD path` with `headers` (name, value) exactly as given.
public func rawRequest(
    port: Int, _ path: String, headers: [(String, String)] = [], method: String = "GET"
) throws -> RawResponse? {
    let connection = try RawConnection(port: port)
    var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for (name, value) in headers { request += "\(name): \(value)\r\n" }
    connection.send(request + "\r\n")
    return connection.readResponse()
}

/// curl, bounded (`--max-time 20`), with the response head in its output (`-i`).
public func curl(_ arguments: [String], sandbox: Sandbox) throws -> ProcessResult {
    try sandbox.run(try which("curl"), ["-sS", "-i", "--max-time", "20"] + arguments, timeout: 40)
}

/// Real tokens, made with the AuthTokens issuing API (a provider's issuing key signs a delegation
/// for a client's token key, which signs the token), and the files that make `dcverify` trust that
/// issuing key and revoke one delegation. The keys, the delegations and the files are made once
/// per test process; the valid token, which lives ten minutes, is made again once it is five
/// minutes old, so a test that runs late in a long, loaded run still gets a token with time left.
public enum Tokens {
    /// The challenge the valid token is bound to.
    public static let challenge = "challenge 7f3a: one use"
    /// 100 OK: issued at most five minutes ago, valid for the tokens' ten minutes.
    public static var valid: String { fresh().compact }
    /// 102 Expired Token: made two hours ago under a delegation that ended an hour ago.
    public static var expired: String { made.expired }
    /// 103 Revoked: its delegation's id is in the revocation list.
    public static var revoked: String { made.revoked }
    /// The valid token and its creation time as X-Good-GD-AuthTokenCreationTime says it, read
    /// together: `valid` and a separate read of the time could straddle the moment it is made again.
    public static var validWithCreationTime: (token: String, created: String) {
        let token = fresh()
        return (token.compact, String(token.claims.issuedAt))
    }
    /// A token the test-only fixture takes two seconds to verify (see `startSlowFixture`).
    public static let slow = "tok-slow"

    private struct Made: Sendable {
        let client: TokenSigningKey
        let current: Delegation
        let issuers: [UInt8]
        let revocations: [UInt8]
        let expired: String
        let revoked: String
    }

    private static let made: Made = {
        do {
            let issuing = try TokenSigningKey.generate()
            let client = try TokenSigningKey.generate()
            let now = Date()
            func delegation(at time: Date, lasting lifetime: Int64 = 3600) throws -> Delegation {
                try Delegation.issue(
                    issuer: "org.example.provider", userID: "alice@example.com", appID: "com.example.mail",
                    containerID: "c-42", tokenKey: client.publicKey, issuingKey: issuing, now: time, lifetime: lifetime)
            }
            let old = try delegation(at: now - 7200)
            let expired = try AuthToken.make(
                challenge: "old", serverName: "app.example.com", delegation: old, tokenKey: client, now: now - 7100)
            let withdrawn = try delegation(at: now)
            let revoked = try AuthToken.make(
                challenge: "revoked", serverName: "app.example.com", delegation: withdrawn, tokenKey: client, now: now)
            return Made(
                client: client, current: try delegation(at: now, lasting: Delegation.maximumLifetime),
                issuers: TrustedIssuers([issuing.publicKey]).jwks(),
                revocations: RevocationList(
                    issued: Int64(now.timeIntervalSince1970), revokedDelegations: [withdrawn.claims.id]
                ).json(),
                expired: expired.compact, revoked: revoked.compact)
        } catch {
            fatalError("cannot make the test tokens: \(error)")
        }
    }()

    private static let validToken = Mutex<AuthToken?>(nil)

    /// The valid token, made again when it is five minutes old (its delegation lasts a day).
    private static func fresh() -> AuthToken {
        validToken.withLock { token in
            let now = Date()
            if let current = token, Int64(now.timeIntervalSince1970) - current.claims.issuedAt < 300 { return current }
            do {
                let minted = try AuthToken.make(
                    challenge: challenge, serverName: "app.example.com", delegation: made.current,
                    tokenKey: made.client, now: now)
                token = minted
                return minted
            } catch {
                fatalError("cannot make the test token: \(error)")
            }
        }
    }

    /// Writes the issuing keys and the revocation list into `sandbox`: the arguments that name them.
    public static func files(in sandbox: Sandbox) throws -> [String] {
        let issuers = try sandbox.write("issuers.jwks", String(decoding: made.issuers, as: UTF8.self))
        let revocations = try sandbox.write("revocations.json", String(decoding: made.revocations, as: UTF8.self))
        return ["--issuers", issuers, "--revocations", revocations]
    }

    /// Starts `dcverify serve` on a free port in `sandbox`, trusting the tokens' issuing key.
    public static func startService(
        in sandbox: Sandbox, name: String = "dcverify", _ extra: [String] = []
    ) throws -> RunningService {
        try RunningService.start(
            Binaries.dcverify, ["serve", "--listen", "127.0.0.1:0"] + files(in: sandbox) + extra, in: sandbox,
            name: name)
    }

    /// Starts the test-only fixture: the same service library with a table verifier that takes two
    /// seconds over ``slow``. A fake, because a real verification takes a tenth of a millisecond
    /// and a test of shutdown needs a request that is still in flight when SIGTERM comes.
    public static func startSlowFixture(in sandbox: Sandbox) throws -> RunningService {
        let table = try sandbox.write(
            "table.json",
            """
            {"\(slow)": {"code": 100, "challenge": "slow", "server": "s", "user": "u", "app": "a", "container": "c",
                        "created": 1, "delay": 2}}
            """)
        return try RunningService.start(Binaries.verificationServiceFixture, ["--table", table], in: sandbox)
    }
}

/// The files dcverify needs: the tokens' issuing key and revocation list.
public func verifierFiles(in sandbox: Sandbox) throws -> [String] { try Tokens.files(in: sandbox) }
