import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ProviderService
import SchemeHandlers
import SystemSupport

/// The provider's configuration: its scheme and brand, and the source that answers `new`
/// requests. `$XDG_CONFIG_HOME/dcprovision/config.json`, 0600.
struct ProviderConfig: Codable {
    var scheme: URLScheme
    var brand: String
    var provider: String
    var options: [String: [String]]
    /// A card source's PIN file (its path, never the PIN): `handle-url new` runs unattended.
    var pinFile: String?
    /// Where `register` ran: relative paths in `options` (`--testca ca`) are resolved against it,
    /// since the handler is started from wherever the desktop starts it.
    var workingDirectory: String?
    /// Whether exec plug-ins run only confined (`register --require-sandbox`), for every command
    /// of this provider, the handler's included.
    var requireSandbox: Bool?

    static func path(_ locations: XDGDirectories) -> String { locations.configHome + "/dcprovision/config.json" }

    static func load(_ locations: XDGDirectories = XDGDirectories()) throws -> ProviderConfig {
        guard let data = FileManager.default.contents(atPath: path(locations)) else {
            throw DCError(
                .fileNotFound, "the provider is not registered", subject: path(locations),
                hint: "run dcprovision register")
        }
        return try JSONDecoder().decode(ProviderConfig.self, from: data)
    }

    /// Whether the registered configuration asks that plug-ins run only confined: false when the
    /// provider is not registered; true when its configuration is there but cannot be read (a
    /// damaged file must not turn the requirement off).
    static func requiresSandbox(_ locations: XDGDirectories = XDGDirectories()) -> Bool {
        guard FileManager.default.fileExists(atPath: path(locations)) else { return false }
        guard let config = try? load(locations) else { return true }
        return config.requireSandbox ?? false
    }

    /// Whether answering a request logs in to a card: a PKCS#11 source (read or derived), or any
    /// source given a PIN.
    var usesCard: Bool { provider == "pkcs11" || provider == "derive" || pinFile != nil }
}

/// A service that opens delivery URLs with the client's registered handler (refusing a hijacker)
/// and forwards the handler's output.
func service(brand: String, scheme: URLScheme) throws -> CredentialService {
    try CredentialService(
        brand: brand, callbackScheme: scheme,
        checkHandler: {
            try SchemeHandlers().verifyHandler(scheme: $0.scheme, expectedExecutable: $0.executable)
        },
        open: { url, registration in
            try await SchemeHandlers().openForwardingOutput(
                url, scheme: registration.scheme, expectedExecutable: registration.executable,
                passingStandardOutput: !Console.isQuiet)
        })
}

struct Register: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "register",
        abstract: "Register dcprovision as the handler of the provider scheme, with the source that answers requests.")
    @Option(
        help: ArgumentHelp(
            "The provider's URL scheme (reverse DNS, no digits: org.example.provider).", valueName: "scheme"))
    var providerScheme: URLScheme
    @Option(help: "The provider's brand, shown to users.") var brand: String
    @OptionGroup(title: "The source for credential requests") var source: SourceOptions<UnattendedPINOptions>

    @OptionGroup var output: OutputOptions

    func validate() throws { try source.requireRevocationFlagsOnlyWithDerive("register") }

    func run() async throws {
        let scheme = providerScheme
        // The brand goes into the desktop entry's Name: checked before anything is written.
        try SchemeHandlers.validateDisplayName(brand)
        let (provider, options) = try source.resolve(source.sandbox.registry())
        let pinFile = source.pin.pinFile.map {
            $0.hasPrefix("/") ? $0 : FileManager.default.currentDirectoryPath + "/" + $0
        }
        let locations = XDGDirectories()
        let config = ProviderConfig(
            scheme: scheme, brand: brand, provider: provider.descriptor.id, options: options, pinFile: pinFile,
            workingDirectory: FileManager.default.currentDirectoryPath,
            requireSandbox: source.sandbox.requireSandbox ? true : nil)
        let directory = (ProviderConfig.path(locations) as NSString).deletingLastPathComponent
        let service = try service(brand: brand, scheme: scheme)
        let handlers = SchemeHandlers()
        // All or nothing: a step that fails puts back the configuration, the keys made on first
        // use, the handler and the registration as they were.
        try Rollback.allOrNothing { rollback in
            rollback.keep(ProviderConfig.path(locations))
            service.keepRegistration(in: rollback)
            for path in handlers.registrationFiles(scheme: scheme) { rollback.keep(path) }
            try AtomicFileSet.ensureDirectory(directory)
            var files = AtomicFileSet(directory: directory)
            try files.add("config.json", .bytes(Array(try JSONEncoder().encode(config))), mode: 0o600)
            try files.commit(replacingExisting: true)
            // The files a verification service reads (its trusted issuer, the revocation list) exist
            // before the provider is announced, so that dcverify can start before the first
            // auth-token delegation.
            _ = try service.issuingKey()
            try handlers.register(scheme: scheme, executable: Tool.executablePath, name: "dcprovision (\(brand))")
            try Registrations.publish(
                try service.registration(executable: Tool.executablePath), at: locations.providerRegistration(scheme))
        }
        Console.say("registered as the handler of \(scheme): (source: \(provider.descriptor.id))")
    }
}

