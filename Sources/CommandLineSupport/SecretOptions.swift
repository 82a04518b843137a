import ArgumentParser
import DerivedCredentials
import SystemSupport

// The one file of this module that uses the secret sources (`PassphraseSource`, `SecretInput`):
// where they live is said by the import above alone.

/// Where a token's PIN comes from, as a command takes it.
public protocol PINSourceOptions: ParsableArguments {
    /// The PIN file, if one was named (`register` keeps its path, never the PIN).
    var pinFile: String? { get }
    /// Whether the final PIN try before the token locks may be used.
    var allowFinalPinTry: Bool { get }
    /// The PIN's source (nothing asked or read until a login needs it, for a prompt).
    func pinSource() throws -> any PassphraseSource
}

/// `--pin-file`, `--pin-fd`, `--pin-env`, `--pin-prompt` and `--allow-final-pin-try`: a PIN from
/// a file, a descriptor, an environment variable the user names, or a prompt the user asked for.
/// Never a flag's value, never a URI.
public struct PINOptions: PINSourceOptions {
    /// `--pin-file FILE`: the first line of FILE.
    @Option(help: ArgumentHelp("Read the PIN from the first line of FILE.", valueName: "file"))
    public var pinFile: String?
    /// `--pin-fd N`: descriptor N.
    @Option(help: ArgumentHelp("Read the PIN from descriptor N.", valueName: "n")) public var pinFd: Int32?
    /// `--pin-env NAME`: the environment variable NAME.
    @Option(help: ArgumentHelp("Read the PIN from the environment variable NAME.", valueName: "name"))
    public var pinEnv: String?
    /// `--pin-prompt`: ask on the terminal, else through a pinentry.
    @Flag(help: "Prompt for the PIN on the terminal (else through a pinentry).") public var pinPrompt = false
    /// `--allow-final-pin-try`.
    @Flag(help: "Try the PIN even when one more wrong PIN would lock the token.") public var allowFinalPinTry = false

    /// The options as parsed.
    public init() {}

    /// At most one PIN source. A PIN in the environment is taken out of it here, while the
    /// command line is checked and before any command runs (`SecretInput.takeEnvironment(_:)`).
    public func validate() throws {
        if let pinEnv { SecretInput.takeEnvironment(pinEnv) }
        if [pinFile != nil, pinFd != nil, pinEnv != nil, pinPrompt].filter({ $0 }).count > 1 {
            throw ValidationError("give at most one of --pin-file, --pin-fd, --pin-env, --pin-prompt")
        }
    }

    /// The PIN's source. With none given, a token that needs a PIN (no PIN pad) has it asked for
    /// when the login comes: on the terminal, else through a pinentry that can show something,
    /// else the login is refused as before (`--pin-prompt` refuses at once without a terminal or
    /// a pinentry).
    public func pinSource() throws -> any PassphraseSource {
        if let pinFile { return FixedPassphrase(try SecretInput.read(file: pinFile)) }
        if let pinFd { return FixedPassphrase(try SecretInput.read(inheritedDescriptor: pinFd)) }
        if let pinEnv { return FixedPassphrase(try SecretInput.read(environment: pinEnv)) }
        return InteractivePassphrase(
            name: "PIN", title: Console.toolName, description: { "Enter the PIN of \($0.escapingControlCharacters)." },
            whenNobodyCanAnswer: pinPrompt ? .refuse : .noSecret,
            remedy: pinPrompt ? .givePassphraseWithoutTerminal : .givePIN)
    }
}

/// The PIN of a source that `dcprovision register` keeps: its handler runs later, unattended, so
/// only a PIN file (its path is kept, never the PIN) or a PIN pad (no PIN option) will do. The
/// other PIN options are not offered (hidden); given anyway, they are refused with that
/// explanation.
public struct UnattendedPINOptions: PINSourceOptions {
    private static let pinFileHelp = ArgumentHelp(
        "Read the PIN from the first line of FILE when a client asks (the path is kept, never the PIN).",
        valueName: "file")
    /// `--pin-file FILE`, read when a client asks.
    @Option(help: UnattendedPINOptions.pinFileHelp) public var pinFile: String?
    /// `--allow-final-pin-try`.
    @Flag(help: "Try the PIN even when one more wrong PIN would lock the token.") public var allowFinalPinTry = false
    @Option(help: .hidden) var pinFd: Int32?
    @Option(help: .hidden) var pinEnv: String?
    @Flag(help: .hidden) var pinPrompt = false

