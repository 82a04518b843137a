import DerivedCredentials
import FoundationEssentials

/// What `inspect` shows: each entry's certificate details and findings, and the verdict.
/// Encodes to the documented `inspect --json` format.
public struct InspectionReport: Sendable, Codable {
    /// One certificate and key pair: an entry's current pair or one of its retired escrow pairs.
    public struct Row: Sendable, Codable {
        /// The entry this pair belongs to.
        public var tag: CredentialTag
        /// Position in the escrow key history (0 = newest retired pair); nil for the current pair.
        public var historyIndex: Int?
        /// What the certificate says.
        public var certificate: CertificateDetails
        /// The PKCS#12 friendly name of the current pair, as found.
        public var friendlyName: String?
        /// The key's algorithm and size (`RSA 2048`, `EC P-256`) or `unreadable`; never the key itself.
        public var privateKey: String
        /// The findings about this pair.
        public var findings: [Finding]
    }

    /// One row per pair: entries in the order given, each current pair before its key history.
    public var rows: [Row]
    /// Findings about the credential as a whole (no tag).
    public var findings: [Finding]
    /// The number of error findings, rows and credential together.
    public var errorCount: Int
    /// The number of warning findings, rows and credential together.
    public var warningCount: Int
    /// Whether warnings count as failures, as asked for with `--strict`.
    public var strict: Bool
    /// The verdict's `Verdict/passes(strict:)` under ``strict``.
    public var valid: Bool

    /// A report of `entries` with the findings of `verdict` sorted into rows. Throws if a certificate
    /// cannot be read (see ``CertificateDetails/init(_:)``).
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

    /// The `inspect --json` text: pretty-printed, keys sorted, dates in ISO 8601.
    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}
