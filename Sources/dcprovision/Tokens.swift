import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import Foundation
import PKCS11Provider

struct Tokens: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokens",
        abstract: "List PKCS#11 tokens (smart cards) through p11-kit, with their PIN state and RFC 7512 URIs.")
    @Option(
        help: ArgumentHelp(
            "A module by p11-kit name or absolute path (repeatable; default: all registered).", valueName: "module"))
    var module: [String] = []
    @OptionGroup var format: JSONOutputOptions

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let modules = module.isEmpty ? nil : module
        // A reader through pcscd can take seconds per card: a person at a terminal sees where.
        let progress = ProgressLine.steps("listing tokens")
        defer { progress.finish() }
        let (tokens, empty) = try await TokenThread.run {
            (
                try PKCS11Discovery.tokens(modules: modules) { progress.report(ProviderProgress($0)) },
                try PKCS11Discovery.emptyReaders(modules: modules)
            )
        }
        progress.finish()
        // What is missing, in one line on standard error (the listing stays the tokens): readers with
        // no card, and, when no token is found at all, where to look.
        let readers = empty.map { "\($0.reader) (\($0.module))" }.joined(separator: ", ")
        if tokens.isEmpty {
            let searched = module.isEmpty ? "the modules registered with p11-kit" : module.joined(separator: ", ")
            let place = (searched + (empty.isEmpty ? "" : "; no card in \(readers)")).escapingControlCharacters
            Console.error(
                "tokens: no token in \(place); insert the card (is pcscd running?), "
                    + "or name its module with --module NAME|PATH (p11-kit list-modules shows the registered ones)")
        } else if !empty.isEmpty {
            Console.error("tokens: no card in \(readers.escapingControlCharacters)")
        }
        if format.json { return try printJSON("tokens", tokens) }
        if tokens.isEmpty { Console.print("no tokens") }
        for token in tokens {
            var pin = [
                token.initialized ? nil : "not initialized", token.loginRequired ? "login required" : "no login",
                token.protectedAuthenticationPath ? "PIN pad" : nil,
            ]
            pin += [
                token.userPINCountLow ? "PIN COUNT LOW" : nil, token.userPINFinalTry ? "PIN FINAL TRY" : nil,
                token.userPINLocked ? "PIN LOCKED" : nil,
            ]
            Console.print(
                "\(token.label.escapingControlCharacters)  (\(token.manufacturer.escapingControlCharacters) \(token.model.escapingControlCharacters), serial \(token.serialNumber.escapingControlCharacters))"
            )
            Console.print(
                "    module \(token.module.escapingControlCharacters), slot \(token.slot); \(pin.compactMap { $0 }.joined(separator: ", "))"
            )
            Console.print("    \(token.uri.escapingControlCharacters)")
        }
    }
}

extension PINSourceOptions {
    /// Where the PIN comes from and what to do about the token's PIN state; warnings go to
    /// standard error.
    func policy() throws -> LoginPolicy {
        LoginPolicy(
            pin: try pinSource(), allowFinalPINTry: allowFinalPinTry, warn: { Console.warning($0) },
            inform: { Console.notice($0) })
    }
}

struct Objects: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "objects",
        abstract: "List the objects a PKCS#11 URI matches (public objects: certificates and public keys).")
    @Argument(help: "An RFC 7512 URI, e.g. 'pkcs11:token=Card' or 'pkcs11:token=Card;id=%01'.")
    var uri: PKCS11URIArgument
    @Option(help: ArgumentHelp("A module by p11-kit name or absolute path (repeatable).", valueName: "module"))
    var module: [String] = []
    @OptionGroup var format: JSONOutputOptions
    @Flag(help: "Log in (PIN needed) to list private objects too.") var login = false
    @OptionGroup(title: "PIN") var pin: PINOptions

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let (uri, modules, policy) = (uri.text, module.isEmpty ? nil : module, login ? try pin.policy() : nil)
        // With --login, C_Login may wait for a person at a PIN pad.
        // Nothing found may be a card pulled out mid-listing: that is told as such.
        let objects = try await TokenThread.run(
            settlingWhen: { $0.isEmpty },
            { try PKCS11Discovery.objects(matching: uri, modules: modules, login: policy) })
        if format.json { return try printJSON("objects", objects) }
        if objects.isEmpty {
            throw DCError(.noSuchObject, "no object matches the URI", subject: uri.escapingControlCharacters)
        }
        // One write for the whole listing, not one per line.
        var lines: [String] = []
        for object in objects {
            let key = [object.keyType, object.keyBits.map(String.init)].compactMap { $0 }.joined(separator: " ")
            let flags = [
                object.sensitive.map { $0 ? "sensitive" : "not sensitive" },
                object.extractable.map { $0 ? "extractable" : "not extractable" },
            ]
            .compactMap { $0 }.joined(separator: ", ")
            lines.append(
                "\(object.kind)  id \(object.id)  \"\(object.label.escapingControlCharacters)\"  \(key)\(flags.isEmpty ? "" : "  (\(flags))")"
            )
            if let subject = object.subject { lines.append("    subject: \(subject.escapingControlCharacters)") }
            lines.append("    \(object.uri.escapingControlCharacters)")
        }
        Console.print(lines.joined(separator: "\n"))
    }
}
