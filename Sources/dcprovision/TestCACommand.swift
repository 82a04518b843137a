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
        subcommands: [Init.self, Issue.self, Revoke.self, CRL.self, OCSP.self, Recover.self])

    struct Init: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Create a root and an issuing CA in DIR (0700; keys 0600). Refuses to overwrite.")

        @Argument(help: "The directory to create.") var directory: String
        @Option(help: ArgumentHelp("The CA keys' algorithm: p256, p384, rsa2048, rsa3072.", valueName: "algorithm"))
        var keyAlgorithm: KeyAlgorithm = .p256
        @Option(help: "The organization in the CA names.") var organization: String = "Derived Credentials Test"
        @Option(
            help: ArgumentHelp(
                "An OCSP responder URL (http://) for the certificates' authorityInfoAccess.", valueName: "url"))
        var ocspURL: HTTPURLArgument?
        @Option(
            help: ArgumentHelp("A CRL URL (http://) for the certificates' cRLDistributionPoints.", valueName: "url"))
        var crlURL: HTTPURLArgument?
        @Option(
            help: ArgumentHelp(
                "Archive the encryption keys it issues, sealed to this certificate (its key stays elsewhere).",
                valueName: "file"))
        var recoveryCert: String?

        @OptionGroup var output: OutputOptions

        func run() async throws {
            var recovery: Certificate?
            if let recoveryCert {
                let material = try CredentialReader().read(file: recoveryCert)
                // The point of key recovery is that the CA cannot open its own archive.
                guard material.privateKey == nil, material.certificates.count == 1 else {
                    throw DCError(
                        .usage, "give the recovery certificate alone: its private key must not be on the CA's machine",
                        subject: recoveryCert)
                }
                recovery = material.certificates[0]
            }
            let ca = try TestCA.initialize(
                at: directory, algorithm: keyAlgorithm, organization: organization, ocspURL: ocspURL?.text,
                crlURL: crlURL?.text,
                recoveryCertificate: recovery)
            Console.say("test CA created in \(ca.directory.escapingControlCharacters) (\(keyAlgorithm))")
        }
    }

    struct Issue: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "issue",
            abstract: "Issue a four-tag derived credential from the test CA in DIR into --out-dir.",
            discussion: "Writes one file set per entry (see --format), chain.pem and manifest.json.")

        @OptionGroup var ca: TestCADirectory
        @Option(help: ArgumentHelp("Where to write the credential (created 0700 if missing).", valueName: "dir"))
        var outDir: String
        @Option(help: "der (cert.der + key.der) or pem (one file per entry).")
        var format: ConversionOutputs.Format = .der
        @Option(help: "The subject's common name.") var commonName: String = "Test User"
        @Option(
            help: ArgumentHelp(
                "The new keys' algorithm: p256, p384, rsa2048, rsa3072 (default: the CA's).",
                valueName: "algorithm"))
        var keyAlgorithm: KeyAlgorithm?
        @Option(help: "Retired escrow pairs to issue (0-20).") var escrowHistory: Int = 0
        @Option(help: ArgumentHelp("Certificate lifetime, whole days; a bare number is days.", valueName: "duration"))
        var validityDays: DurationArgument<BareDays> = DurationArgument(365, .days)
        @Option(help: "An e-mail address for the subjectAltName.") var email: String?
        @Option(help: "A deliberately broken profile: expired, wrong-key-usage, mismatched-key, ca-certificate.")
        var negative: NegativeProfile?
        @Flag(help: "Replace files that already exist.") var force = false

        @OptionGroup var output: OutputOptions

        /// `--validity-days` in whole days, as the provider's `validity-days` option takes it.
        static func days(_ duration: DurationArgument<BareDays>) throws -> Int {
            guard let days = duration.whole(.days) else {
                throw DCError(
                    .usage, "--validity-days \(duration.text.escapingControlCharacters) is not a whole number of days")
            }
            return days
        }

        func run() async throws {
            var options: [String: [String]] = [
                "dir": [ca.directory], "common-name": [commonName], "escrow-history": [String(escrowHistory)],
                "validity-days": [String(try Self.days(validityDays))],
            ]
            if let keyAlgorithm { options["key-algorithm"] = [keyAlgorithm.rawValue] }
            if let email { options["email"] = [email] }
            if let negative { options["negative"] = [negative.rawValue] }
            // RSA keys take a while each, and a credential with its escrow history is 24 of them.
            let progress = ProgressLine.steps("issuing keys")
            defer { progress.finish() }
            var files = AtomicFileSet(directory: outDir)
            // All or nothing: the files are written before the CA records the credential, and
            // taken back if it cannot; a credential that could not be written is never recorded.
            try await Rollback.allOrNothing { rollback in
                _ = try await TestCAProvider().provide(
                    ProviderRequest(options: options, progress: { progress.report($0) })
                ) { provided in
                    progress.finish()
                    try ConversionOutputs.add(provided, format: format, to: &files)
                    rollback.keep(files)
                    try files.commitCreatingDirectory(replacingExisting: force)
                }
            }
            for name in files.names {
                Console.print((outDir as NSString).appendingPathComponent(name).escapingControlCharacters)
            }
        }
    }
}

