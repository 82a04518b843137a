/// One thing validation found about a credential entry.
public struct Finding: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Severity: String, Sendable, Hashable, Codable, Comparable {
        case info, warning, error

        private var rank: Int {
            switch self {
            case .info: 0
            case .warning: 1
            case .error: 2
            }
        }
        public static func < (lhs: Severity, rhs: Severity) -> Bool { lhs.rank < rhs.rank }
    }

    /// A stable, machine-readable name such as `key-usage-missing`.
    public struct Code: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible,
        ExpressibleByStringLiteral
    {
        public init(stringLiteral value: String) { rawValue = value }
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }
        public init(from decoder: any Decoder) throws {
            rawValue = try decoder.singleValueContainer().decode(String.self)
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }
    }

    public var code: Code
    public var severity: Severity
    /// The entry the finding is about, if any.
    public var tag: CredentialTag?
    /// For escrow key-history pairs: the position in the history (0 is the newest retired pair).
    public var historyIndex: Int?
    /// Why, for a person.
    public var message: String

    public init(_ code: Code, _ severity: Severity, tag: CredentialTag?, historyIndex: Int? = nil, _ message: String) {
        self.code = code
        self.severity = severity
        self.tag = tag
        self.historyIndex = historyIndex
        self.message = message
    }

    /// `error [signing] key-usage-missing: …`
    public var description: String {
        var place = ""
        if let tag { place = historyIndex.map { "[\(tag) history \($0)] " } ?? "[\(tag)] " }
        return "\(severity) \(place)\(code): \(message)"
    }
}

/// The result of validating a credential: every finding, not just the first. Callers decide what
/// is fatal; ``passes(strict:)`` gives the toolkit's rule (errors always, warnings when strict).
public struct Verdict: Sendable, Hashable, Codable {
    public var findings: [Finding]

    public init(findings: [Finding] = []) {
        self.findings = findings
    }

    public var errors: [Finding] { findings.filter { $0.severity == .error } }
    public var warnings: [Finding] { findings.filter { $0.severity == .warning } }

    public func passes(strict: Bool = false) -> Bool {
        !findings.contains { $0.severity == .error || (strict && $0.severity == .warning) }
    }

    public func findings(for tag: CredentialTag) -> [Finding] { findings.filter { $0.tag == tag } }

    public mutating func append(_ finding: Finding) { findings.append(finding) }
}
