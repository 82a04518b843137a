import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import Logging

@main
struct DCProvision: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcprovision",
        abstract: "Provision derived credentials (certificates and keys, by tag) into a managed client.",
        discussion: """
            How do I … try it all: dcprovision demo. Become the provider: dcprovision register --provider-scheme \
            org.example.provider --brand NAME --testca DIR (after dcprovision testca init DIR), then dcprovision \
            pair --client-scheme S for each client set up with dcclient init. Send from a card: dcprovision send \
            --pkcs11 URI --layout piv --derive --testca DIR --card-trust-anchor FILE --pin-file FILE --client-scheme \
            S (the brand and provider scheme come from the registration); dcprovision card status shows the card. \
            Run the verifier: dcverify serve (its own page). Guide: \(Toolkit.documentation)/README.md. \
            \(Toolkit.exitStatuses)
            """,
        version: Toolkit.version,
        subcommands: [
            Demo.self, Send.self, HandleURL.self, Register.self, Pair.self, Unregister.self,
            SetClientState<Authorize>.self, SetClientState<Unauthorize>.self, SetClientState<Retire>.self,
            Terminate.self, Policy.self, Status.self, Convert.self, Inspect.self, Providers.self, TestCACommand.self,
            Tokens.self, Objects.self, Card.self, Publish.self,
        ]
    )

    /// Flags renamed so that one idea has one name on both tools (docs/CLI.md); the old names
    /// keep working, hidden, for one release.
    static let formerNames = FormerNames([
        "register": ["scheme": "provider-scheme", "pkcs11-module": "module"],
        "send": ["callback-scheme": "provider-scheme", "pkcs11-module": "module", "serial": "credential-serial"],
        "convert": ["pkcs11-module": "module"],
        "inspect": ["pkcs11-module": "module"],
        "testca init": ["algorithm": "key-algorithm"],
        "testca issue": ["algorithm": "key-algorithm"],
    ])

    static func main() async {
        await Tool.main(Self.self, name: "dcprovision", formerNames: formerNames, urlHandler: HandleURL.self)
    }
}

struct GlobalOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Log what is being done to stderr.")
    var verbose = false

    func bootstrapLogging() {
        let level: Logger.Level = verbose ? .debug : .warning
        LoggingSystem.bootstrap { LogLineHandler(label: $0, level: level) }
    }
}