/// The test CA directory every `testca` command but `init` works on: its one argument.
struct TestCADirectory: ParsableArguments {
    @Argument(help: "The test CA directory.") var directory: String

    /// The test CA in ``directory``.
    func open() throws -> TestCA { try TestCA(directory: directory) }
}

extension TestCACommand {
    /// Writes `contents` to the file `path` all or nothing (`AtomicFileSet`), with `mode`;
    /// refused when the file exists unless `replacing`.
    static func write(_ contents: AtomicFileSet.Contents, to path: String, mode: mode_t, replacing: Bool) throws {
        let directory = (path as NSString).deletingLastPathComponent
        var files = AtomicFileSet(directory: directory.isEmpty ? "." : directory)
        try files.add((path as NSString).lastPathComponent, contents, mode: mode)
        try files.commit(replacingExisting: replacing)
    }
}

extension TestCACommand {
    struct Revoke: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke a certificate the test CA in DIR issued; CRLs and OCSP answers show it from now on.")

        @OptionGroup var ca: TestCADirectory
        @Option(help: "The certificate's serial number in hex (openssl x509 -serial shows it).") var serial: String
        @Option(
            help: ArgumentHelp(
                "Why: \(RevocationReason.allCases.map(\.rawValue).joined(separator: ", ")).", valueName: "reason"))
        var reason: RevocationReason?

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let (entry, changed) = try ca.open().revoke(serial: serial, reason: reason)
            let when = (entry.revoked ?? Date()).formatted(.iso8601)
            Console.say(
                changed
                    ? "revoked \(entry.serial)\(reason.map { " (\($0))" } ?? "") at \(when)"
                    : "\(entry.serial) was revoked already, at \(when); nothing changed")
        }
    }

    struct CRL: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "crl",
            abstract: "Write a new CRL of the test CA in DIR, signed by its issuing CA.",
            discussion: "openssl crl -verify -CAfile DIR/issuing.pem and openssl verify -crl_check accept it.")

        @OptionGroup var ca: TestCADirectory
        @Option(help: ArgumentHelp("Where to write the CRL.", valueName: "file")) var out: String
        @Option(help: "pem or der.") var format: Encoding = .pem
        @Option(
            help: ArgumentHelp(
                "Time until the CRL's nextUpdate (1d-365d); a bare number is days.", valueName: "duration"))
        var days: DurationArgument<BareDays> = DurationArgument(7, .days)
        @Flag(help: "Replace the file if it exists.") var force = false

        @OptionGroup var output: OutputOptions

        /// How the CRL is written.
        enum Encoding: String, CaseIterable, ExpressibleByArgument {
            case pem, der
        }

        func run() async throws {
            guard (86400...365 * 86400).contains(days.seconds) else {
                throw DCError(.usage, "--days must be 1 to 365")
            }
            let crl = try ca.open().makeCRL(validity: days.seconds)
            try TestCACommand.write(
                .bytes(format == .pem ? crl.pem : crl.derBytes), to: out, mode: 0o644, replacing: force)
            Console.say(
                "CRL number \(crl.number ?? 0) with \(crl.entries.count) revoked certificate(s) written to \(out)")
        }
    }

    struct OCSP: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "ocsp",
            abstract: "Answer OCSP requests (RFC 6960, over HTTP) for the test CA in DIR until stopped.",
            discussion: """
                Answers good, revoked or unknown from DIR/index.txt, read afresh for every request, signed by \
                the issuing CA, like openssl ocsp -index DIR/index.txt -CA DIR/issuing.pem -rsigner \
                DIR/issuing.pem -rkey DIR/issuing.key.
                """)

        @OptionGroup var ca: TestCADirectory
        @Option(
            help: ArgumentHelp(
                "Where to listen: an IPv4 or [IPv6] address and a port (0: any free port; see --port-file).",
                valueName: "host:port"))
        var listen = ListenAddress(host: "127.0.0.1", port: 8090)
        @Option(help: ArgumentHelp("Write the port listened on to this file.", valueName: "file")) var portFile: String?
        @Option(
            help: ArgumentHelp(
                "Time until an answer's nextUpdate (1m-1d); a bare number is minutes.", valueName: "duration"))
        var validityMinutes: DurationArgument<BareMinutes> = DurationArgument(60, .minutes)

        @OptionGroup var output: OutputOptions

        func run() async throws {
            guard (60...86400).contains(validityMinutes.seconds) else {
                throw DCError(.usage, "--validity-minutes must be 1 to 1440")
            }
            let log: (@Sendable (String) -> Void)? =
                Console.isQuiet ? nil : { @Sendable (line: String) in Console.say("ocsp: " + line) }
            let server = try ca.open().ocspServer(validity: validityMinutes.seconds, log: log)
            let listener = try OCSPServer.listen(listen)
            if let portFile {
                try TestCACommand.write(
                    .bytes(Array("\(listener.port)\n".utf8)), to: portFile, mode: 0o644, replacing: true)
            }
            Console.say(
                "answering OCSP for \(ca.directory.escapingControlCharacters) on http://\(ListenAddress(host: listen.host, port: listener.port))/"
            )
            server.serve(listener)
        }
    }
}

