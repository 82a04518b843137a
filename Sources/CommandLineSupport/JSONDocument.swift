import Foundation

extension Toolkit {
    /// The version of the JSON documents the tools print (docs/JSON.md). It rises when a field
    /// changes meaning or disappears; new fields may appear within a version.
    public static let jsonSchemaVersion = 1
}

/// Prints `value` as the tools' JSON document of `kind` (docs/JSON.md) on standard output.
public func printJSON<T: Encodable>(_ kind: String, _ value: T) throws {
    StandardStream.output.write(try JSONDocument(kind, value).rendered() + "\n")
}

/// One JSON document as `--json` prints it: `{"version": 1, "<kind>": <payload>}`, the payload under
/// a key that names what it is (`tokens`, `report`, `credential`, …). Machine output goes to
/// standard output alone; messages go to standard error.
public struct JSONDocument<Payload: Encodable>: Encodable {
    /// The key the payload goes under.
    public let kind: String
    /// The data.
    public let payload: Payload

    /// A document of `kind` holding `payload`.
    public init(_ kind: String, _ payload: Payload) {
        self.kind = kind
        self.payload = payload
    }

    /// Writes `version` and the payload under its kind.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(Toolkit.jsonSchemaVersion, forKey: Key("version"))
        try container.encode(payload, forKey: Key(kind))
    }

    /// The document as the tools print it: indented, keys sorted, slashes unescaped, dates in
    /// ISO 8601 UTC, and no control character raw. The encoder escapes U+0000–U+001F; DEL, the C1
    /// controls (U+0080–U+009F, CSI among them) and the bidirectional overrides it leaves raw are
    /// written as `\uXXXX` here, which is the same JSON string.
    public func rendered() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        var out = ""
        for scalar in String(decoding: try encoder.encode(self), as: UTF8.self).unicodeScalars {
            switch scalar.value {
            case 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// A key named at run time.
    private struct Key: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