struct Pair: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Pair with a registered managed client: pin its signing key so that its requests are answered.",
        discussion: """
            A client's requests (new, available) are acted on only when they are signed with the key \
            pinned here. Pairing again replaces the pin, after the client was set up afresh. With a card \
            source, the client's requests make the provider log in to the card with no one present: \
            that needs --allow-card-requests, and is limited per hour.
            """)
    @Option(help: ArgumentHelp("The managed client's URL scheme (dcclient init).", valueName: "scheme"))
    var clientScheme: URLScheme
    @Flag(help: "Let this client's requests use a card source unattended.") var allowCardRequests = false
    @Option(help: ArgumentHelp("At most N card requests from this client an hour (1–3600).", valueName: "n"))
    var cardRequestsPerHour = 4
    @Option(
        help: ArgumentHelp(
            "The user the client's auth tokens name (printable ASCII; default: the login name running dcprovision).",
            valueName: "id"))
    var userId: String?
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let config = try ProviderConfig.load()
        let pairing = try service(brand: config.brand, scheme: config.scheme).pair(
            clientScheme: clientScheme, allowCardRequests: allowCardRequests,
            cardRequestsPerHour: cardRequestsPerHour, userID: userId)
        Console.say(
            "paired with client \(pairing.clientId) (\(pairing.scheme):) for user \(pairing.userID ?? ClientPairing.defaultUserID); card requests \(pairing.allowCardRequests ? "allowed, at most \(pairing.cardRequestsPerHour) an hour" : "not allowed")"
        )
    }
}

struct Unregister: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "unregister", abstract: "Remove the provider's scheme handler and registration.")
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let locations = XDGDirectories()
        let config = try ProviderConfig.load(locations)
        let handlers = SchemeHandlers()
        // All or nothing: a removal that fails puts back what the removals before it took away
        // (the desktop entry, the launcher, the default in mimeapps.list, the registration).
        try Rollback.allOrNothing { rollback in
            for path in handlers.registrationFiles(scheme: config.scheme) { rollback.keep(path) }
            rollback.keep(locations.providerRegistration(config.scheme))
            try handlers.unregister(scheme: config.scheme)
            try Registrations.withdraw(at: locations.providerRegistration(config.scheme))
        }
        Console.say("unregistered \(config.scheme):")
    }
}

