import Foundation

/// GnuTLS's `p11tool` (Debian package gnutls-bin) on the SoftHSM fixture: a second, independent
/// PKCS#11 client, whose URI handling is p11-kit's own (`p11_kit_uri_parse`), to hold our token
/// and object listings against.
extension SoftHSM {
    /// One object or token as p11tool lists it: the URL and the indented `Key: value` lines.
    public struct P11ToolEntry: Sendable, Equatable {
        /// The entry's RFC 7512 URL, as p11tool prints it.
        public var url: String
        /// The indented `Key: value` lines under it (`Label`, `Serial`, `Type`, …).
        public var fields: [String: String]
    }

    /// Runs `p11tool --provider <SoftHSM module>` with the fixture's `SOFTHSM2_CONF`, in `sandbox`.
    public static func p11tool(_ arguments: [String], in sandbox: Sandbox) throws -> ProcessResult {
        _ = SoftHSM.shared
        return try sandbox.run(
            "p11tool", ["--provider", module] + arguments,
            environment: ["SOFTHSM2_CONF": SoftHSM.shared.configuration], timeout: 60)
    }

    /// Parses p11tool's `--list-tokens` / `--list-all*` output: blocks that start `Token N:` or
    /// `Object N:`, each with a `URL:` line and other `Key: value` lines.
    public static func parseP11ToolListing(_ text: String) -> [P11ToolEntry] {
        var entries: [P11ToolEntry] = []
        for line in text.split(separator: "\n") {
            if !line.hasPrefix("\t") && (line.hasPrefix("Object ") || line.hasPrefix("Token ")) {
                entries.append(P11ToolEntry(url: "", fields: [:]))
                continue
            }
            guard !entries.isEmpty, let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if key == "URL" {
                entries[entries.count - 1].url = value
            } else {
                entries[entries.count - 1].fields[key] = value
            }
        }
        return entries
    }

    /// A PKCS#11 URI's path attributes as a set (`token=PIV%20Card`, `id=%01`, …), so that two URIs
    /// naming the same thing compare equal whatever order their attributes come in.
    public static func uriAttributes(_ uri: String) -> Set<String> {
        guard uri.hasPrefix("pkcs11:") else { return [] }
        let path = uri.dropFirst("pkcs11:".count).prefix { $0 != "?" }
        return Set(path.split(separator: ";").map(String.init))
    }
}
