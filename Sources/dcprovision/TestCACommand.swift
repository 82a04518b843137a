import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport
import TestCAProvider

struct TestCACommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "testca", abstract: "A persistent test CA for CI pipelines (never trust it).",
        subcommands: [Init.self, Issue.self])

    struct Init: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a root and an issuing CA in DIR (0700; keys 0600). Refuses to overwrite.")

        @Argument(help: "The directory to create.") var directory: String
        @Option(help: ArgumentHelp("The CA keys' algorithm: p256, p384, rsa2048, rsa3072.", valueName: "algorithm"))
        var keyAlgorithm: String = "p256"
        @Option(help: "The organization in the CA names.") var organization: String = "Derived Credentials Test"

        @OptionGroup var output: OutputOptions

        func run() async throws {
            guard let algorithm = KeyAlgorithm(rawValue: keyAlgorithm) else {
                throw DCError(
                    .usage, "unknown key algorithm '\(keyAlgorithm)'", hint: "use p256, p384, rsa2048 or rsa3072")
            }
            let ca = try TestCA.initialize(at: directory, algorithm: algorithm, organization: organization)
            Console.say("test CA created in \(ca.directory.escapingControlCharacters) (\(algorithm))")
        }
    }

    struct Issue: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a four-tag derived credential from the test CA in DIR into --out-dir.",
            discussion: "Writes one file set per entry (see --format), chain.pem and manifest.json.")

        @Argument(help: "The test CA directory.") var directory: String
        @Option(help: ArgumentHelp("Where to write the credential (created 0700 if missing).", valueName: "dir"))
        var outDir: String
        @Option(help: "der (cert.der + key.der) or pem (one file per entry).") var format: String = "der"
        @Option(help: "The subject's common name.") var commonName: String = "Test User"
        @Option(
            help: ArgumentHelp(
                "The new keys' algorithm: p256, p384, rsa2048, rsa3072 (default: the CA's).",
                valueName: "algorithm"))
        var keyAlgorithm: String?
        @Option(help: "Retired escrow pairs to issue (0-20).") var escrowHistory: Int = 0
        @Option(help: "Certificate lifetime in days.") var validityDays: Int = 365
        @Option(help: "An e-mail address for the subjectAltName.") var email: String?
        @Option(help: "A deliberately broken profile: expired, wrong-key-usage, mismatched-key, ca-certificate.")
        var negative: String?
        @Flag(help: "Replace files that already exist.") var force = false

        @OptionGroup var output: OutputOptions

        func run() async throws {
            guard let format = ConversionOutputs.Format(rawValue: format) else {
                throw DCError(.usage, "unknown format '\(format)'", hint: "use --format der or --format pem")
            }
            var options: [String: [String]] = [
                "dir": [directory], "common-name": [commonName], "escrow-history": [String(escrowHistory)],
                "validity-days": [String(validityDays)],
            ]
            if let keyAlgorithm { options["key-algorithm"] = [keyAlgorithm] }
            if let email { options["email"] = [email] }
            if let negative { options["negative"] = [negative] }
            let provided = try await TestCAProvider().provide(ProviderRequest(options: options))
            var files = AtomicFileSet(directory: outDir)
            try ConversionOutputs.add(provided, format: format, to: &files)
            try AtomicFileSet.ensureDirectory(outDir)
            AtomicFileSet.removeStaleStagingFiles(in: outDir)
            try files.commit(replacingExisting: force)
            for name in files.names {
                Console.print((outDir as NSString).appendingPathComponent(name).escapingControlCharacters)
            }
        }
    }
}