extension TestCACommand {
    struct Recover: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "recover",
            abstract: "Open the encryption key pair the test CA in DIR archived for a certificate.",
            discussion: """
                Needs the recovery private key (of the certificate given to testca init --recovery-cert). \
                Writes the certificate and the key as PEM to --out (0600). The archive is CMS: \
                openssl cms -decrypt -inform DER -in DIR/archive/SERIAL.cms -recip CERT -inkey KEY opens it too.
                """)

        @OptionGroup var ca: TestCADirectory
        @Option(help: "The certificate's serial number in hex (openssl x509 -serial shows it).") var serial: String
        @Option(help: ArgumentHelp("The recovery private key (PEM or DER).", valueName: "file")) var recoveryKey: String
        @Option(help: ArgumentHelp("Where to write the pair (PEM, 0600).", valueName: "file")) var out: String
        @Flag(help: "Replace the file if it exists.") var force = false
        @OptionGroup var passphrase: PromptingPassphraseOptions

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let ca = try self.ca.open()
            guard
                let key = try CredentialReader(passphrase: try passphrase.source()).read(file: recoveryKey).privateKey
            else {
                throw DCError(.missingMaterial, "no private key", subject: recoveryKey)
            }
            let pair = try ca.recover(serial: serial, with: key)
            var text = PEM.certificate(pair.certificate)
            PEM.privateKey(pair.privateKey).withUnsafeBytes { text += $0 }
            try TestCACommand.write(.secret(SecretBytes(consuming: &text)), to: out, mode: 0o600, replacing: force)
            Console.say("recovered the pair of \(try CertificateDetails(pair.certificate).serialNumber) into \(out)")
        }
    }
}
