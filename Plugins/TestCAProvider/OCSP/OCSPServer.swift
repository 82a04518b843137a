import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization
import SystemSupport

/// The test CA's OCSP responder on HTTP (RFC 6960 appendix A): `POST /` with an
/// `application/ocsp-request` body, or `GET /<url-encoded base64 of the request>`.
///
/// A small blocking server on purpose: it serves a test CA in CI, and dcprovision stays free of
/// an event-loop stack that would weigh on every other command's start-up. It is still careful:
/// one thread per connection and at most ``maximumConnections`` at once (more are closed at
/// once), headers of at most 8 KiB and a body of at most 64 KiB, one request per connection, and
/// ``connectionDeadline`` for the whole exchange, so a slow client cannot hold it.
///
/// ``TestCA/ocspServer(validity:log:)`` makes one that answers for a test CA; `dcprovision testca
/// ocsp` listens with it.
public struct OCSPServer: Sendable {
    /// Answers a DER request with a DER response.
    public let respond: @Sendable ([UInt8]) -> [UInt8]
    /// Called with one line per request (method, status, size), or nil for silence.
    public let log: (@Sendable (String) -> Void)?

    /// Connections served at once; more are closed as they come.
    public static let maximumConnections = 32
    /// The most bytes of a request's line and header fields; more is answered 431.
    public static let maximumHeaderLength = 8 * 1024
    /// The most bytes of a POST body; more is answered 413.
    public static let maximumBodyLength = 64 * 1024
    /// Seconds one connection may take from its start to the answer.
    public static let connectionDeadline: TimeInterval = 10

    /// A server that answers each request with `respond`, and tells `log` about it.
    public init(respond: @escaping @Sendable ([UInt8]) -> [UInt8], log: (@Sendable (String) -> Void)? = nil) {
        self.respond = respond
        self.log = log
    }

