/// Text the protocol names — a URL scheme, a client id, a request id — checked once, where it
/// enters the program (a command-line argument, a URL, a file), and carried typed from then on.
///
/// A conforming type decides its rule and its one spelling in ``init(validating:)``; everything
/// else — the throwing initializer with its one error, `Codable` as a JSON string,
/// `CustomStringConvertible` — comes from this protocol, so that no two places check the same
/// text differently.
public protocol Identifier: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// What the value is called in an error message, such as `URL scheme`.
    static var kind: String { get }
    /// What a valid value looks like, as an error's hint.
    static var rule: String { get }
    /// The value of `text` in its one spelling (a scheme lowercased), or nil when `text` breaks the rule.
    init?(validating text: String)
    /// The value as the protocol writes it.
    var text: String { get }
}

extension Identifier {
    /// The value of `text`, or a data error naming ``kind`` and ``rule``.
    public init(_ text: String) throws {
        guard let value = Self(validating: text) else {
            throw DCError(
                .invalid, "'\(text.escapingControlCharacters)' is not a valid \(Self.kind)", hint: Self.rule)
        }
        self = value
    }

    /// The value as the protocol writes it.
    public var description: String { text }

    /// Orders values by their text.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.text < rhs.text }

    /// Reads a JSON string and checks it; a string that breaks the rule is a decoding error whose
    /// underlying error is the `DCError` of ``init(_:)``, so that a reader of a stored file can
    /// say which id in it is not valid.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            self = try Self(text)
        } catch {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: container.codingPath,
                    debugDescription: "'\(text.escapingControlCharacters)' is not a valid \(Self.kind)",
                    underlyingError: error))
        }
    }

    /// Writes the value as a JSON string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

/// A URL scheme (RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`), compared
/// case-insensitively and kept lowercase: it names a program's scheme handler, its desktop entry,
/// its `mimeapps.list` line and its registration file.
public struct URLScheme: Identifier {
    /// The scheme, lowercase.
    public let text: String

    /// `URL scheme`.
    public static let kind = "URL scheme"
    /// The RFC 3986 grammar, with an example.
    public static let rule = "use ALPHA *( ALPHA / DIGIT / \"+\" / \"-\" / \".\" ), e.g. org.example.provider"

    /// `text` lowercased, when it is an RFC 3986 scheme.
    public init?(validating text: String) {
        let lower = text.lowercased()
        guard let first = lower.unicodeScalars.first, ("a"..."z").contains(first),
            lower.unicodeScalars.allSatisfy({
                ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0)
            })
        else { return nil }
        self.text = lower
    }
}

/// A managed client's id: lowercase letters, digits and `-`, 1–64 characters, not starting with
/// `-`. It names the client's files on the provider's side and travels in every URL it signs.
public struct ClientID: Identifier {
    /// The id.
    public let text: String

    /// `client id`.
    public static let kind = "client id"
    /// The character set and length.
    public static let rule = "use 1-64 lowercase letters, digits and '-', not starting with '-'"

    /// `text`, when it is a client id.
    public init?(validating text: String) {
        guard (1...64).contains(text.utf8.count), !text.hasPrefix("-"),
            text.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" })
        else { return nil }
        self.text = text
    }
}

/// A single-use id of 16 random bytes, written as 32 lowercase hex digits: a credential request,
/// an identity-token request, an auth-token delegation. It names the spool file that answers it.
public struct RequestID: Identifier {
    /// The 32 hex digits.
    public let text: String

    /// `request id`.
    public static let kind = "request id"
    /// The length and digits.
    public static let rule = "use 32 lowercase hex digits"

    /// `text`, when it is 32 lowercase hex digits.
    public init?(validating text: String) {
        guard LowercaseHex.matches(text, count: 32) else { return nil }
        self.text = text
    }

    /// A fresh id from the system's random number generator (getrandom(2)).
    public static func random() -> RequestID {
        var generator = SystemRandomNumberGenerator()
        let hex = (0..<16).map { _ in
            let byte = UInt8.random(in: .min ... .max, using: &generator)
            return String(byte >> 4, radix: 16) + String(byte & 0xF, radix: 16)
        }
        return RequestID(unchecked: hex.joined())
    }

    private init(unchecked text: String) { self.text = text }
}

/// The protocol's one hex rule: request ids, digests, signatures and the other values it writes
/// in hex use the digits `0`–`9` and `a`–`f`, a fixed number of them, and no other spelling.
public enum LowercaseHex {
    /// Whether `text` is exactly `count` lowercase hex digits.
    public static func matches(_ text: String, count: Int) -> Bool {
        text.utf8.count == count
            && text.utf8.allSatisfy {
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
            }
    }
}
