import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import SchemeHandlers

@main
struct DCClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcclient",
        abstract: "The reference managed client: receives derived credentials through URL-scheme callbacks.",
        discussion: Toolkit.exitStatuses,
        version: Toolkit.version,
        subcommands: [
            Init.self, Register.self, Unregister.self, Request.self, HandleURL.self, List.self, Show.self, Lock.self,
            Unlock.self,
        ])

    /// Flags renamed so that one idea has one name on both tools (docs/CLI.md); the old names
    /// keep working, hidden, for one release.
    static let formerNames = FormerNames(["init": ["scheme": "client-scheme"]])

    static func main() async {
        await main(formerNames.rewrite(Array(CommandLine.arguments.dropFirst())))
    }
}

/// One line on stderr and a sysexits status for a DCError.
func reporting(_ body: () async throws -> Void) async throws {
    // A file-size limit must surface as EFBIG and a clean error, not a signal.
    signal(SIGXFSZ, SIG_IGN)
    do {
        try await body()
    } catch let error as DCError {
        FileHandle.standardError.write(Data("dcclient: \(error.description)\n".utf8))
        throw ExitCode(error.code.category.exitStatus)
    }
}

struct PassphraseSourceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Read the unlock passphrase from the first line of FILE.", valueName: "file"))
    var passphraseFile: String?
    @Option(help: ArgumentHelp("Read the unlock passphrase from descriptor N.", valueName: "n")) var passphraseFd:
        Int32?

    func read() throws -> SecretBytes {
        if let passphraseFile { return try SecretInput.read(file: passphraseFile) }
        if let passphraseFd { return try SecretInput.read(descriptor: passphraseFd, subject: "fd \(passphraseFd)") }
        throw DCError(
            .passphraseRequired, "the client's passphrase is needed",
            hint: "pass --passphrase-file FILE or --passphrase-fd N")
    }
}

/// The error for a command that needs a client that `dcclient init` has not set up.
func notSetUp() -> DCError {
    DCError(
        .fileNotFound, "the client is not set up",
        hint: "run dcclient init --client-scheme SCHEME --provider-scheme SCHEME --passphrase-file FILE")
}

/// This executable's absolute path (what the scheme handler must run).
var selfPath: String {
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
}

