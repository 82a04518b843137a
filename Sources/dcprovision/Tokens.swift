import ArgumentParser
import DerivedCredentials
import Foundation
import PKCS11Provider

/// Encodes any value as the tools' JSON (sorted keys, no escaped slashes).
func printJSON<T: Encodable>(_ value: T) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

struct Tokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List PKCS#11 tokens (smart cards) through p11-kit, with their PIN state and RFC 7512 URIs.")
    @Option(
        help: ArgumentHelp(
            "A module by p11-kit name or absolute path (repeatable; default: all registered).", valueName: "module"))
    var module: [String] = []
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        try await runReportingErrors {
            let tokens = try PKCS11Discovery.tokens(modules: module.isEmpty ? nil : module)
            if json { return try printJSON(tokens) }
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

/// Where a PIN comes from: a file, a descriptor, an environment variable the user names, or a
/// prompt the user asked for. Never a flag's value, never a URI.
struct PINOptions: ParsableArguments {
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
            source = FixedPassphrase(try SecretInput.read(descriptor: pinFd, subject: "fd \(pinFd)"))
        } else if let pinEnv {
            source = EnvironmentSecret(name: pinEnv)
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

    func run() async throws {
        try await runReportingErrors {
            let objects = try PKCS11Discovery.objects(
                matching: uri, modules: module.isEmpty ? nil : module, login: login ? try pin.policy() : nil)
            if json { return try printJSON(objects) }
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
