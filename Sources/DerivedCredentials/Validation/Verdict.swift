/// One thing validation found about a credential entry.
public struct Finding: Sendable, Hashable, Codable, CustomStringConvertible {
    /// How much a finding matters; ordered info < warning < error.
    public enum Severity: String, Sendable, Hashable, Codable, Comparable {
        /// From least to most severe: `info` is a note, `warning` fails only strict validation, `error` always fails.
        case info, warning, error

        private var rank: Int {
            switch self {
            case .info: 0
            case .warning: 1
            case .error: 2
            }
        }
        /// Orders by severity: info < warning < error.
        public static func < (lhs: Severity, rhs: Severity) -> Bool { lhs.rank < rhs.rank }
    }

    /// A stable, machine-readable name such as `key-usage-missing`.
    public struct Code: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible,
        ExpressibleByStringLiteral
    {
        /// A code from a string literal, as validators write them.
        public init(stringLiteral value: String) { rawValue = value }
        /// The code's name, such as `key-usage-missing`; stable across releases.
        public let rawValue: String
        /// A code named `rawValue`; every string is accepted.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// A code named `rawValue`.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// The code's name.
        public var description: String { rawValue }
        /// Decodes a bare JSON string, not an object.
        public init(from decoder: any Decoder) throws {
            rawValue = try decoder.singleValueContainer().decode(String.self)
        }
        /// Encodes as a bare JSON string, not an object.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }
    }

    /// What was found, as a stable name.
    public var code: Code
    /// How much it matters; see ``Verdict/passes(strict:)``.
    public var severity: Severity
    /// The entry the finding is about, if any.
    public var tag: CredentialTag?
    /// For escrow key-history pairs: the position in the history (0 is the newest retired pair).
    public var historyIndex: Int?
    /// Why, for a person.
    public var message: String

    /// A finding of `code` at `severity` about `tag` (nil for the credential as a whole), with `message` for a person.
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
    /// Every finding, in the order the validator made them.
    public var findings: [Finding]

    /// A verdict holding `findings`; empty means nothing was found.
    public init(findings: [Finding] = []) {
        self.findings = findings
    }

    /// The findings of severity error, in order.
    public var errors: [Finding] { findings.filter { $0.severity == .error } }
    /// The findings of severity warning, in order.
    public var warnings: [Finding] { findings.filter { $0.severity == .warning } }

    /// True when there is no error, and with `strict` no warning either; info never fails.
    public func passes(strict: Bool = false) -> Bool {
        !findings.contains { $0.severity == .error || (strict && $0.severity == .warning) }
    }

    /// The findings about the entry `tag`, in order; its key-history findings included.
    public func findings(for tag: CredentialTag) -> [Finding] { findings.filter { $0.tag == tag } }

    /// Adds `finding` at the end.
    public mutating func append(_ finding: Finding) { findings.append(finding) }
}