    /// The options as parsed.
    public init() {}

    /// Refuses the PIN sources nobody is there to answer later (a PIN given in the environment
    /// anyway is taken out of it first).
    public func validate() throws {
        if let pinEnv { SecretInput.takeEnvironment(pinEnv) }
        if pinFd != nil || pinEnv != nil || pinPrompt {
            throw ValidationError(
                "a registered source reads its PIN later, unattended, when a client asks; "
                    + "give --pin-file FILE (its path is kept, not the PIN), or none for a PIN pad")
        }
    }

    /// The PIN file's first line, or nothing (a PIN pad).
    public func pinSource() throws -> any PassphraseSource { try Self.pinSource(file: pinFile) }

    /// The first line of the PIN file a registration kept, or nothing (a PIN pad): what the
    /// handler logs in with when a client asks.
    public static func pinSource(file: String?) throws -> any PassphraseSource {
        try file.map { FixedPassphrase(try SecretInput.read(file: $0)) } ?? NoPassphrase()
    }
}

/// `--passphrase-file` and `--passphrase-fd`: a passphrase from a file or an inherited
/// descriptor, never a flag's value. `dcclient init` and `unlock` take these.
public struct PassphraseOptions: ParsableArguments {
    /// `--passphrase-file FILE`: the first line of FILE.
    @Option(help: ArgumentHelp("Read the passphrase from the first line of FILE.", valueName: "file"))
    public var passphraseFile: String?
    /// `--passphrase-fd N`: descriptor N.
    @Option(help: ArgumentHelp("Read the passphrase from file descriptor N.", valueName: "n"))
    public var passphraseFd: Int32?

    /// The options as parsed.
    public init() {}

    /// At most one passphrase source.
    public func validate() throws {
        if passphraseFile != nil && passphraseFd != nil {
            throw ValidationError("give at most one of --passphrase-file, --passphrase-fd")
        }
    }

    /// The passphrase the options name, read now, or nil when none was named.
    public func read() throws -> SecretBytes? {
        if let passphraseFile { return try SecretInput.read(file: passphraseFile) }
        if let passphraseFd { return try SecretInput.read(inheritedDescriptor: passphraseFd) }
        return nil
    }

    /// The passphrase the options name, or `error` when none was named.
    public func read(orThrow error: @autoclosure () -> DCError) throws -> SecretBytes {
        guard let secret = try read() else { throw error() }
        return secret
    }

    /// The passphrase the options name, checked with `check`; with none named, `question`'s
    /// answer (the terminal, else a pinentry) for `subject`, asked up to three times while `check`
    /// refuses it with a wrong-passphrase or usage error (shown with the next question); `error`
    /// when nobody can be asked. `ready` runs before anyone is asked: what must hold for an
    /// answer to be of use.
    public func read(
        asking question: InteractivePassphrase, for subject: String, orThrow error: @autoclosure () -> DCError,
        ready: () throws -> Void = {}, check: (SecretBytes) throws -> Void
    ) throws -> SecretBytes {
        if let secret = try read() {
            try check(secret)
            return secret
        }
        if try question.canAsk() { try ready() }
        for attempt in 1...3 {
            guard let secret = try question.passphrase(for: subject) else { throw error() }
            do {
                try check(secret)
                return secret
            } catch let refusal as DCError
                where attempt < 3 && (refusal.code == .wrongPassphrase || refusal.code == .usage)
            {
                question.retry(refusal.message.prefix(1).uppercased() + refusal.message.dropFirst() + ".")
            }
        }
        throw error()  // not reached: the third refusal is thrown by the loop
    }
}

/// ``PassphraseOptions`` and `--passphrase-prompt`: for the commands that read encrypted input,
/// which ask on the terminal only when the input needs a passphrase and the user asked for that.
public struct PromptingPassphraseOptions: ParsableArguments {
    /// `--passphrase-file` and `--passphrase-fd`.
    @OptionGroup public var given: PassphraseOptions
    /// `--passphrase-prompt`.
    @Flag(help: "Prompt for the passphrase on the terminal or a pinentry (only when encrypted input needs one).")
    public var passphrasePrompt = false

    /// The options as parsed.
    public init() {}

    /// At most one passphrase source.
    public func validate() throws {
        if passphrasePrompt && (given.passphraseFile != nil || given.passphraseFd != nil) {
            throw ValidationError("give at most one of --passphrase-file, --passphrase-fd, --passphrase-prompt")
        }
    }

