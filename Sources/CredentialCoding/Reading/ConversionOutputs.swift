import DerivedCredentials
import Foundation

/// How `convert` names what it writes: for an input `alice.p12`, the leaf certificate is
/// `alice.cert.der`, further certificates `alice.2.cert.der`, `alice.3.cert.der`, … in the order
/// found, and the key `alice.key.der` (mode 0600).
public enum ConversionOutputs {
    static let knownExtensions: Set<String> = ["pem", "der", "crt", "cer", "cert", "key", "p12", "pfx", "p8", "pk8"]

    /// The file name without directories and without a known certificate/key extension.
    public static func stem(of path: String) -> String {
        var name = (path as NSString).lastPathComponent
        let ext = (name as NSString).pathExtension.lowercased()
        if knownExtensions.contains(ext) { name = (name as NSString).deletingPathExtension }
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