    /// A listening TCP socket on `address`: an IPv4 or IPv6 literal or a host name (its first
    /// address), port 0 for any free one. `[::]` takes IPv4 connections too (a dual-stack socket),
    /// as `0.0.0.0` takes every IPv4 address. An address that cannot be had (in use, not this
    /// host's) is `ListenAddress.cannotListen(errno:)`'s one line, exit 69.
    public static func listen(_ address: ListenAddress) throws -> Listener {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        var found: UnsafeMutablePointer<addrinfo>?
        let looked = getaddrinfo(address.host, "\(address.port)", &hints, &found)
        guard looked == 0, let found, let entry = found.pointee.ai_addr else {
            if let found { freeaddrinfo(found) }
            throw DCError(
                .usage, "'\(address.host.escapingControlCharacters)' is not an address or a name this host knows",
                subject: address.description)
        }
        defer { freeaddrinfo(found) }
        let family = found.pointee.ai_family
        let socket = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw address.cannotListen(errno: errno) }
        var yes: Int32 = 1
        setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 {
            // Dual stack for the unspecified address, as a careful user expects of [::].
            var only: Int32 = 0
            setsockopt(socket, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &only, socklen_t(MemoryLayout<Int32>.size))
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let listening = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, entry, found.pointee.ai_addrlen) == 0 && Glibc.listen(socket, 64) == 0
                    && getsockname(socket, pointer, &length) == 0
            }
        }
        guard listening else {
            let code = errno
            close(socket)
            throw address.cannotListen(errno: code)
        }
        let port = withUnsafePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                // sin_port and sin6_port sit at the same offset.
                Int(UInt16(bigEndian: $0.pointee.sin_port))
            }
        }
        return Listener(descriptor: socket, port: port)
    }

    /// Accepts connections on `listener` until it is closed (``Listener/close()``); answers each
    /// on a thread of its own.
    public func serve(_ listener: Listener) {
        let slots = DispatchSemaphore(value: Self.maximumConnections)
        while true {
            let connection = accept(listener.descriptor, nil, nil)
            guard connection >= 0 else {
                if listener.isClosed { return }
                continue
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            guard slots.wait(timeout: .now()) == .success else {
                close(connection)
                continue
            }
            Thread.detachNewThread {
                defer {
                    close(connection)
                    slots.signal()
                }
                self.handle(connection)
            }
        }
    }

    private func handle(_ connection: Int32) {
        let deadline = Date().addingTimeInterval(Self.connectionDeadline)
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var input: [UInt8] = []
        func readMore() -> Bool {
            guard Date() < deadline else { return false }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(connection, &buffer, buffer.count, 0)
            if count < 0 && (errno == EINTR || errno == EAGAIN) { return Date() < deadline }
            guard count > 0 else { return false }
            input += buffer[..<count]
            return true
        }
        let separator: [UInt8] = [13, 10, 13, 10]
        var found = input.firstRange(of: separator)?.lowerBound
        while found == nil {
            guard input.count <= Self.maximumHeaderLength else { return answer(connection, 431, [], "headers") }
            guard readMore() else { return }
            found = input.firstRange(of: separator)?.lowerBound
        }
        guard let headerEnd = found else { return }
        let head = String(decoding: input[..<headerEnd], as: UTF8.self).split(separator: "\r\n").map(String.init)
        let requestLine = head.first?.split(separator: " ").map(String.init) ?? []
        guard requestLine.count == 3, requestLine[2].hasPrefix("HTTP/1.") else {
            return answer(connection, 400, [], "request line")
        }
        let (method, target) = (requestLine[0], requestLine[1])
        var body = Array(input[(headerEnd + 4)...])
        let request: [UInt8]
        switch method {
        case "POST":
            let fields = head.dropFirst().compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (
                    line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                )
            }
            guard !fields.contains(where: { $0.0 == "transfer-encoding" }),
                let lengthText = fields.last(where: { $0.0 == "content-length" })?.1, let length = Int(lengthText),
                length >= 0
            else { return answer(connection, 411, [], "no Content-Length") }
            guard length <= Self.maximumBodyLength else { return answer(connection, 413, [], "body") }
            while body.count < length {
                guard readMore() else { return }
                body = Array(input[(headerEnd + 4)...])
            }
            request = Array(body.prefix(length))
        case "GET":
            // RFC 6960 A.1: the request is the URL-encoding of the base64 of its DER.
            let encoded = target.drop { $0 == "/" }
            guard encoded.utf8.count <= Self.maximumHeaderLength, let text = String(encoded).removingPercentEncoding,
                let decoded = Data(base64Encoded: text)
            else { return answer(connection, 400, [], "GET path") }
            request = Array(decoded)
        default:
            return answer(connection, 405, [], method)
        }
        answer(connection, 200, respond(request), method)
    }

    private func answer(_ connection: Int32, _ status: Int, _ body: [UInt8], _ what: String) {
        let reasons = [
            200: "OK", 400: "Bad Request", 405: "Method Not Allowed", 411: "Length Required",
            413: "Content Too Large", 431: "Request Header Fields Too Large",
        ]
        var head = "HTTP/1.0 \(status) \(reasons[status] ?? "Error")\r\nConnection: close\r\n"
        if status == 200 { head += "Content-Type: application/ocsp-response\r\n" }
        let message = Array((head + "Content-Length: \(body.count)\r\n\r\n").utf8) + body
        var sent = 0
        while sent < message.count {
            let count = message[sent...].withUnsafeBytes {
                send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            sent += count
        }
        log?("\(what.escapingControlCharacters) \(status) \(body.count) bytes")
    }
}

extension OCSPServer {
    /// A listening socket: it owns the descriptor and closes it when it goes.
    public final class Listener: Sendable {
        /// The listening descriptor (close-on-exec).
        let descriptor: Int32
        /// The port it listens on: the one asked for, or the one the system picked for 0.
        public let port: Int
        private let closed = Atomic<Bool>(false)

        init(descriptor: Int32, port: Int) {
            self.descriptor = descriptor
            self.port = port
        }

        /// Whether ``close()`` was called.
        public var isClosed: Bool { closed.load(ordering: .acquiring) }

        /// Stops listening: ``OCSPServer/serve(_:)`` returns once its `accept` wakes. Requests
        /// already accepted are still answered.
        public func close() {
            closed.store(true, ordering: .releasing)
            // shutdown, not close: it wakes a thread blocked in accept, and the descriptor's
            // number cannot be reused while serve may still use it (deinit closes it).
            _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
        }

        deinit { Glibc.close(descriptor) }
    }
}

extension TestCA {
    /// An OCSP server that answers for this CA: good, revoked or unknown from `index.txt`, read
    /// afresh for every request (see ``ocspAnswer(serial:)``), signed by the issuing CA, each
    /// answer valid for `validity` seconds.
    public func ocspServer(validity: TimeInterval = 3600, log: (@Sendable (String) -> Void)? = nil) throws
        -> OCSPServer
    {
        let responder = try ocspResponder(validity: validity)
        let answer: @Sendable (String) -> OCSPResponder.Answer = { serial in
            (try? self.ocspAnswer(serial: serial)) ?? .unknown
        }
        return OCSPServer(respond: { request in responder.respond(to: request, answer: answer) }, log: log)
    }
}
