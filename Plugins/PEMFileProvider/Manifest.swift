import DerivedCredentials
import Foundation

/// The manifest file of the PEM-file provider (`manifest` option), JSON:
///
/// ```json
/// {
///   "version": 1,
///   "name": "Alice Example",
///   "serialNumber": "0042",
///   "entries": [
///     { "tag": "authentication", "certificate": "auth.crt", "key": "auth.key" },
///     { "tag": "encryption", "certificate": "enc.p12" },
///     { "tag": "escrow", "certificate": "old-enc-2024.pem" },
///     { "certificate": "unknown.pem" }
///   ]
/// }
/// ```
///
/// Paths are relative to the manifest's directory. An entry without `tag` is classified (as with
/// `--classify`). `name` and `serialNumber` are optional suggestions. Unknown keys are refused, so
/// a typo does not pass silently.
public struct Manifest: Sendable, Decodable {
    /// One entry of `entries`: a certificate file, an optional key file and an optional tag.
    public struct Entry: Sendable, Decodable {
        /// The tag, read case-insensitively; nil to classify the file.
        public var tag: CredentialTag?
        /// The certificate file, relative to the manifest's directory unless absolute.
        public var certificate: String
        /// A separate key file, relative to the manifest's directory unless absolute.
        public var key: String?

        enum CodingKeys: String, CodingKey, CaseIterable { case tag, certificate, key }

        /// Decodes an entry, refusing unknown keys and unknown tags with a `DecodingError`.
        public init(from decoder: any Decoder) throws {
            try Manifest.refuseUnknownKeys(decoder, known: CodingKeys.allCases.map(\.rawValue))
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if let name = try container.decodeIfPresent(String.self, forKey: .tag) {
                guard let tag = CredentialTag(wireName: name) else {
                    throw DecodingError.dataCorruptedError(
                        forKey: .tag, in: container, debugDescription: "unknown tag '\(name)'")
                }
                self.tag = tag
            }
            certificate = try container.decode(String.self, forKey: .certificate)
            key = try container.decodeIfPresent(String.self, forKey: .key)
        }
    }

    /// The manifest format version; only 1 is accepted.
    public var version: Int
    /// A suggested credential name.
    public var name: String?
    /// A suggested credential serial number.
    public var serialNumber: String?
    /// The files, in the order given.
    public var entries: [Entry]

    enum CodingKeys: String, CodingKey, CaseIterable { case version, name, serialNumber, entries }

    /// Decodes a manifest, refusing unknown keys with a `DecodingError`; ``load(_:)`` turns that into a `DCError`.
    public init(from decoder: any Decoder) throws {
        try Self.refuseUnknownKeys(decoder, known: CodingKeys.allCases.map(\.rawValue))
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(Int.self, forKey: .version)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        serialNumber = try container.decodeIfPresent(String.self, forKey: .serialNumber)
        entries = try container.decode([Entry].self, forKey: .entries)
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    static func refuseUnknownKeys(_ decoder: any Decoder, known: [String]) throws {
        let container = try decoder.container(keyedBy: AnyKey.self)
        for key in container.allKeys where !known.contains(key.stringValue) {
            throw DecodingError.dataCorruptedError(
                forKey: key, in: container, debugDescription: "unknown key '\(key.stringValue)'")
        }
    }

    /// Reads a manifest; its file sources come back with paths resolved against its directory.
    public static func load(_ path: String) throws -> (manifest: Manifest, sources: [FileSource]) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw DCError(.fileNotFound, "cannot read the manifest", subject: path)
        }
        guard data.count <= 1 << 20 else {
            throw DCError(.inputTooLarge, "the manifest is larger than 1 MiB", subject: path)
        }
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch let error as DecodingError {
            throw DCError(.malformedInput, "invalid manifest: \(Self.describe(error))", subject: path)
        } catch {
            throw DCError(.malformedInput, "invalid manifest JSON", subject: path)
        }
        guard manifest.version == 1 else {
            throw DCError(
                .unsupportedFormat, "manifest version \(manifest.version) is not supported (expected 1)", subject: path)
        }
        let base = (path as NSString).deletingLastPathComponent
        let resolve = { (file: String) in file.hasPrefix("/") ? file : (base as NSString).appendingPathComponent(file) }
        let sources = manifest.entries.map {
            FileSource(tag: $0.tag, certificate: resolve($0.certificate), key: $0.key.map(resolve))
        }
        return (manifest, sources)
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .dataCorrupted(let context), .typeMismatch(_, let context), .valueNotFound(_, let context):
            let path = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return (path.isEmpty ? "" : path + ": ") + context.debugDescription
        case .keyNotFound(let key, let context):
            let path = (context.codingPath + [key]).map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return "missing " + path.joined(separator: ".")
        @unknown default:
            return "\(error)"
        }
    }
}