    /// The passphrase's source: the one given, a prompt, or none.
    public func source() throws -> any PassphraseSource {
        if let secret = try given.read() { return FixedPassphrase(secret) }
        guard passphrasePrompt else { return NoPassphrase() }
        return InteractivePassphrase(
            title: Console.toolName, description: { "Enter the passphrase of \($0.escapingControlCharacters)." },
            whenNobodyCanAnswer: .refuse)
    }
}

/// A PIV card's other secrets, for `dcprovision card`: the new PIN, the PUK and a new PUK, each
/// from a file's first line, an inherited descriptor, or a prompt the user asked for (a new one
/// asked twice). Never a flag's value.
public struct CardSecretOptions: ParsableArguments {
    @Option(name: .customLong("new-pin-file"), help: ArgumentHelp("Read the new PIN from FILE.", valueName: "file"))
    var newPINFile: String?
    @Option(name: .customLong("new-pin-fd"), help: ArgumentHelp("Read the new PIN from descriptor N.", valueName: "n"))
    var newPINFd: Int32?
    @Flag(name: .customLong("new-pin-prompt"), help: "Prompt for the new PIN (twice) on the terminal, else a pinentry.")
    var newPINPrompt = false
    @Option(name: .customLong("puk-file"), help: ArgumentHelp("Read the PUK from FILE.", valueName: "file"))
    var pukFile: String?
    @Option(name: .customLong("puk-fd"), help: ArgumentHelp("Read the PUK from descriptor N.", valueName: "n"))
    var pukFd: Int32?
    @Flag(name: .customLong("puk-prompt"), help: "Prompt for the PUK on the terminal, else a pinentry.") var pukPrompt =
        false
    @Option(name: .customLong("new-puk-file"), help: ArgumentHelp("Read the new PUK from FILE.", valueName: "file"))
    var newPUKFile: String?
    @Option(name: .customLong("new-puk-fd"), help: ArgumentHelp("Read the new PUK from descriptor N.", valueName: "n"))
    var newPUKFd: Int32?
    @Flag(name: .customLong("new-puk-prompt"), help: "Prompt for the new PUK (twice) on the terminal, else a pinentry.")
    var newPUKPrompt = false

    /// The options as parsed.
    public init() {}

    /// At most one source for each secret.
    public func validate() throws {
        for (name, given) in [
            ("new PIN", [newPINFile != nil, newPINFd != nil, newPINPrompt]),
            ("PUK", [pukFile != nil, pukFd != nil, pukPrompt]),
            ("new PUK", [newPUKFile != nil, newPUKFd != nil, newPUKPrompt]),
        ] where given.filter({ $0 }).count > 1 {
            throw ValidationError("give the \(name) once (a file, a descriptor or a prompt)")
        }
    }

    /// The new PIN, read now; `subject` names the card in a prompt.
    public func newPIN(for subject: String) throws -> SecretBytes {
        try Self.read("new PIN", "--new-pin-file", newPINFile, newPINFd, prompt: newPINPrompt, twice: true, subject)
    }

    /// The PUK, read now.
    public func puk(for subject: String) throws -> SecretBytes {
        try Self.read("PUK", "--puk-file", pukFile, pukFd, prompt: pukPrompt, twice: false, subject)
    }

    /// The new PUK, read now.
    public func newPUK(for subject: String) throws -> SecretBytes {
        try Self.read("new PUK", "--new-puk-file", newPUKFile, newPUKFd, prompt: newPUKPrompt, twice: true, subject)
    }

    private static func read(
        _ name: String, _ flag: String, _ file: String?, _ fd: Int32?, prompt: Bool, twice: Bool, _ subject: String
    ) throws -> SecretBytes {
        if let file { return try SecretInput.read(file: file) }
        if let fd { return try SecretInput.read(inheritedDescriptor: fd) }
        guard prompt else {
            let stem = flag.dropLast("file".count)
            throw DCError(
                .passphraseRequired, "the \(name) is needed and none was given", subject: subject,
                hint: "give \(flag) FILE, \(stem)fd N or \(stem)prompt")
        }
        let question = InteractivePassphrase(
            name: name, title: Console.toolName,
            description: { "Enter the \(name) of the card in \($0.escapingControlCharacters)." }, confirming: twice,
            whenNobodyCanAnswer: .refuse)
        guard let secret = try question.passphrase(for: subject) else {
            throw DCError(.passphraseRequired, "no \(name) was entered", subject: subject)
        }
        return secret
    }
}
