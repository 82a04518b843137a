import DerivedCredentials
import FoundationEssentials
import Glibc
import SystemSupport

/// How `convert` names what it writes: for an input `alice.p12`, the leaf certificate is
/// `alice.cert.der`, further certificates `alice.2.cert.der`, `alice.3.cert.der`, … in the order
/// found, and the key `alice.key.der` (mode 0600).
public enum ConversionOutputs {
    static let knownExtensions: Set<String> = ["pem", "der", "crt", "cer", "cert", "key", "p12", "pfx", "p8", "pk8"]

    /// The file name without directories and without a known certificate/key extension.
    public static func stem(of path: String) -> String {
        var name = PathText.lastComponent(of: path)
        let ext = PathText.pathExtension(of: name).lowercased()
        if knownExtensions.contains(ext) { name = PathText.deletingExtension(of: name) }
        return name
    }

    /// One object `convert` writes: a certificate or a key, under the name it gets.
    public struct Output: Sendable {
        /// The file name.
        public var name: String
        /// What the file holds.
        public var contents: AtomicFileSet.Contents
        /// Its mode: 0644 for a certificate, 0600 for a key.
        public var mode: mode_t
        /// Whether it is a private key.
        public var isPrivateKey: Bool
    }

    /// The objects of one input's material: its certificates in the order found, then its key,
    /// each in `format` and named by `template`.
    public static func outputs(
        _ material: KeyMaterial, stem: String, format: Format = .der, template: NameTemplate = .default
    ) -> [Output] {
        var outputs = material.certificates.enumerated().map { index, certificate in
            Output(
                name: template.name(stem: stem, number: index + 1, kind: .certificate, format: format),
                contents: .bytes(format == .der ? certificate.derBytes : PEM.certificate(certificate)), mode: 0o644,
                isPrivateKey: false)
        }
        if let key = material.privateKey {
            outputs.append(
                Output(
                    name: template.name(stem: stem, number: 1, kind: .key, format: format),
                    contents: .secret(format == .der ? key.withPKCS8DER { SecretBytes($0) } : PEM.privateKey(key)),
                    mode: 0o600, isPrivateKey: true))
        }
        return outputs
    }

    /// Adds the files for one input's material to `set`.
    public static func add(
        _ material: KeyMaterial, stem: String, format: Format = .der, template: NameTemplate = .default,
        to set: inout AtomicFileSet
    ) throws {
        for output in outputs(material, stem: stem, format: format, template: template) {
            try set.add(output.name, output.contents, mode: output.mode)
        }
    }
}

extension ConversionOutputs {
    /// How `convert` names each object it writes from an input file: a pattern of fixed text and
    /// the placeholders `{stem}` (the input's name without its extension), `{n}` (the
    /// certificate's place in the input, from 1; 1 for the key), `{index}` (empty for the first
    /// certificate and the key, `.2`, `.3`, … for further certificates), `{kind}` (`cert` or
    /// `key`) and `{format}` (`der` or `pem`). The default, `{stem}{index}.{kind}.{format}`, gives
    /// `alice.cert.der`, `alice.2.cert.der` and `alice.key.der`.
    public struct NameTemplate: Sendable, Hashable, CustomStringConvertible {
        /// The pattern as given.
        public let pattern: String

        /// The names `convert` has always written.
        public static let `default` = NameTemplate(checked: "{stem}{index}.{kind}.{format}")

        /// The placeholders a pattern may use.
        public static let placeholders = ["stem", "n", "index", "kind", "format"]

        /// What an object is, as `{kind}` spells it.
        public enum Kind: String, Sendable {
            /// A certificate: `cert`.
            case certificate = "cert"
            /// A private key: `key`.
            case key
        }

