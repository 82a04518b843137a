import CredentialCoding
import DerivedCredentials

/// One message of the conversation as a URL, `scheme:/path?v=2&name=value&…`, declared once.
///
/// A message is a struct whose stored properties are its parameters: in the order they are
/// declared, under the names its `CodingKeys` give, each from a type that carries its rule
/// (``URLParameterValue``), or a group of fields declared with a type of their own (the policy:
/// `ClientPolicy`), which the URL carries as parameters in place. Printing, strict parsing and the
/// signed text are all derived from that declaration by `URLMessageCoder`, so adding a field is
/// one property (and its wire name) in the message's struct, or in the group's.
public protocol URLMessage: Codable, Sendable, Equatable {
    /// The URL path without its slash, such as `deliver`.
    static var path: String { get }
    /// A rule across fields or a range a field's type does not hold, as the reason a URL is
    /// refused; nil when the message keeps it. Checked after parsing; none by default.
    var violation: String? { get }
}

extension URLMessage {
    /// No rule beyond the fields' own.
    public var violation: String? { nil }

    /// `scheme:/path?v=2&…` (RFC 3986; every value is from an unreserved character set).
    public func url(scheme: URLScheme) -> String {
        URLMessageCoder.render(scheme: scheme, path: Self.path, URLMessageCoder.parameters(of: self))
    }

    /// Parses a URL addressed to `scheme` as this message, strictly (``DeliveryMessage/parse(_:scheme:)``
    /// says what is refused).
    public static func parse(_ text: String, scheme: URLScheme) throws -> Self {
        let url = try URLMessageCoder.split(text, scheme: scheme)
        guard url.path == path else {
            throw URLMessageCoder.refuse("a \(url.path.escapingControlCharacters) URL where a \(path) URL was expected")
        }
        return try URLMessageCoder.decode(Self.self, url, scheme: scheme)
    }
}

/// A message signed with an Ed25519 key: the provider's (pinned by the client) or the client's
/// (pinned by the provider when they paired). The signature is its last parameter, `sig`, and covers
/// ``signingInput(scheme:)``: a fixed context line, then the URL as written without `&sig=…`, so it
/// binds the scheme, the path and every value.
public protocol SignedURLMessage: URLMessage {
    /// The signature, in hex; nil until ``signed(with:scheme:)`` made it. A parsed message has one.
    var signature: SignatureHex? { get set }
}

extension SignedURLMessage {
    /// The bytes the signature covers: ``DeliveryMessage/signingContext``, then the URL for
    /// `scheme` without its `sig` parameter.
    public func signingInput(scheme: URLScheme) -> [UInt8] {
        var unsigned = self
        unsigned.signature = nil
        return Array((DeliveryMessage.signingContext + unsigned.url(scheme: scheme)).utf8)
    }

    /// This message signed with `key` for `scheme`: the same values, with the signature replaced.
    public func signed(with key: MessageSigningKey, scheme: URLScheme) throws -> Self {
        var signed = self
        signed.signature = try SignatureHex(Digests.hex(try key.sign(signingInput(scheme: scheme))))
        return signed
    }

    /// Whether the signature is `publicKey`'s over ``signingInput(scheme:)``; false without one.
    public func isSigned(by publicKey: [UInt8], scheme: URLScheme) -> Bool {
        guard let signature, let bytes = Digests.bytes(hex: signature.text) else { return false }
        return MessageSigningKey.verify(bytes, of: signingInput(scheme: scheme), publicKey: publicKey)
    }

    /// Signed messages are refused without their signature.
    public var violation: String? { signature == nil ? "missing 'sig'" : nil }
}

/// A value one URL parameter carries: read strictly from its one spelling and written back in it.
/// The rule is the type's: a `ClientID` is a client id wherever it travels.
public protocol URLParameterValue {
    /// The value `text` spells, or nil when `text` breaks the type's rule.
    init?(parameter text: String)
    /// The value's one spelling in a URL.
    var parameter: String { get }
    /// The value a URL leaves out: never written, and what a missing parameter reads as (so that
    /// a written-out one is out of place). Nil, by default: the parameter is always there.
    static var unwritten: Self? { get }
}

extension URLParameterValue {
    /// None: the parameter is always written.
    public static var unwritten: Self? { nil }

    /// Whether this is the value a URL leaves out (``unwritten``).
    var isUnwritten: Bool { Self.unwritten?.parameter == parameter }
}

