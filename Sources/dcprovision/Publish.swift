import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import Foundation
import ProviderService
import SystemSupport

/// `dcprovision publish`: what verifiers fetch, signed and written into a directory a static web
/// server serves; the directory is remembered and kept current on every later change.
struct Publish: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Sign the issuing keys and the revocation list and write them where verifiers fetch them.",
        discussion: """
            Writes trust.jws (the signed, numbered list dcverify serve --trust-url fetches), trust-key.jwks (the \
            key that signs it: give it to every verifier with --trust-key), issuers.jwks and revocations.json \
            into the --out-dir directory, each 0644 and replaced atomically. The directory is remembered: every later change of the revocation \
            list or the issuing keys (unauthorize, retire, ...) publishes again with the next number, and \
            publish without --out-dir signs afresh into it. Each list promises a newer one within --next-update \
            (default 1d): run publish more often than that (a timer), or verifiers fail closed.
            """)

    @Option(
        help: ArgumentHelp(
            "The directory to publish into, made 0755 if missing (remembered; default: the one remembered).",
            valueName: "dir"))
    var outDir: String?

    @Option(
        help: ArgumentHelp(
            "How long each list promises the next one (default 1d, or the one remembered; 1 min to 30 days).",
            valueName: "duration"))
    var nextUpdate: DurationArgument<BareSeconds>?

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let validity = try nextUpdate.map { argument -> Int64 in
            guard let seconds = argument.whole(.seconds), (60...30 * 86_400).contains(seconds) else {
                throw DCError(
                    .usage, "'\(argument.text.escapingControlCharacters)' is not a next-update time",
                    hint: "write 1h, 12h or 1d (1 min to 30 days)")
            }
            return Int64(seconds)
        }
        let config = try ProviderConfig.load()
        let published = try service(brand: config.brand, scheme: config.scheme).publishTrust(
            to: outDir, validity: validity)
        Console.say(
            "published trust list \(published.list.number) into \(published.directory) (signed by \(published.key.thumbprint), next update by \(Date(timeIntervalSince1970: TimeInterval(published.list.nextUpdate)).formatted(.iso8601)))"
        )
    }
}