        /// A template of `pattern`. Throws `DCError/Code/usage` when a brace does not open a known
        /// placeholder, when the pattern has a `/`, or when it has no `{stem}`, `{n}` or `{index}`
        /// (every certificate of an input would get one name).
        public init(_ pattern: String) throws {
            var rest = Substring(pattern)
            var used: Set<String> = []
            while let open = rest.firstIndex(where: { $0 == "{" || $0 == "}" }) {
                guard rest[open] == "{", let close = rest[open...].firstIndex(of: "}") else {
                    throw DCError(.usage, "a name template's braces must enclose a placeholder", subject: pattern)
                }
                let name = String(rest[rest.index(after: open)..<close])
                guard Self.placeholders.contains(name) else {
                    throw DCError(
                        .usage,
                        "unknown placeholder {\(name)} in a name template (known: "
                            + Self.placeholders.map { "{\($0)}" }.joined(separator: ", ") + ")",
                        subject: pattern)
                }
                used.insert(name)
                rest = rest[rest.index(after: close)...]
            }
            guard !pattern.contains("/") else {
                throw DCError(.usage, "a name template names files in the output directory: no /", subject: pattern)
            }
            guard used.contains("n") || used.contains("index") else {
                throw DCError(
                    .usage, "a name template needs {n} or {index}: an input's certificates would share one name",
                    subject: pattern)
            }
            guard used.contains("kind") else {
                throw DCError(
                    .usage, "a name template needs {kind}: a certificate and its key would share one name",
                    subject: pattern)
            }
            self.pattern = pattern
        }

        private init(checked pattern: String) { self.pattern = pattern }

        /// The pattern.
        public var description: String { pattern }

        /// The name of the `number`th object of `kind` of the input named `stem`.
        public func name(stem: String, number: Int, kind: Kind, format: Format) -> String {
            let values = [
                "stem": stem, "n": String(number), "index": number == 1 ? "" : ".\(number)",
                "kind": kind.rawValue, "format": format.rawValue,
            ]
            var out = ""
            var rest = Substring(pattern)
            while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
                out += rest[..<open]
                out += values[String(rest[rest.index(after: open)..<close])] ?? ""
                rest = rest[rest.index(after: close)...]
            }
            return out + rest
        }
    }
}

extension ConversionOutputs {
    /// How converted files are written.
    public enum Format: String, Sendable, CaseIterable {
        /// `<tag>.cert.der` + `<tag>.key.der` (PKCS#8, 0600).
        case der
        /// `<tag>.pem`: the certificate and its PKCS#8 key in one file (0600).
        case pem
    }

    /// Adds a provided credential's files: one stem per entry (`authentication`, …, and
    /// `escrow-history-1`, … for retired escrow pairs, newest first), the chain as `chain.pem`,
    /// and `manifest.json` naming them all, so the folder can be read back with `--manifest`.
    public static func add(_ provided: ProvidedCredential, format: Format, to set: inout AtomicFileSet) throws {
        var manifestEntries: [[String: String]] = []
        for entry in provided.entries {
            let pairs =
                [(entry.tag.rawValue, entry.certifiedKey)]
                + entry.keyHistory.enumerated().map { ("\(entry.tag.rawValue)-history-\($0.offset + 1)", $0.element) }
            for (stem, pair) in pairs {
                switch format {
                case .der:
                    try set.add("\(stem).cert.der", .bytes(pair.certificate.derBytes), mode: 0o644)
                    try set.add(
                        "\(stem).key.der", .secret(pair.privateKey.withPKCS8DER { SecretBytes($0) }), mode: 0o600)
                    manifestEntries.append([
                        "tag": entry.tag.rawValue, "certificate": "\(stem).cert.der", "key": "\(stem).key.der",
                    ])
                case .pem:
                    var combined = PEM.certificate(pair.certificate)
                    PEM.privateKey(pair.privateKey).withUnsafeBytes { combined += $0 }
                    try set.add("\(stem).pem", .secret(SecretBytes(consuming: &combined)), mode: 0o600)
                    manifestEntries.append(["tag": entry.tag.rawValue, "certificate": "\(stem).pem"])
                }
            }
        }
        if !provided.chain.isEmpty {
            try set.add("chain.pem", .bytes(provided.chain.flatMap(PEM.certificate)), mode: 0o644)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let json = try encoder.encode(
            Manifest(
                entries: manifestEntries, name: provided.suggestedName, serialNumber: provided.suggestedSerialNumber))
        try set.add("manifest.json", .bytes(Array(json) + [0x0A]), mode: 0o644)
    }

    /// `manifest.json`: the names that are absent are left out.
    private struct Manifest: Encodable {
        var version = 1
        var entries: [[String: String]]
        var name: String?
        var serialNumber: String?
    }
}