/// Fields a URL message carries as parameters of its own, in place, declared with a type of their
/// own because they live elsewhere too (a policy is kept as JSON): its stored properties are the
/// parameters, in the order they are declared, each a ``URLParameterValue``. Its `CodingKeys` name
/// the fields elsewhere; `parameterNames` gives the URL's name where it differs.
protocol URLParameterGroup: Codable {
    /// The URL name of each field whose URL name is not its coding key, by coding key.
    static var parameterNames: [String: String] { get }
    /// A rule across the group's fields or a range a field's type does not hold, as the reason a
    /// URL is refused; nil when the group keeps it. Checked before the message's own.
    var violation: String? { get }
}

extension URLParameterValue where Self: Identifier {
    /// The identifier's rule.
    public init?(parameter text: String) { self.init(validating: text) }
    /// The identifier's text.
    public var parameter: String { text }
}

/// A client id travels in URLs as its text (`client=`).
extension ClientID: URLParameterValue {}
/// A request id travels in URLs as its 32 hex digits (`request=`, `id=`).
extension RequestID: URLParameterValue {}

/// A SHA-256 digest or HMAC-SHA-256 in 64 lowercase hex digits.
public struct SHA256Hex: Identifier, URLParameterValue {
    /// The 64 hex digits.
    public let text: String
    /// `SHA-256 value`.
    public static let kind = "SHA-256 value"
    /// The length and digits.
    public static let rule = "use 64 lowercase hex digits"
    /// `text`, when it is 64 lowercase hex digits.
    public init?(validating text: String) {
        guard LowercaseHex.matches(text, count: 64) else { return nil }
        self.text = text
    }
}

/// An Ed25519 signature in 128 lowercase hex digits.
public struct SignatureHex: Identifier, URLParameterValue {
    /// The 128 hex digits.
    public let text: String
    /// `signature`.
    public static let kind = "signature"
    /// The length and digits.
    public static let rule = "use 128 lowercase hex digits"
    /// `text`, when it is 128 lowercase hex digits.
    public init?(validating text: String) {
        guard LowercaseHex.matches(text, count: 128) else { return nil }
        self.text = text
    }
}

/// A time (seconds since 1970), a sequence number or a lifetime: decimal digits, 1–18 of them, no
/// leading zero, in one spelling.
extension URLParameterValue where Self: FixedWidthInteger {
    /// The number `text` spells in its one spelling.
    public init?(parameter text: String) {
        guard URLMessageCoder.isNumber(text), let value = Self(text, radix: 10) else { return nil }
        self = value
    }
    /// The decimal digits.
    public var parameter: String { String(self) }
}

/// A time (`time=`).
extension Int64: URLParameterValue {}
/// A sequence number (`seq=`).
extension UInt64: URLParameterValue {}
/// A lifetime in seconds (`autolock=`).
extension Int: URLParameterValue {}

/// Text for people — a policy's message, an acknowledgement's reason — as unpadded base64url of
/// text ``PolicyText/check(_:)`` allows.
extension String: URLParameterValue {
    /// The text `parameter` encodes, if it is unpadded base64url of allowed text.
    public init?(parameter text: String) {
        guard let decoded = PolicyText.decode(text) else { return nil }
        self = decoded
    }
    /// The text as unpadded base64url.
    public var parameter: String { PolicyText.encode(self) }
}

extension AuthState: URLParameterValue {
    /// The state named `text`.
    public init?(parameter text: String) { self.init(name: text) }
    /// The state's name.
    public var parameter: String { description }
}

extension PolicyState: URLParameterValue {
    /// The state named `text`.
    public init?(parameter text: String) { self.init(name: text) }
    /// The state's name.
    public var parameter: String { description }
}

extension PolicySubject: URLParameterValue {
    /// The subject named `text` (`auth` or `fileio`).
    public init?(parameter text: String) { self.init(rawValue: text) }
    /// `auth` or `fileio`.
    public var parameter: String { rawValue }
}

extension TokenLogin: URLParameterValue {
    /// The login named `text`.
    public init?(parameter text: String) { self.init(rawValue: text) }
    /// `passphrase` or `secure-services`.
    public var parameter: String { rawValue }
    /// The passphrase, the login of every policy before token logins could be set: left out.
    public static var unwritten: Self? { .passphrase }
}

