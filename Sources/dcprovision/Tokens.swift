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
    @Option(help: ArgumentHelp("A module by p11-kit name or absolute path (repeatable; default: all registered).", valueName: "module"))
    var module: [String] = []
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        try await runReportingErrors {
            let tokens = try PKCS11Discovery.tokens(modules: module.isEmpty ? nil : module)
            if json { return try printJSON(tokens) }
            if tokens.isEmpty { print("no tokens") }
            for token in tokens {
                var pin = [token.initialized ? nil : "not initialized", token.loginRequired ? "login required" : "no login", token.protectedAuthenticationPath ? "PIN pad" : nil]
                pin += [token.userPINCountLow ? "PIN COUNT LOW" : nil, token.userPINFinalTry ? "PIN FINAL TRY" : nil, token.userPINLocked ? "PIN LOCKED" : nil]
                print("\(token.label.escapingControlCharacters)  (\(token.manufacturer.escapingControlCharacters) \(token.model.escapingControlCharacters), serial \(token.serialNumber.escapingControlCharacters))")
                print("    module \(token.module.escapingControlCharacters), slot \(token.slot); \(pin.compactMap { $0 }.joined(separator: ", "))")
                print("    \(token.uri.escapingControlCharacters)")
            }
        }
    }
}

struct Objects: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the objects a PKCS#11 URI matches (public objects: certificates and public keys).")
    @Argument(help: "An RFC 7512 URI, e.g. 'pkcs11:token=Card' or 'pkcs11:token=Card;id=%01'.") var uri: String
    @Option(help: ArgumentHelp("A module by p11-kit name or absolute path (repeatable).", valueName: "module"))
    var module: [String] = []
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        try await runReportingErrors {
            let objects = try PKCS11Discovery.objects(matching: uri, modules: module.isEmpty ? nil : module)
            if json { return try printJSON(objects) }
            if objects.isEmpty { throw DCError(.noSuchObject, "no object matches the URI", subject: uri.escapingControlCharacters) }
            for object in objects {
                let key = [object.keyType, object.keyBits.map(String.init)].compactMap { $0 }.joined(separator: " ")
                let flags = [object.sensitive.map { $0 ? "sensitive" : "not sensitive" }, object.extractable.map { $0 ? "extractable" : "not extractable" }]
                    .compactMap { $0 }.joined(separator: ", ")
                print("\(object.kind)  id \(object.id)  \"\(object.label.escapingControlCharacters)\"  \(key)\(flags.isEmpty ? "" : "  (\(flags))")")
                if let subject = object.subject { print("    subject: \(subject.escapingControlCharacters)") }
                print("    \(object.uri.escapingControlCharacters)")
            }
        }
    }
}
