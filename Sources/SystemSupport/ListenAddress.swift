import DerivedCredentials
import Glibc

/// A host and port to listen on, written `HOST:PORT` (`[v6]:PORT` for an IPv6 literal): the one
/// rule of every `--listen` (`dcverify serve`, `dcprovision testca ocsp`) and of the `listen` setting
/// of dcverify's configuration file.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    /// A host name or an IP address literal (without brackets).
    public var host: String
    /// The TCP port; 0 asks for a free one.
    public var port: Int

    /// An address from its parts.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`, `[IPv6]:PORT` or `:PORT` (all addresses, `0.0.0.0`).
    public init(parsing text: String) throws {
        guard let colon = text.lastIndex(of: ":") else {
            throw DCError(.usage, "expected HOST:PORT, such as 127.0.0.1:8080", subject: text)
        }
        var host = String(text[..<colon])
        let portText = text[text.index(after: colon)...]
        guard let port = Int(portText), (0...65535).contains(port), portText.allSatisfy(\.isASCII) else {
            throw DCError(.usage, "the port must be a number from 0 to 65535", subject: text)
        }
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
        } else if host.contains(":") {
            throw DCError(.usage, "write an IPv6 address in brackets: [::1]:8080", subject: text)
        }
        if host.isEmpty { host = "0.0.0.0" }
        guard host.utf8.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            throw DCError(.usage, "the host must be a name or an address", subject: text)
        }
        self.init(host: host, port: port)
    }

    /// The one line for a listener that could not take this address, from the `errno` its
    /// `bind` or `listen` set: in use (`EADDRINUSE`), not this host's (`EADDRNOTAVAIL`), or what
    /// the system says; each `cannotListen` (exit 69), naming a free port of the same host. The
    /// one wording of every listener the tools have (`listener` says which it is).
    public func cannotListen(errno code: Int32, listener: DCError.Remedy.Listener = .service) -> DCError {
        let reason =
            switch code {
            case EADDRINUSE: "the address is in use"
            case EADDRNOTAVAIL: "the address is not one of this host's"
            case EACCES: "a port below 1024 needs privileges"
            default: "cannot listen: " + String(cString: strerror(code))
            }
        return DCError(
            .cannotListen, reason, subject: description, remedy: .listenOnFreePort(host: host, listener: listener))
    }

    /// `HOST:PORT`, with brackets around an IPv6 literal.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
