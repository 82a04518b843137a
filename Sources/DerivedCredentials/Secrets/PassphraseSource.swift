import FoundationEssentials

/// Where a passphrase comes from. The reader asks only when it meets encrypted input, and at most
/// once per input; a source that has none returns nil and the input is refused at once. No source
/// ever prompts unless it was built to (`InteractivePassphrase`).
public protocol PassphraseSource: Sendable {
    /// The secret for `subject` (a file name or token label, used in prompts and errors), or nil if
    /// this source has none. Throws when the source exists but cannot deliver, such as an unset variable.
    func passphrase(for subject: String) throws -> SecretBytes?
    /// The secret for `subject`, with `detail` for a person asked for it (a card's "PIN: 3 tries
    /// left"); a source that asks nobody ignores it (the default).
    func passphrase(for subject: String, detail: String) throws -> SecretBytes?
}

extension PassphraseSource {
    /// ``passphrase(for:)``: `detail` only matters to a source that asks someone.
    public func passphrase(for subject: String, detail: String) throws -> SecretBytes? {
        try passphrase(for: subject)
    }
}

/// No passphrase: encrypted input is refused with ``DCError/Code/passphraseRequired``.
public struct NoPassphrase: PassphraseSource {
    /// The only value: nothing to configure.
    public init() {}
    /// Always nil, so the reader refuses encrypted input with ``DCError/Code/passphraseRequired``.
    public func passphrase(for subject: String) throws -> SecretBytes? { nil }
}

/// A passphrase the caller already holds.
public struct FixedPassphrase: PassphraseSource {
    private let secret: SecretBytes
    /// Holds `secret` and hands it out for every subject.
    public init(_ secret: SecretBytes) { self.secret = secret }
    /// The held secret, whatever `subject` is.
    public func passphrase(for subject: String) throws -> SecretBytes? { secret }
}

extension PassphraseSource where Self == NoPassphrase {
    /// No passphrase: `passphrase: .none` reads as the refusal it is.
    public static var none: NoPassphrase { NoPassphrase() }
}
