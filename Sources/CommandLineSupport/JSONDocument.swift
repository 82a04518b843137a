import Foundation

extension Toolkit {
    /// The version of the JSON documents the tools print (docs/JSON.md). It rises when a field
    /// changes meaning or disappears; new fields may appear within a version.
    public static let jsonSchemaVersion = 1
}

/// Prints `value` as the tools' JSON document of `kind` (docs/JSON.md) on standard output.
public func printJSON<T: Encodable>(_ kind: String, _ value: T) throws {
    print(try JSONDocument(kind, value).rendered())
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
    /// ISO 8601 UTC.
    public func rendered() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(self), as: UTF8.self)
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
