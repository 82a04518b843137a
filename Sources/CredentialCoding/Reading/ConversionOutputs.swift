import DerivedCredentials
import FoundationEssentials
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

    /// Adds the files for one input's material to `set`.
    public static func add(_ material: KeyMaterial, stem: String, to set: inout AtomicFileSet) throws {
        for (index, certificate) in material.certificates.enumerated() {
            let name = index == 0 ? "\(stem).cert.der" : "\(stem).\(index + 1).cert.der"
            try set.add(name, .bytes(certificate.derBytes), mode: 0o644)
        }
        if let key = material.privateKey {
            try set.add("\(stem).key.der", .secret(key.withPKCS8DER { SecretBytes($0) }), mode: 0o600)
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