/// Prints and parses ``URLMessage``s from their declarations: an `Encoder` that collects the
/// parameters in declaration order, and a `Decoder` that hands each field its parameter's text.
enum URLMessageCoder {
    /// A URL split into its path and its parameters, once each; nothing checked but the form.
    struct Split {
        var path: String
        var values: [String: String]
        /// The URL after `scheme:`, as given: what the message must print back exactly.
        var rest: Substring
    }

    static func refuse(_ why: String) -> DCError {
        DCError(.invalid, "refused URL: \(why)", remedy: .useToolkitURLs)
    }

    static func render(scheme: URLScheme, path: String, _ parameters: [(String, String)]) -> String {
        "\(scheme.text):/\(path)?" + parameters.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// The parameters of `message`, `v` first, in declaration order.
    static func parameters(of message: some URLMessage) -> [(String, String)] {
        let writer = Writer()
        // Cannot fail: every field's type is a URLParameterValue, which Writer takes as is.
        try? message.encode(to: writer)
        return [("v", DeliveryMessage.version)] + writer.box.pairs
    }

    /// Checks the URL's form (length, characters, scheme, path, one of each parameter, the
    /// version) and splits it; which message it is and each value are checked by ``decode(_:_:scheme:)``.
    static func split(_ text: String, scheme: URLScheme) throws -> Split {
        guard text.utf8.count <= DeliveryMessage.maximumLength else {
            throw refuse("longer than \(DeliveryMessage.maximumLength) bytes")
        }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw refuse("spaces, control or non-ASCII characters")
        }
        let prefix = scheme.text + ":"
        guard text.lowercased().hasPrefix(prefix) else { throw refuse("not for the scheme \(scheme)") }
        var rest = text.dropFirst(prefix.count)
        // "scheme:/path" only: no authority, not even an empty one ("scheme:///path"), and no
        // rootless path ("scheme:path").
        guard rest.hasPrefix("/") else { throw refuse("a path that does not start with '/'") }
        guard !rest.hasPrefix("//") else { throw refuse("an authority ('//'); write scheme:/path") }
        let whole = rest
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
        guard let version = values.removeValue(forKey: "v") else { throw refuse("missing 'v'") }
        guard version == DeliveryMessage.version else {
            // Refused like any other message that cannot be authenticated (exit 77), with a
            // message that says what to update.
            throw DCError(
                .refusedMessage,
                "refused URL: protocol version '\(version.escapingControlCharacters)'; this program speaks version \(DeliveryMessage.version)",
                remedy: .updateURLMaker)
        }
        return Split(path: path, values: values, rest: whole)
    }

    /// `url` read as a `Message`: every field from its parameter under its type's rule, nothing
    /// left over, the message's own rules kept, and printed back exactly as given (one spelling
    /// only: the parameters in the declared order, so that what was signed is what was sent).
    static func decode<Message: URLMessage>(_ type: Message.Type, _ url: Split, scheme: URLScheme) throws -> Message {
        let reader = Reader(values: url.values)
        let message: Message
        do {
            message = try Message(from: reader)
        } catch let error as DCError {
            throw error
        } catch {
            throw refuse("a malformed \(Message.path) URL")
        }
        if let leftover = reader.box.values.keys.sorted().first { throw refuse("unexpected parameter '\(leftover)'") }
        if let violation = reader.box.violations.first ?? message.violation { throw refuse(violation) }
        guard message.url(scheme: scheme) == scheme.text + ":" + String(url.rest) else {
            throw refuse("parameters out of order")
        }
        return message
    }

    /// Decimal digits, 1–18 of them, no leading zero: a time or a sequence number.
    static func isNumber(_ value: String) -> Bool {
        (1...18).contains(value.utf8.count) && !(value.hasPrefix("0") && value.utf8.count > 1)
            && value.unicodeScalars.allSatisfy { ("0"..."9").contains($0) }
    }

    // MARK: - Writing

    final class Pairs { var pairs: [(String, String)] = [] }

