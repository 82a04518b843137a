import ArgumentParser
import CMPProvider
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
            deriving (openssl x509 -serial shows it). The test CA in --testca DIR revokes, or, with \
            --provider cmp, the CA over CMP (a revocation request per certificate its record option \
            kept for the card); the clients \
            this provider delivered those credentials to, and that confirmed them, are sent retire \
            (queued for a locked client). Revoking again changes nothing, and a run that failed after revoking \
            completes when run again; a card nothing was derived \
            from is exit 66.
            """)

    @Option(help: ArgumentHelp("The card certificate's serial number in hex.", valueName: "hex")) var cardSerial: String
    @Option(help: ArgumentHelp("The test CA that derived the credentials.", valueName: "dir")) var testca: String?
    @Option(help: ArgumentHelp("cmp: the CA over CMP that derived them (its record option).", valueName: "id"))
    var provider: String?
    @Option(name: .customLong("option"), help: ArgumentHelp("A provider option (repeatable).", valueName: "KEY=VALUE"))
    var providerOptions: [String] = []
    @Option(
        help: ArgumentHelp(
            "Why, for the app's user (at most 200 bytes, one line; default: that the card was terminated).",
            valueName: "text"))
    var message: String?
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (testca == nil) != (provider == nil) else {
            throw ValidationError("give the CA that derived the credentials: --testca DIR or --provider cmp")
        }
        if let provider, provider != "cmp" {
            throw ValidationError("--provider: terminate revokes through the cmp provider (or --testca DIR)")
        }
        if testca != nil && !providerOptions.isEmpty { throw ValidationError("--option goes with --provider cmp") }
    }

    func run() async throws {
        try PolicyText.check(message ?? "")
        let card = try CertificateRevocationList.canonicalSerial(cardSerial)
        let serials: Set<String>
        if let testca {
            serials = try revokeWithTestCA(testca, card: card)
        } else {
            serials = try await revokeOverCMP(card: card)
        }
        try await retireHolders(of: serials)
    }

    /// Revokes in the test CA's database every certificate it derived from `card`.
    func revokeWithTestCA(_ directory: String, card: String) throws -> Set<String> {
        let ca = try TestCA(directory: directory)
        let derived = try ca.issuedCredentials().filter { $0.cardSerial == card }
        guard !derived.isEmpty else {
            throw DCError(
                .noSuchObject, "the test CA derived no credential from card \(card)", subject: directory,
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
        return serials
    }

    /// Asks the CA over CMP to revoke every certificate the `cmp` provider's record kept for `card`.
    func revokeOverCMP(card: String) async throws -> Set<String> {
        let options = try ProviderRequest.options(parsing: providerOptions)
        let request = ProviderRequest(options: options)
        let record = CMPRecord(directory: request.resolve(try request.requiredValue("record")))
        let certificates = try record.certificates(cardSerial: card)
        guard !certificates.isEmpty else {
            throw DCError(
                .noSuchObject, "the cmp provider's record holds no certificate derived from card \(card)",
                subject: record.directory,
                hint: "give the serial of the card certificate that proved possession (openssl x509 -serial)")
        }
        try await CMPProvider().revoke(request, certificates: certificates, reason: .cessationOfOperation)
        Console.say("card \(card): \(certificates.count) certificate(s) revoked by the CA over CMP")
        return Set(try certificates.map { try CertificateDetails($0).serialNumber })
    }

    /// Retires every client that confirmed holding one of `serials`.
    func retireHolders(of serials: Set<String>) async throws {
        // The clients: only a registered provider has delivered anything.
        guard let config = try? ProviderConfig.load() else {
            Console.say("no provider is registered here: no client to retire")
            return
        }
        let service = try service(brand: config.brand, scheme: config.scheme)
        let holdings = service.holdings
        let holders = holdings.holders(ofAny: serials)
        if holders.isEmpty { Console.say("no client holds them") }
        var failure: (any Error)?
        for holder in holders {
            do {
                // A holder stays one until its retirement is complete: a run that failed after
                // recording it (revoking its tokens, telling the client) is completed by the next.
                if try await service.completeRetirement(
                    clientScheme: holder.clientScheme, progress: { Console.say($0) })
                {
                    Console.say("client at \(holder.clientScheme): retired")
                } else {
                    try await applyPolicy(
                        clientScheme: holder.clientScheme,
                        message: message ?? "The card this credential was derived from was terminated."
                    ) { $0.state = .retired }
                }
                holdings.forget(clientScheme: holder.clientScheme)
            } catch {
                // The others are still retired; the first failure is the command's (said once).
                if failure != nil { Console.warning("\(holder.clientScheme): not retired: \(error)") }
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }
}
