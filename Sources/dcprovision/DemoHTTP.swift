import DerivedCredentials
import Foundation

/// The demo's application server side: one HTTP/1.1 GET to a service on this host, over a plain
/// socket (the demo has no HTTP client library, and needs none for one request).
enum DemoHTTP {
    /// `GET path` on `127.0.0.1:port` with `headers`; returns the status code and the header
    /// fields in the order they came. Gives up after 10 s.
    static func get(port: Int, _ path: String, headers: [(String, String)]) throws -> (
        status: Int, fields: [(name: String, value: String)]
    ) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw DCError(.ioError, "cannot open a socket") }
        defer { close(socket) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw DCError(.notReady, "cannot connect to 127.0.0.1:\(port)") }
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        let bytes = Array((request + "\r\n").utf8)
        guard bytes.withUnsafeBytes({ send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count
        else { throw DCError(.ioError, "cannot send the request") }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while response.count < 65536 {
            let count = recv(socket, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            response += buffer[..<count]
        }
        let head = String(decoding: response, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
        let lines = head.components(separatedBy: "\r\n")
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.1 "),
            let status = Int(statusLine.dropFirst(9).prefix(3))
        else { throw DCError(.invalid, "not an HTTP response from 127.0.0.1:\(port)") }
        let fields = lines.dropFirst().compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return (status, fields)
    }
}