struct HandleURL: URLHandlingCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "handle-url",
        abstract: "The x-scheme-handler entry point: `new` requests, availability notices and `result` callbacks.")
    @Argument var url: String

    @OptionGroup var output: OutputOptions

    func run() async throws { try await Self.handle(url: url) }

    static func handle(url: String) async throws {
        let config = try ProviderConfig.load()
        let service = try service(brand: config.brand, scheme: config.scheme)
        let handled = try await service.handle(
            url: url, fromCard: config.usesCard, progress: { Console.say("dcprovision:   \($0)") },
            issue: { request, _ in
                // Only a paired client's signed request gets here, with the request id it chose; a
                // forged or replayed one was refused before anything is issued or a card touched.
                Console.say(
                    "dcprovision: request \(request.request) from client \(request.client); issuing with provider '\(config.provider)'"
                )
                let confined = config.requireSandbox ?? false
                let provider = try ProviderDirectory.provider(
                    config.provider, registry: ProviderDirectory.registry(requiringConfinement: confined),
                    requiringConfinement: confined)
                let pin = try UnattendedPINOptions.pinSource(file: config.pinFile)
                let provided = try await provider.provide(
                    ProviderRequest(
                        options: config.options, passphrase: pin,
                        workingDirectory: config.workingDirectory ?? FileManager.default.currentDirectoryPath))
                return try provided.credential()
            })
        switch handled {
        case .answered: break
        case .deliveredQueued(let notice, let sent):
            Console.say("dcprovision: client \(notice.client) announced availability")
            if sent.isEmpty { Console.say("dcprovision:   nothing queued") }
        case .result(_, let record):
            Console.say(
                "dcprovision: result for request \(record.request): \(record.outcome?.text ?? "?") (MAC verified)")
        case .acknowledged(let acknowledgement, let record):
            let (client, sequence, subject) = (
                acknowledgement.client, acknowledgement.sequence, acknowledgement.subject
            )
            let text = acknowledgement.message
            let why = text.isEmpty ? "" : " (\(text.escapingControlCharacters))"
            Console.say(
                "dcprovision: client \(client) acknowledged \(subject == .authState ? "its authorization state" : "the secure file I/O policy") (policy \(sequence)): \(acknowledgement.state)\(why)"
            )
            if subject == .authState, record.policy.state == .retired, sequence == record.policy.sequence {
                Console.say("dcprovision: client \(client) is retired; its pairing has ended")
            }
        case .identityToken(let request, _):
            Console.say(
                "dcprovision: identity token for client \(request.client): audience \(request.audience.text.escapingControlCharacters), scope \(request.scope.text.escapingControlCharacters)"
            )
        }
    }
}

struct Send: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send a credential from a source to a registered managed client.")
    @OptionGroup(title: "Source") var source: SourceOptions<PINOptions>
    @Option(help: "The credential's name (default: the provider's suggestion).") var name: String?
    @Option(
        help: ArgumentHelp("The credential's serial number (default: the provider's suggestion).", valueName: "serial"))
    var credentialSerial: String?
    @Option(
        help: "The expiration date, ISO 8601 (2027-11-22 or 2027-11-22T00:00:00Z; default: the provider's suggestion).")
    var expires: String?
    @Option(help: "The provider's brand, shown to users (default: the registered provider's).") var brand: String?
    @Option(
        help: ArgumentHelp(
            "The provider's URL scheme: the client's result comes back here (default: the registered provider's).",
            valueName: "scheme"))
    var providerScheme: URLScheme?
    @OptionGroup var trust: TrustAnchorOptions
    @Option(help: ArgumentHelp("The managed client's URL scheme (dcclient init).", valueName: "scheme"))
    var clientScheme: URLScheme
    @Flag(help: "If the client is locked, seal and queue the delivery until it announces availability.") var queue =
        false
    @Flag(help: "Add the encryption keys the source's CA archived for this subject to the escrow key history.")
    var recover = false
    @Option(
        help: ArgumentHelp("With --recover: the recovery private key (PEM or DER).", valueName: "file"))
    var recoveryKey: String?
    @OptionGroup var passphrase: PromptingPassphraseOptions

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if recover != (recoveryKey != nil) { throw ValidationError("--recover and --recovery-key go together") }
        if recover && source.testca == nil && source.provider == nil {
            throw ValidationError("--recover needs a source whose CA archives keys: --testca DIR or --provider ID")
        }
    }

    func run() async throws {
        var expiry: Date?
        if let expires {
            let full = ISO8601DateFormatter()
            let day = ISO8601DateFormatter()
            day.formatOptions = [.withFullDate]
            guard let parsed = full.date(from: expires) ?? day.date(from: expires) else {
                throw DCError(
                    .usage, "--expires is not an ISO 8601 date", subject: expires,
                    hint: "write 2027-11-22 or 2027-11-22T00:00:00Z")
            }
            // A date already past would make a credential the client refuses at every use:
            // refused before the source is asked (the send refuses one a source suggests, too).
            guard parsed > Date() else {
                throw DCError(
                    .invalid, "--expires is in the past: the credential could not be used", subject: expires,
                    hint: "give a date still to come")
            }
            expiry = parsed
        }
        // The registration holds the brand and the scheme: a flag only overrides it.
        let locations = XDGDirectories()
        let registered =
            (brand == nil || providerScheme == nil)
                && FileManager.default.fileExists(atPath: ProviderConfig.path(locations))
            ? try ProviderConfig.load(locations) : nil
        guard let scheme = providerScheme ?? registered?.scheme, let brand = brand ?? registered?.brand else {
            throw notRegistered()
        }
        let service = try service(brand: brand, scheme: scheme)
        // A send that would be refused (no client, not authorized, locked without --queue) issues
        // nothing and touches no card; send(…) checks again, and says what passed.
        _ = try service.checkCanSend(clientScheme: clientScheme, queueIfUnavailable: queue)
        let provided = try await source.provide(passphrase: passphrase)
        var credential = try provided.credential(name: name, serialNumber: credentialSerial, expirationDate: expiry)
        if let recoveryKey { credential = try await recovered(into: credential, recoveryKey: recoveryKey) }
        let validator = CredentialValidator(
            trustAnchors: try trust.certificates(), intermediates: provided.chain,
            revocation: try source.revocationPolicy())
        let receipt = try await service.send(
            credential, clientScheme: clientScheme, validator: validator, queueIfUnavailable: queue
        ) { Console.say($0) }
        // Queued for a locked client: knock once, so that it can tell its user a credential
        // waits for an unlock (a notification with an Unlock action). It cannot install it while
        // locked; that refusal is expected and not shown. The delivery stays queued either way.
        if let url = service.ledger.record(receipt.request)?.queuedURL,
            let registration = try? Registrations.read(
                ClientRegistration.self, at: XDGDirectories().clientRegistration(clientScheme))
        {
            _ = try? await SchemeHandlers().open(url, scheme: clientScheme, expectedExecutable: registration.executable)
            Console.say("told the client that a credential waits for its unlock")
        }
    }
}

