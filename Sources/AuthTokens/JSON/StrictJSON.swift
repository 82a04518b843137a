/// A JSON value read by ``StrictJSON``: only what the token and file formats use. Shared with the
/// package's other token module (IdentityTokens), not public.
package enum JSONValue: Equatable {
    case object([String: JSONValue])
    case array([JSONValue])
    case string(String)
    case integer(Int64)
    case bool(Bool)
    case null
}

/// Why a token, a JWS or a file is not accepted; the message names the rule, never the input
/// (a token is a bearer credential and must not reach a log).
package struct FormatError: Error, Equatable, CustomStringConvertible {
    /// The rule broken, in one line.
    package var description: String
    /// The error that says `description`.
    package init(_ description: String) { self.description = description }
}

/// A strict RFC 8259 reader for small documents.
///
/// Stricter than `JSONDecoder` on purpose: a member name that appears twice in one object is an
/// error (RFC 8259 leaves it to the reader, and two readers that pick different copies are a
/// classic JWT confusion), numbers must be integers that fit in 64 bits (no fraction, exponent or
/// leading zero), strings must be valid UTF-8 without raw control characters or lone surrogate
/// escapes, and nesting is limited.
package enum StrictJSON {
    /// Deepest nesting of arrays and objects accepted.
    static let maximumDepth = 8

    /// The one JSON value in `bytes`, with nothing but white space around it.
    package static func parse(_ bytes: [UInt8]) throws(FormatError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(FormatError) -> JSONValue in
            var reader = Reader(bytes: buffer)
            reader.skipSpace()
            let value = try reader.value(depth: 0)
            reader.skipSpace()
            guard reader.index == buffer.count else { throw FormatError("text after the JSON value") }
            return value
        }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func expect(_ literal: StaticString) throws(FormatError) {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw FormatError("truncated JSON") }
            for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
                throw FormatError("not a JSON value")
            }
            index += count
        }

        mutating func value(depth: Int) throws(FormatError) -> JSONValue {
            guard index < bytes.count else { throw FormatError("truncated JSON") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try expect("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expect("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expect("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .integer(try integer())
            default: throw FormatError("not a JSON value")
            }
        }

        mutating func object(depth: Int) throws(FormatError) -> JSONValue {
            guard depth <= StrictJSON.maximumDepth else { throw FormatError("JSON nested too deeply") }
            index += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw FormatError("an object member has no name")
                }
                let name = try string()
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw FormatError("':' missing") }
                index += 1
                skipSpace()
                let member = try value(depth: depth)
                guard members.updateValue(member, forKey: name) == nil else {
                    throw FormatError("a member name appears twice in one object")
                }
                skipSpace()
                guard index < bytes.count else { throw FormatError("truncated JSON") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { throw FormatError("',' or '}' missing") }
                index += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) throws(FormatError) -> JSONValue {
            guard depth <= StrictJSON.maximumDepth else { throw FormatError("JSON nested too deeply") }
            index += 1
            var elements: [JSONValue] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipSpace()
                elements.append(try value(depth: depth))
                skipSpace()
                guard index < bytes.count else { throw FormatError("truncated JSON") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "]") else { throw FormatError("',' or ']' missing") }
                index += 1
                return .array(elements)
            }
        }

        mutating func integer() throws(FormatError) -> Int64 {
            let negative = bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            let start = index
            var magnitude: UInt64 = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { throw FormatError("an integer does not fit in 64 bits") }
                magnitude = sum
                index += 1
            }
            guard index > start else { throw FormatError("a number has no digits") }
            guard !(bytes[start] == UInt8(ascii: "0") && index - start > 1) else {
                throw FormatError("a number has a leading zero")
            }
            if index < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index]) {
                throw FormatError("only integers are accepted")
            }
            if negative {
                guard magnitude != 0 else { throw FormatError("-0 is not accepted") }
                guard magnitude <= UInt64(Int64.max) + 1 else {
                    throw FormatError("an integer does not fit in 64 bits")
                }
                return magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
            }
            guard magnitude <= UInt64(Int64.max) else { throw FormatError("an integer does not fit in 64 bits") }
            return Int64(magnitude)
        }

        mutating func hexQuad() throws(FormatError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw FormatError("truncated \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let digit = bytes[index]
                let nibble: UInt32
                switch digit {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = UInt32(digit - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = UInt32(digit - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = UInt32(digit - UInt8(ascii: "A") + 10)
                default: throw FormatError("a \\u escape is not four hex digits")
                }
                value = value << 4 | nibble
                index += 1
            }
            return value
        }

        mutating func string() throws(FormatError) -> String {
            index += 1  // the opening quote
            var utf8: [UInt8] = []
            while true {
                guard index < bytes.count else { throw FormatError("unterminated string") }
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard let text = String(validating: utf8, as: UTF8.self) else {
                        throw FormatError("a string is not valid UTF-8")
                    }
                    return text
                case 0x00..<0x20: throw FormatError("a raw control character in a string")
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { throw FormatError("unterminated string") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
                    case UInt8(ascii: "b"): utf8.append(0x08)
                    case UInt8(ascii: "f"): utf8.append(0x0C)
                    case UInt8(ascii: "n"): utf8.append(0x0A)
                    case UInt8(ascii: "r"): utf8.append(0x0D)
                    case UInt8(ascii: "t"): utf8.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hexQuad()
                        if (0xD800..<0xDC00).contains(scalar) {
                            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                                bytes[index + 1] == UInt8(ascii: "u")
                            else { throw FormatError("a lone surrogate escape") }
                            index += 2
                            let low = try hexQuad()
                            guard (0xDC00..<0xE000).contains(low) else { throw FormatError("a lone surrogate escape") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00..<0xE000).contains(scalar) {
                            throw FormatError("a lone surrogate escape")
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw FormatError("an invalid \\u escape") }
                        utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default: throw FormatError("an unknown escape in a string")
                    }
                default: utf8.append(byte)
                }
            }
        }
    }
}

