import DerivedCredentials
import Foundation

/// The four messages of the conversation, as URLs. They are world-readable (a launched
/// handler's argv is in `/proc/PID/cmdline`), so they carry only a version, single-use ids, a
/// status and a digest or MAC — never a secret. Parsing is strict: `scheme:/path` with no
/// authority, the exact parameters, each once, from fixed character sets, under a length cap;
/// anything else is refused.
///
/// - `<provider-scheme>:/new?v=1&client=ID&request=HEX32` — the client asks for a credential.
/// - `<client-scheme>:/deliver?v=1&client=ID&request=HEX32&digest=HEX64` — the sealed payload is
///   in the client's spool as `<request>.cms`, with this SHA-256.
/// - `<provider-scheme>:/result?v=1&request=HEX32&status=STATUS&mac=HEX64` — the client's
///   answer, authenticated with the key sealed in the payload.
/// - `<provider-scheme>:/available?v=1&client=ID` — the client's secure services became
///   available: queued deliveries may go now.
public enum DeliveryMessage: Sendable, Equatable {
    /// A client asks its provider for a credential, under a fresh request id.
    case new(client: String, request: String)
    /// A client's secure services became available; queued deliveries to it may go.
    case available(client: String)
    /// A provider tells a client that `<request>.cms` is in its spool, with this SHA-256 in hex.
    case deliver(client: String, request: String, digest: String)
    /// A client answers a delivery with a status (`ok` or an error name) and its HMAC-SHA-256 in hex.
    case result(request: String, status: String, mac: String)

    /// The protocol version every URL carries as `v=1`; any other is refused.
    public static let version = "1"
    /// The longest URL parsed, in UTF-8 bytes; longer ones are refused before anything else is read.
    public static let maximumLength = 512

    /// The URL path without its slash: `new`, `available`, `deliver` or `result`.
    public var path: String {
        switch self {
        case .new: "new"
        case .available: "available"
        case .deliver: "deliver"
        case .result: "result"
        }
    }

    var parameters: [(String, String)] {
        switch self {
        case .new(let client, let request): [("v", Self.version), ("client", client), ("request", request)]
        case .available(let client): [("v", Self.version), ("client", client)]
        case .deliver(let client, let request, let digest):
            [("v", Self.version), ("client", client), ("request", request), ("digest", digest)]
        case .result(let request, let status, let mac):
            [("v", Self.version), ("request", request), ("status", status), ("mac", mac)]
        }
    }

    /// `scheme:/path?k=v&…` (RFC 3986; every value is from an unreserved character set).
    public func url(scheme: String) -> String {
        "\(scheme):/\(path)?" + parameters.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// Parses a URL addressed to `scheme`, strictly.
    public static func parse(_ text: String, scheme: String) throws -> DeliveryMessage {
        func refuse(_ why: String) -> DCError {
            DCError(.invalid, "refused URL: \(why)", hint: "URLs are produced by dcprovision and dcclient only")
        }
        guard text.utf8.count <= maximumLength else { throw refuse("longer than \(maximumLength) bytes") }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw refuse("spaces, control or non-ASCII characters")
        }
        let prefix = scheme.lowercased() + ":"
        guard text.lowercased().hasPrefix(prefix) else { throw refuse("not for the scheme \(scheme)") }
        var rest = text.dropFirst(prefix.count)
        // "scheme:/path" only: no authority, not even an empty one ("scheme:///path"), and no
        // rootless path ("scheme:path").
        guard rest.hasPrefix("/") else { throw refuse("a path that does not start with '/'") }
        guard !rest.hasPrefix("//") else { throw refuse("an authority ('//'); write scheme:/path") }
        rest = rest.dropFirst()
        guard let question = rest.firstIndex(of: "?") else { throw refuse("no parameters") }
        let path = String(rest[..<question])
        let query = rest[rest.index(after: question)...]
        guard !query.contains("#") else { throw refuse("a fragment") }
        var values: [String: String] = [:]
        for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else { throw refuse("a malformed parameter") }
            guard values.updateValue(String(parts[1]), forKey: String(parts[0])) == nil else {
                throw refuse("parameter '\(parts[0])' given twice")
            }
        }
        func take(_ name: String, _ valid: (String) -> Bool) throws -> String {
            guard let value = values.removeValue(forKey: name) else { throw refuse("missing '\(name)'") }
            guard valid(value) else { throw refuse("invalid '\(name)'") }
            return value
        }
        guard try take("v", { $0 == version }) == version else { throw refuse("unsupported version") }
        let message: DeliveryMessage
        switch path {
        case "new":
            message = .new(client: try take("client", isIdentifier), request: try take("request", { isHex($0, 32) }))
        case "available":
            message = .available(client: try take("client", isIdentifier))
        case "deliver":
            message = .deliver(
                client: try take("client", isIdentifier), request: try take("request", { isHex($0, 32) }),
                digest: try take("digest", { isHex($0, 64) }))
        case "result":
            message = .result(
                request: try take("request", { isHex($0, 32) }), status: try take("status", isIdentifier),
                mac: try take("mac", { isHex($0, 64) }))
        default:
            throw refuse("unknown path '\(path.escapingControlCharacters)'")
        }
        guard values.isEmpty else { throw refuse("unexpected parameter '\(values.keys.sorted()[0])'") }
        return message
    }

    /// Lowercase letters, digits and `-`, 1–64 characters, not starting with `-`.
    public static func isIdentifier(_ value: String) -> Bool {
        (1...64).contains(value.count) && !value.hasPrefix("-")
            && value.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
    }

    static func isHex(_ value: String, _ count: Int) -> Bool {
        value.count == count && value.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
    }
}