/// `--trust-anchor FILE`: the CA certificates a credential must chain to, for the commands that
/// validate one (`inspect`, `send`).
struct TrustAnchorOptions: ParsableArguments {
    @Option(
        name: .customLong("trust-anchor"),
        help: ArgumentHelp("A CA certificate the credential must chain to (repeatable).", valueName: "file"))
    var trustAnchors: [String] = []

    /// The certificates of every file given.
    func certificates() throws -> [Certificate] {
        try trustAnchors.flatMap { try CredentialReader().read(file: $0).certificates }
    }
}

/// The provider is not registered, and no flag named what its registration would hold.
private func notRegistered() -> DCError {
    DCError(
        .fileNotFound, "the provider is not registered", subject: ProviderConfig.path(XDGDirectories()),
        hint: "run dcprovision register, or give --brand and --provider-scheme")
}

extension Send {
    /// `credential` with the pairs the source's CA archived for its subject in the escrow key
    /// history (`KeyHistory`'s rule), for a client that lost its store: mail encrypted to its old
    /// keys opens again.
    func recovered(into credential: Credential, recoveryKey: String) async throws -> Credential {
        let (provider, options) = try source.resolve(source.sandbox.registry())
        guard let recovering = provider as? any RecoveringProvider else {
            throw DCError(
                .usage, "provider '\(provider.descriptor.id)' cannot recover archived keys",
                hint: "use a CA that archives: testca init --recovery-cert, or a plug-in that answers recover")
        }
        guard let escrow = credential[.escrow] else {
            throw DCError(
                .usage, "the credential has no escrow entry to carry recovered keys",
                hint: "send a credential with an escrow entry")
        }
        let request = ProviderRequest(
            options: options.merging(["recovery-key": [recoveryKey]]) { $1 }, passphrase: try passphrase.source())
        let pairs = try await recovering.recover(
            request, subject: try CertificateDetails.subjectDER(of: escrow.certificate))
        Console.say("recovered \(pairs.count) archived encryption key(s) for the escrow history")
        return try KeyHistory.credential(
            credential,
            carrying: KeyHistory.merge(escrow.keyHistory + pairs, excluding: credential.entries.map(\.certificate)))
    }
}

