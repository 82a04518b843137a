import ArgumentParser
import DerivedCredentials

/// The protocol's identifiers as command-line values: checked by their one rule as the command
/// line is parsed, so that a command's `run()` holds them typed. A value that breaks the rule is a
/// usage error (exit 64) naming the option.
extension URLScheme: ExpressibleByArgument {
    /// The scheme `argument` spells, lowercased; nil when it is not a URL scheme.
    public init?(argument: String) { self.init(validating: argument) }
}

extension ClientID: ExpressibleByArgument {
    /// The client id `argument` spells; nil when it breaks the rule.
    public init?(argument: String) { self.init(validating: argument) }
}

extension RequestID: ExpressibleByArgument {
    /// The request id `argument` spells; nil when it is not 32 lowercase hex digits.
    public init?(argument: String) { self.init(validating: argument) }
}
