import DerivedCredentials
import Foundation

/// What `inspect` shows: each entry's certificate details and findings, and the verdict.
/// Encodes to the documented `inspect --json` format.
public struct InspectionReport: Sendable, Codable {
    public struct Row: Sendable, Codable {
        public var tag: CredentialTag
        /// Position in the escrow key history (0 = newest retired pair); nil for the current pair.
        public var historyIndex: Int?
        public var certificate: CertificateDetails
        /// The PKCS#12 friendly name of the current pair, as found.
        public var friendlyName: String?
        public var privateKey: String
        public var findings: [Finding]
    }

    public var rows: [Row]
    /// Findings about the credential as a whole (no tag).
    public var findings: [Finding]
    public var errorCount: Int
    public var warningCount: Int
    public var strict: Bool
    public var valid: Bool

    public init(
        entries: [CredentialEntry], verdict: Verdict, strict: Bool, friendlyNames: [CredentialTag: String] = [:]
    ) throws {
        var rows: [Row] = []
        for entry in entries {
            let pairs =
                [(nil, entry.certifiedKey)] + entry.keyHistory.enumerated().map { (Optional($0.offset), $0.element) }
            for (index, pair) in pairs {
                rows.append(
                    Row(
                        tag: entry.tag, historyIndex: index, certificate: try CertificateDetails(pair.certificate),
                        friendlyName: index == nil ? friendlyNames[entry.tag] : nil,
                        privateKey: PrivateKeyDetails.describe(pair.privateKey),
                        findings: verdict.findings.filter { $0.tag == entry.tag && $0.historyIndex == index }))
            }
        }
        self.rows = rows
        self.findings = verdict.findings.filter { $0.tag == nil }
        self.errorCount = verdict.errors.count
        self.warningCount = verdict.warnings.count
        self.strict = strict
        self.valid = verdict.passes(strict: strict)
    }

    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}
