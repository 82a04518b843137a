import Foundation
import TestSupport
import Testing

/// One verification service process (dcverify or the table-verifier fixture) started in a
/// sandbox, its standard output and error in a log file, its port read from its port file.
struct RunningService {
    let process: SpawnedProcess
    let port: Int
    let log: String

    /// Starts `executable` with `arguments` plus `--port-file`, and waits (at most 60 s) for the
    /// port file; throws with the log if the process ends or the file never appears.
    static func start(
        _ executable: String, _ arguments: [String], in sandbox: Sandbox, name: String = "service"
    ) throws -> RunningService {
        let portFile = sandbox.file("\(name).port")
        let log = sandbox.file("\(name).log")
        let process = try SpawnedProcess(
            executable, arguments + ["--port-file", portFile], environment: sandbox.environment, output: log)
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8),
                let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return RunningService(process: process, port: port, log: log)
            }
            var status: Int32 = 0
            if waitpid(process.pid, &status, WNOHANG) == process.pid {
                throw StartFailure(description: "\(executable) ended (status \(status)): \(readLog(log))")
            }
            usleep(20_000)
        }
        process.kill()
        _ = process.wait(timeout: .seconds(10))
        throw StartFailure(description: "\(executable) wrote no port file in 60 s: \(readLog(log))")
    }

    struct StartFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// What the process has logged so far.
    var logText: String { Self.readLog(log) }

    static func readLog(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    /// Sends SIGTERM and waits (bounded); returns the exit status, or nil if it had to be killed
    /// or was killed by a signal.
    @discardableResult
    func stop(timeout: Duration = .seconds(30)) -> Int32? {
        process.kill(SIGTERM)
        guard let status = process.wait(timeout: timeout), !SpawnedProcess.wasSignaled(status) else { return nil }
        return (status >> 8) & 0xFF
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    func url(_ path: String, scheme: String = "http") -> String { "\(scheme)://127.0.0.1:\(port)\(path)" }
}

/// An HTTP/1.1 response as the bytes came: the status code, and the header fields with their
/// names in the case they had on the wire.
struct RawResponse {
    var status: Int
    var fields: [(name: String, value: String)]
    var body: [UInt8]

    /// The values of the fields named exactly `name` (case-sensitive, as app servers compare).
    func values(_ name: String) -> [String] { fields.filter { $0.name == name }.map(\.value) }

    /// The values of the fields named `name` in any case.
    func valuesIgnoringCase(_ name: String) -> [String] {
        fields.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// The names of the fields that start with `X-Good-GD-`, in any case, as they came.
    var goodFields: [String] {
        fields.map(\.name).filter { $0.lowercased().hasPrefix("x-good-gd-") }
    }

    /// Parses the first response in `bytes`; nil if there is none.
    init?(_ bytes: [UInt8]) {
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
final class RawConnection {
    let fd: Int32

    init(port: Int) throws {
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
    func send(_ bytes: [UInt8]) -> Bool {
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
    func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// Reads until the peer closes or `timeout` passes; returns what came and whether it closed.
    func readUntilClosed(timeout: Duration) -> (bytes: [UInt8], closed: Bool) {
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
    func readResponse(timeout: Duration = .seconds(30)) -> RawResponse? {
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
func rawRequest(
    port: Int, _ path: String, headers: [(String, String)] = [], method: String = "GET"
) throws -> RawResponse? {
    let connection = try RawConnection(port: port)
    var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for (name, value) in headers { request += "\(name): \(value)\r\n" }
    connection.send(request + "\r\n")
    return connection.readResponse()
}

/// curl, bounded (`--max-time 20`), with the response head in its output (`-i`).
func curl(_ arguments: [String], sandbox: Sandbox) throws -> ProcessResult {
    try sandbox.run(try which("curl"), ["-sS", "-i", "--max-time", "20"] + arguments, timeout: 40)
}

/// The table the fixture verifies with (see Tests/VerificationServiceFixture): fixed token
/// strings that stand in for real tokens until AuthTokenVerifier is wired in.
enum Tokens {
    static let valid = "tok-valid.Ab_9-~"
    static let challenge = "challenge 7f3a: one use"
    static let expired = "tok-expired"
    static let revoked = "tok-revoked"
    static let slow = "tok-slow"

    static let table = """
        {
          "\(valid)": {"code": 100, "challenge": "\(challenge)", "server": "app.example.com",
                       "user": "alice@example.com", "app": "com.example.mail", "container": "c-42",
                       "created": 1760000000},
          "\(expired)": {"code": 102},
          "\(revoked)": {"code": 103},
          "\(slow)": {"code": 100, "challenge": "slow", "server": "s", "user": "u", "app": "a", "container": "c",
                      "created": 1, "delay": 2}
        }
        """

    /// Starts the fixture with the table in `sandbox`.
    static func startFixture(
        in sandbox: Sandbox, name: String = "fixture", _ extra: [String] = []
    ) throws -> RunningService {
        let table = try sandbox.write("table.json", table)
        return try RunningService.start(
            Binaries.verificationServiceFixture, ["--table", table] + extra, in: sandbox, name: name)
    }
}

/// The files dcverify needs (until the AuthTokens verifier is wired in it only checks they exist).
func verifierFiles(in sandbox: Sandbox) throws -> [String] {
    let issuers = try sandbox.write("issuers.jwks", #"{"keys":[]}"#)
    let revocations = try sandbox.write(
        "revocations.json",
        #"{"v":1,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[]}"#)
    return ["--issuers", issuers, "--revocations", revocations]
}
