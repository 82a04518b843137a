import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import Foundation
import PKCS11Provider
import SystemSupport

struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List PKCS#11 tokens (smart cards) through p11-kit, with their PIN state and RFC 7512 URIs.")
    @Option(
        help: ArgumentHelp(
            "A module by p11-kit name or absolute path (repeatable; default: all registered).", valueName: "module"))
    var module: [String] = []
    @Flag(help: "Print JSON.") var json = false

    @OptionGroup var output: OutputOptions

    func run() async throws {
        output.apply()
        try await runReportingErrors {
            let tokens = try PKCS11Discovery.tokens(modules: module.isEmpty ? nil : module)
            if tokens.isEmpty {
                let searched = module.isEmpty ? "the modules registered with p11-kit" : module.joined(separator: ", ")
                printError(
                    "tokens: no token in \(searched.escapingControlCharacters); insert the card (is pcscd running?), "
                        + "or name its module with --module NAME|PATH (p11-kit list-modules shows the registered ones)")
            }
            if json { return try printJSON("tokens", tokens) }
            if tokens.isEmpty { print("no tokens") }
            for token in tokens {
                var pin = [
                    token.initialized ? nil : "not initialized", token.loginRequired ? "login required" : "no login",
                    token.protectedAuthenticationPath ? "PIN pad" : nil,
                ]
                pin += [
                    token.userPINCountLow ? "PIN COUNT LOW" : nil, token.userPINFinalTry ? "PIN FINAL TRY" : nil,
                    token.userPINLocked ? "PIN LOCKED" : nil,
                ]
                print(
                    "\(token.label.escapingControlCharacters)  (\(token.manufacturer.escapingControlCharacters) \(token.model.escapingControlCharacters), serial \(token.serialNumber.escapingControlCharacters))"
                )
                print(
                    "    module \(token.module.escapingControlCharacters), slot \(token.slot); \(pin.compactMap { $0 }.joined(separator: ", "))"
                )
                print("    \(token.uri.escapingControlCharacters)")
            }
        }
    }
}

/// How a command takes a token's PIN.
protocol PINInput: ParsableArguments {
    /// The PIN file, if one was named (`register` keeps its path, never the PIN).
    var pinFile: String? { get }
    /// Whether the final PIN try before the token locks may be used.
    var allowFinalPinTry: Bool { get }
    /// Where the PIN comes from and what to do about the token's PIN state.
    func policy() throws -> LoginPolicy
}

/// Where a PIN comes from: a file, a descriptor, an environment variable the user names, or a
/// prompt the user asked for. Never a flag's value, never a URI.
struct PINOptions: PINInput {
    @Option(help: ArgumentHelp("Read the PIN from the first line of FILE.", valueName: "file")) var pinFile: String?
    @Option(help: ArgumentHelp("Read the PIN from descriptor N.", valueName: "n")) var pinFd: Int32?
    @Option(help: ArgumentHelp("Read the PIN from the environment variable NAME.", valueName: "name")) var pinEnv:
        String?
    @Flag(help: "Prompt for the PIN on the terminal.") var pinPrompt = false
    @Flag(help: "Try the PIN even when one more wrong PIN would lock the token.") var allowFinalPinTry = false

    func validate() throws {
        if [pinFile != nil, pinFd != nil, pinEnv != nil, pinPrompt].filter({ $0 }).count > 1 {
            throw ValidationError("give at most one of --pin-file, --pin-fd, --pin-env, --pin-prompt")
        }
    }

    func policy() throws -> LoginPolicy {
        let source: any PassphraseSource
        if let pinFile {
            source = FixedPassphrase(try SecretInput.read(file: pinFile))
        } else if let pinFd {
            source = FixedPassphrase(try SecretInput.read(inheritedDescriptor: pinFd))
        } else if let pinEnv {
            source = FixedPassphrase(try SecretInput.read(environment: pinEnv))
        } else if pinPrompt {
            source = TerminalPassphrase(prompt: "PIN")
        } else {
            source = NoPassphrase()
        }
        return LoginPolicy(pin: source, allowFinalPINTry: allowFinalPinTry) { printError("warning: \($0)") }
    }
}

struct Objects: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the objects a PKCS#11 URI matches (public objects: certificates and public keys).")
    @Argument(help: "An RFC 7512 URI, e.g. 'pkcs11:token=Card' or 'pkcs11:token=Card;id=%01'.") var uri: String
    @Option(help: ArgumentHelp("A module by p11-kit name or absolute path (repeatable).", valueName: "module"))
    var module: [String] = []
    @Flag(help: "Print JSON.") var json = false
    @Flag(help: "Log in (PIN needed) to list private objects too.") var login = false
    @OptionGroup(title: "PIN") var pin: PINOptions

    @OptionGroup var output: OutputOptions

    func run() async throws {
        output.apply()
        try await runReportingErrors {
            let objects = try PKCS11Discovery.objects(
                matching: uri, modules: module.isEmpty ? nil : module, login: login ? try pin.policy() : nil)
            if json { return try printJSON("objects", objects) }
            if objects.isEmpty {
                throw DCError(.noSuchObject, "no object matches the URI", subject: uri.escapingControlCharacters)
            }
            for object in objects {
                let key = [object.keyType, object.keyBits.map(String.init)].compactMap { $0 }.joined(separator: " ")
                let flags = [
                    object.sensitive.map { $0 ? "sensitive" : "not sensitive" },
                    object.extractable.map { $0 ? "extractable" : "not extractable" },
                ]
                .compactMap { $0 }.joined(separator: ", ")
                print(
                    "\(object.kind)  id \(object.id)  \"\(object.label.escapingControlCharacters)\"  \(key)\(flags.isEmpty ? "" : "  (\(flags))")"
                )
                if let subject = object.subject { print("    subject: \(subject.escapingControlCharacters)") }
                print("    \(object.uri.escapingControlCharacters)")
            }
        }
    }
}

/// The PIN of a source that `register` keeps: its handler runs later, unattended, so only a PIN
/// file (its path is kept, never the PIN) or a PIN pad (no PIN option) will do. The other PIN
/// options are not offered; given anyway, they are refused with that explanation.
struct UnattendedPINOptions: PINInput {
    @Option(
        help: ArgumentHelp(
            "Read the PIN from the first line of FILE when a client asks (the path is kept, never the PIN).",
            valueName: "file"))
    var pinFile: String?
    @Flag(help: "Try the PIN even when one more wrong PIN would lock the token.") var allowFinalPinTry = false
    @Option(help: .hidden) var pinFd: Int32?
    @Option(help: .hidden) var pinEnv: String?
    @Flag(help: .hidden) var pinPrompt = false

    func validate() throws {
        if pinFd != nil || pinEnv != nil || pinPrompt {
            throw ValidationError(
                "a registered source reads its PIN later, unattended, when a client asks; "
                    + "give --pin-file FILE (its path is kept, not the PIN), or none for a PIN pad")
        }
    }

    func policy() throws -> LoginPolicy {
        let source: any PassphraseSource =
            try pinFile.map { FixedPassphrase(try SecretInput.read(file: $0)) }
            ?? NoPassphrase()
        return LoginPolicy(pin: source, allowFinalPINTry: allowFinalPinTry) { printError("warning: \($0)") }
    }
}