/// Reads the members of a JSON object by name, for formats whose members are fixed.
package struct JSONFields {
    private let members: [String: JSONValue]

    /// The members of `value`, which must be an object with every name in `required`, any of
    /// `optional`, and no other.
    package init(_ value: JSONValue, required: Set<String>, optional: Set<String> = [], what: String)
        throws(FormatError)
    {
        guard case .object(let members) = value else { throw FormatError("\(what) is not a JSON object") }
        for name in members.keys where !required.contains(name) && !optional.contains(name) {
            throw FormatError("\(what) has an unknown member")
        }
        for name in required where members[name] == nil {
            throw FormatError("\(what) lacks the member \"\(name)\"")
        }
        self.members = members
    }

    /// Whether the object has the member `name`.
    package func has(_ name: String) -> Bool { members[name] != nil }

    /// The member `name`, or nil when it is absent.
    package func value(_ name: String) -> JSONValue? { members[name] }

    /// The member `name`; an error naming it when it is absent.
    package func member(_ name: String) throws(FormatError) -> JSONValue {
        guard let value = members[name] else { throw FormatError("the member \"\(name)\" is missing") }
        return value
    }

    /// The member `name` as a string; an error when it is absent or not a string.
    package func string(_ name: String) throws(FormatError) -> String {
        guard case .string(let text) = members[name] else { throw FormatError("\"\(name)\" is not a string") }
        return text
    }

    /// The member `name` as an integer; an error when it is absent or not an integer.
    package func integer(_ name: String) throws(FormatError) -> Int64 {
        guard case .integer(let number) = members[name] else { throw FormatError("\"\(name)\" is not an integer") }
        return number
    }

    /// The member `name` as an array; an error when it is absent or not an array.
    package func array(_ name: String) throws(FormatError) -> [JSONValue] {
        guard case .array(let elements) = members[name] else { throw FormatError("\"\(name)\" is not an array") }
        return elements
    }
}

/// Writes JSON text: members in the order given, no white space, strings escaped minimally.
package enum JSONText {
    /// `text` as a JSON string literal: `"` and `\` escaped, control characters as `\u00XX`, every
    /// other character as itself (UTF-8).
    package static func string(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// An object from already written member values, in the order given.
    package static func object(_ members: [(String, String)]) -> String {
        "{" + members.map { string($0.0) + ":" + $0.1 }.joined(separator: ",") + "}"
    }

    /// An array from already written values.
    package static func array(_ values: [String]) -> String { "[" + values.joined(separator: ",") + "]" }
}
