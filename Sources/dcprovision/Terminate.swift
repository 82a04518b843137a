import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestCAProvider

/// `dcprovision terminate --card-serial S --testca DIR`: the derived-PIV rule that a derived
/// credential dies with its card. Every certificate of every credential the CA derived from the
/// card is revoked (`cessationOfOperation`), and every client that holds one is retired.
struct Terminate: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "terminate",
        abstract: "Terminate a card: revoke every credential derived from it and retire the clients holding them.",
        discussion: """
            The card is named by the serial number of the certificate that proved possession when \
            deriving (openssl x509 -serial shows it). The test CA in --testca DIR revokes; the clients \
            this provider delivered those credentials to, and that confirmed them, are sent retire \
            (queued for a locked client). Revoking again changes nothing; a card nothing was derived \
            from is exit 66.
            """)

    @Option(help: ArgumentHelp("The card certificate's serial number in hex.", valueName: "hex")) var cardSerial: String
    @Option(help: ArgumentHelp("The test CA that derived the credentials.", valueName: "dir")) var testca: String
    @Option(
        help: ArgumentHelp(
            "Why, for the app's user (at most 200 bytes, one line; default: that the card was terminated).",
            valueName: "text"))
    var message: String?
    @OptionGroup var output: OutputOptions

    func run() async throws {
        try PolicyText.check(message ?? "")
        let card = try CertificateRevocationList.canonicalSerial(cardSerial)
        let ca = try TestCA(directory: testca)
        let derived = try ca.issuedCredentials().filter { $0.cardSerial == card }
        guard !derived.isEmpty else {
            throw DCError(
                .noSuchObject, "the test CA derived no credential from card \(card)", subject: testca,
                hint: "give the serial of the card certificate that proved possession (openssl x509 -serial)")
        }
        var serials = Set<String>()
        var newlyRevoked = 0
        for credential in derived {
            for member in credential.certificates {
                if try ca.revoke(serial: member.serial, reason: .cessationOfOperation).changed { newlyRevoked += 1 }
                serials.insert(member.serial)
            }
        }
        Console.say(
            "card \(card): \(derived.count) derived credential(s), \(serials.count) certificate(s) revoked (\(newlyRevoked) now)"
        )
        // The clients: only a registered provider has delivered anything.
        guard let config = try? ProviderConfig.load() else {
            Console.say("no provider is registered here: no client to retire")
            return
        }
        let holdings = try service(brand: config.brand, scheme: config.scheme).holdings
        let holders = holdings.holders(ofAny: serials)
        if holders.isEmpty { Console.say("no client holds them") }
        var failure: (any Error)?
        for holder in holders {
            do {
                try await applyPolicy(
                    clientScheme: holder.clientScheme,
                    message: message ?? "The card this credential was derived from was terminated."
                ) { $0.state = .retired }
                holdings.forget(clientScheme: holder.clientScheme)
            } catch {
                // The others are still retired; the first failure is the command's.
                Console.warning("\(holder.clientScheme): not retired: \(error)")
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }
}