    struct Writer: Encoder {
        var box = Pairs()
        /// The URL names of a group's fields (`URLParameterGroup.parameterNames`); none for a message.
        var names: [String: String] = [:]
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }
        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            KeyedEncodingContainer(Fields(box: box, names: names))
        }
        func unkeyedContainer() -> any UnkeyedEncodingContainer { Unsupported() }
        func singleValueContainer() -> any SingleValueEncodingContainer { Unsupported() }
    }

    struct Fields<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let box: Pairs
        var names: [String: String] = [:]
        var codingPath: [any CodingKey] { [] }
        mutating func encodeNil(forKey key: Key) throws {}
        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            // A group's fields go in place, in their order, under their URL names.
            if let group = value as? any URLParameterGroup {
                return try group.encode(to: Writer(box: box, names: type(of: group).parameterNames))
            }
            guard let value = value as? any URLParameterValue else { throw Unsupported.error }
            guard !value.isUnwritten else { return }
            box.pairs.append((names[key.stringValue] ?? key.stringValue, value.parameter))
        }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
            -> KeyedEncodingContainer<NestedKey>
        { KeyedEncodingContainer(Fields<NestedKey>(box: Pairs())) }
        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { Unsupported() }
        mutating func superEncoder() -> any Encoder { Writer() }
        mutating func superEncoder(forKey key: Key) -> any Encoder { Writer() }
    }

    /// What a message's declaration cannot use: nested or unkeyed values. Encoding one fails.
    struct Unsupported: UnkeyedEncodingContainer, SingleValueEncodingContainer {
        static let error = EncodingError.invalidValue(
            0, .init(codingPath: [], debugDescription: "a URL message field is not a URLParameterValue"))
        var codingPath: [any CodingKey] { [] }
        var count: Int { 0 }
        mutating func encodeNil() throws { throw Self.error }
        mutating func encode<T: Encodable>(_ value: T) throws { throw Self.error }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
            -> KeyedEncodingContainer<NestedKey>
        { KeyedEncodingContainer(Fields<NestedKey>(box: Pairs())) }
        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { self }
        mutating func superEncoder() -> any Encoder { Writer() }
    }

    // MARK: - Reading

    final class Values {
        var values: [String: String]
        /// What the groups read so far said of themselves (`URLParameterGroup.violation`).
        var violations: [String] = []
        init(_ values: [String: String]) { self.values = values }
    }

    struct Reader: Decoder {
        let box: Values
        /// The URL names of a group's fields (`URLParameterGroup.parameterNames`); none for a message.
        var names: [String: String] = [:]
        init(values: [String: String]) { box = Values(values) }
        init(box: Values, names: [String: String]) { (self.box, self.names) = (box, names) }
        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }
        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            KeyedDecodingContainer(Parameters(box: box, names: names))
        }
        func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw Parameters<AnyKey>.unsupported }
        func singleValueContainer() throws -> any SingleValueDecodingContainer {
            throw Parameters<AnyKey>.unsupported
        }
    }

    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    struct Parameters<Key: CodingKey>: KeyedDecodingContainerProtocol {
        static var unsupported: DecodingError {
            .dataCorrupted(.init(codingPath: [], debugDescription: "a URL message field is not a URLParameterValue"))
        }
        let box: Values
        var names: [String: String] = [:]
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] {
            let keys = Dictionary(names.map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            return box.values.keys.compactMap { Key(stringValue: keys[$0] ?? $0) }
        }
        /// The URL name of `key`.
        func name(_ key: Key) -> String { names[key.stringValue] ?? key.stringValue }
        func contains(_ key: Key) -> Bool { box.values[name(key)] != nil }
        func decodeNil(forKey key: Key) throws -> Bool { !contains(key) }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            // A group's fields are read in place, each under its URL name.
            if let group = T.self as? any URLParameterGroup.Type {
                guard let read = try group.init(from: Reader(box: box, names: group.parameterNames)) as? T else {
                    throw Self.unsupported
                }
                if let violation = (read as? any URLParameterGroup)?.violation { box.violations.append(violation) }
                return read
            }
            guard let kind = T.self as? any URLParameterValue.Type else { throw Self.unsupported }
            guard let value = box.values.removeValue(forKey: name(key)) else {
                if let unwritten = kind.unwritten as? T { return unwritten }
                throw refuse("missing '\(name(key))'")
            }
            guard let parsed = kind.init(parameter: value) as? T else {
                throw refuse("invalid '\(name(key))'")
            }
            return parsed
        }
        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey>
        { throw Self.unsupported }
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { throw Self.unsupported }
        func superDecoder() throws -> any Decoder { throw Self.unsupported }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw Self.unsupported }
    }
}