extension DCClient {
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set up the client: keys, the encrypted store, the registration.")
        @Option(help: ArgumentHelp("This client's URL scheme (reverse DNS, no digits).", valueName: "scheme"))
        var clientScheme: String
        @Option(help: ArgumentHelp("The provider's URL scheme (where requests and results go).", valueName: "scheme"))
        var providerScheme: String
        @Option(help: ArgumentHelp("This client's id (lowercase letters, digits, -).", valueName: "id"))
        var clientId: String = "dcclient"
        @OptionGroup var passphrase: PassphraseSourceOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                try ManagedClient().initialize(
                    clientId: clientId, scheme: try SchemeHandlers.normalize(scheme: clientScheme),
                    providerScheme: try SchemeHandlers.normalize(scheme: providerScheme), executable: selfPath,
                    passphrase: try passphrase.read())
                Console.say("client \(clientId) set up; registration published; unlocked")
            }
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register this client as the handler of its scheme and publish its registration.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let client = ManagedClient()
                guard let scheme = client.scheme else { throw notSetUp() }
                try client.publishRegistration(executable: selfPath)
                try SchemeHandlers().register(scheme: scheme, executable: selfPath, name: "dcclient (managed client)")
                Console.say("registered as the handler of \(scheme):")
            }
        }
    }

    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove this client's scheme handler and its registration (the store stays).")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let client = ManagedClient()
                guard let scheme = client.scheme else { throw notSetUp() }
                try SchemeHandlers().unregister(scheme: scheme)
                try client.withdrawRegistration()
                Console.say("unregistered \(scheme): (registration withdrawn; dcclient register brings it back)")
            }
        }
    }

    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask the provider for a credential (opens <provider-scheme>:/new…).")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let client = ManagedClient()
                let (url, providerScheme) = try client.requestURL()
                guard
                    let provider = try Registrations.read(
                        ProviderRegistration.self, at: client.locations.providerRegistration(providerScheme))
                else {
                    throw DCError(
                        .missingClient, "no provider is registered for \(providerScheme):",
                        hint:
                            "register one (dcprovision register --provider-scheme \(providerScheme) …), then ask again")
                }
                Console.say("requesting: \(url)")
                try await SchemeHandlers().openForwardingOutput(
                    url, scheme: providerScheme, expectedExecutable: provider.executable,
                    passingStandardOutput: !Console.isQuiet)
            }
        }
    }

    struct HandleURL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "handle-url", abstract: "The x-scheme-handler entry point (deliveries).")
        @Argument var url: String
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let client = ManagedClient()
                let handled = try client.handleDelivery(url)
                if handled.replay {
                    Console.say(
                        "dcclient: request \(handled.request) was already handled (\(handled.status)); not installed again"
                    )
                } else {
                    Console.say(
                        "dcclient: received request \(handled.request): \(handled.status == "ok" ? "installed \"\(handled.credentialName ?? "")\"" : "rejected (\(handled.status))")"
                    )
                }
                guard let result = handled.resultURL, let providerScheme = client.providerScheme,
                    let provider = try Registrations.read(
                        ProviderRegistration.self, at: client.locations.providerRegistration(providerScheme))
                else { return }
                try await SchemeHandlers().openForwardingOutput(
                    result, scheme: providerScheme, expectedExecutable: provider.executable,
                    passingStandardOutput: !Console.isQuiet)
            }
        }
    }

    /// What `list --json` and `show --json` print of an entry: its certificate's details and how
    /// many retired pairs it carries, never key material.
    struct EntryView: Encodable {
        var tag: String
        var certificate: CertificateDetails
        var keyHistory: Int
        init(_ entry: CredentialEntry) throws {
            tag = entry.tag.rawValue
            certificate = try CertificateDetails(entry.certificate)
            keyHistory = entry.keyHistory.count
        }
    }

    /// What `list --json` prints of the installed credential.
    struct CredentialView: Encodable {
        var name: String
        var serialNumber: String
        var expirationDate: Date
        var entries: [EntryView]
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the installed credential's entries (never key material).")
        @Flag(help: "Print JSON (docs/JSON.md); the credential is null when none is installed.") var json = false
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let installed = try ManagedClient().installed()
                if json {
                    let view = try installed.map {
                        CredentialView(
                            name: $0.name, serialNumber: $0.serialNumber, expirationDate: $0.expirationDate,
                            entries: try $0.entries.map(EntryView.init))
                    }
                    return try printJSON("credential", view)
                }
                guard let credential = installed else {
                    print("no credential installed")
                    return
                }
                print(
                    "\(credential.name.escapingControlCharacters)  serial \(credential.serialNumber.escapingControlCharacters)  expires \(ISO8601DateFormatter().string(from: credential.expirationDate))"
                )
                for entry in credential.entries {
                    let details = try CertificateDetails(entry.certificate)
                    let history = entry.keyHistory.isEmpty ? "" : "  (+\(entry.keyHistory.count) retired)"
                    print(
                        "  \(entry.tag.rawValue.padding(toLength: 15, withPad: " ", startingAt: 0)) \(details.keyAlgorithm.padding(toLength: 9, withPad: " ", startingAt: 0)) \(details.subject.escapingControlCharacters)\(history)"
                    )
                }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show one entry's certificate details (never key material).")
        @Argument(help: "authentication, signing, encryption or escrow.") var tag: String
        @Flag(help: "Print JSON (docs/JSON.md).") var json = false
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                guard let tag = CredentialTag(wireName: tag) else {
                    throw DCError(
                        .usage, "unknown tag '\(tag.escapingControlCharacters)'",
                        hint: "use authentication, signing, encryption or escrow")
                }
                guard let entry = try ManagedClient().installed()?[tag] else {
                    throw DCError(
                        .fileNotFound, "no \(tag) entry installed", hint: "see what is installed with dcclient list")
                }
                if json { return try printJSON("entry", try EntryView(entry)) }
                let details = try CertificateDetails(entry.certificate)
                print(
                    "tag:          \(tag)\nsubject:      \(details.subject.escapingControlCharacters)\nissuer:       \(details.issuer.escapingControlCharacters)\nserial:       \(details.serialNumber)\nkey:          \(details.keyAlgorithm)\nkey usage:    \((details.keyUsage?.names ?? []).joined(separator: ", "))\nnot after:    \(details.notAfter.map { ISO8601DateFormatter().string(from: $0) } ?? "?")\nsha256:       \(details.sha256Fingerprint)\nkey history:  \(entry.keyHistory.count) retired pair(s)"
                )
            }
        }
    }

    struct Lock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make secure services unavailable (destroys the unlocked store key).")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                try ManagedClient().lock()
                Console.say("locked")
            }
        }
    }

    struct Unlock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make secure services available.")
        @OptionGroup var passphrase: PassphraseSourceOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply()
            try await reporting {
                let client = ManagedClient()
                try client.unlock(passphrase: try passphrase.read())
                Console.say("unlocked")
                // The availability notification: queued deliveries may come now.
                guard let providerScheme = client.providerScheme, let url = try client.availabilityURL(),
                    let provider = try Registrations.read(
                        ProviderRegistration.self, at: client.locations.providerRegistration(providerScheme))
                else { return }
                Console.say("announcing: \(url)")
                try await SchemeHandlers().openForwardingOutput(
                    url, scheme: providerScheme, expectedExecutable: provider.executable,
                    passingStandardOutput: !Console.isQuiet)
            }
        }
    }
}