struct Status: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Each managed client's policy and acknowledgements, and recent sends with their outcome.")
    @OptionGroup var format: JSONOutputOptions

    /// What `status --json` shows of a ledger record: never its result key.
    struct Send: Encodable {
        var request: RequestID
        var created: Date
        var completed: Date?
        var clientScheme: URLScheme
        var credentialName: String
        var state: String
    }

    /// What `status --json` shows of a managed client.
    struct Client: Encodable {
        var clientId: ClientID
        var clientScheme: URLScheme
        var state: String
        var message: String
        var autoLockSeconds: Int
        /// How programs log in to the client's PKCS#11 token: `passphrase` or `secure-services`.
        var tokenLogin: String
        var policy: UInt64
        /// When the newest policy was opened at the client; absent while it is queued.
        var sent: Date?
        var acknowledgement: Acknowledgement?
        /// `unsupported` until the app acknowledges the secure file I/O policy.
        var secureFileIO: Acknowledgement
    }

    /// An app's acknowledgement, as `status --json` shows it.
    struct Acknowledgement: Encodable {
        var policy: UInt64?
        var state: String
        var message: String
        var time: Date?
        init(_ acknowledgement: PolicyAcknowledgement?) {
            policy = acknowledgement?.sequence
            state = acknowledgement?.state.description ?? PolicyState.unsupported.description
            message = acknowledgement?.message ?? ""
            time = acknowledgement?.time
        }
    }

    /// The whole `status --json` document.
    struct Document: Encodable {
        var clients: [Client]
        var sends: [Send]
    }

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let locations = XDGDirectories()
        let ledger = RequestLedger(directory: locations.stateHome + "/dcprovision/requests")
        let records = ledger.recent()
        let policies =
            (try? ProviderConfig.load(locations)).flatMap {
                try? service(brand: $0.brand, scheme: $0.scheme).policyRecords()
            } ?? []
        if format.json {
            return try printJSON(
                "status",
                Document(
                    clients: policies.map {
                        Client(
                            clientId: $0.clientId, clientScheme: $0.scheme, state: $0.policy.state.description,
                            message: $0.policy.message, autoLockSeconds: $0.policy.autoLock,
                            tokenLogin: $0.policy.tokenLogin.rawValue, policy: $0.policy.sequence, sent: $0.sent,
                            acknowledgement: $0.authAcknowledgement.map { Acknowledgement($0) },
                            secureFileIO: Acknowledgement($0.fileIOAcknowledgement))
                    },
                    sends: records.map {
                        Send(
                            request: $0.request, created: $0.created, completed: $0.completed,
                            clientScheme: $0.clientScheme, credentialName: $0.credentialName,
                            state: $0.state)
                    }))
        }
        for record in policies {
            let policy = record.policy
            let message = policy.message.isEmpty ? "" : " \"\(policy.message.escapingControlCharacters)\""
            let sent = record.sent.map { "sent \($0.formatted(.iso8601))" } ?? "queued"
            let ack =
                record.authAcknowledgement.map {
                    "acknowledged policy \($0.sequence): \($0.state)\($0.message.isEmpty ? "" : " (\($0.message.escapingControlCharacters))")"
                } ?? "not acknowledged"
            let fileIO = record.fileIOAcknowledgement?.state ?? .unsupported
            Console.print(
                "client \(record.clientId) (\(record.scheme):)  \(policy.state)\(message)  policy \(policy.sequence), \(sent); \(ack); secure file I/O: \(fileIO); auto-lock \(policy.autoLock) s; token login: \(policy.tokenLogin)"
            )
        }
        if records.isEmpty { Console.print("no sends yet") }
        for record in records {
            let state = record.state
            let name = record.credentialName.isEmpty ? "-" : record.credentialName.escapingControlCharacters
            Console.print(
                "\(record.created.formatted(.iso8601))  \(record.request)  \(record.clientScheme)  \(name)  \(state)"
            )
        }
    }
}
