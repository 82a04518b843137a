import ArgumentParser
import CommandLineSupport
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import SchemeHandlers
import SystemSupport

@main
struct DCClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcclient",
        abstract: "The reference managed client: receives derived credentials through URL-scheme callbacks.",
        discussion: """
            How do I … set up a client: dcclient init --client-scheme S --provider-scheme P (asks for a new \
            passphrase), then dcclient register; the provider pairs it (dcprovision pair --client-scheme S) and \
            sends, or dcclient request asks. See what came: dcclient list, dcclient show TAG. Use the credential \
            in a browser, ssh or mail: the PKCS#11 module PREFIX/lib/pkcs11/libdcclient-pkcs11.so, registered \
            with p11-kit by scripts/install (Firefox: its SecurityDevices policy; Chromium: modutil -add dcclient \
            -libfile … -dbdir sql:$HOME/.pki/nssdb), logged in to with the store passphrase while unlocked \
            (\(Toolkit.documentation)/docs/PKCS11-MODULE.md). Guide: \(Toolkit.documentation)/README.md. \
            \(Toolkit.exitStatuses)
            """,
        version: Toolkit.version,
        subcommands: [
            Init.self, Register.self, Unregister.self, Request.self, HandleURL.self, List.self, Show.self, Lock.self,
            Unlock.self, Status.self, Files.self, Pasteboard.self, Token.self, SharedUserIDCommand.self, JWT.self,
            Decrypt.self, Check.self, Apps.self, Acknowledge.self, Message.self, NotificationWait.self,
        ])

    /// Flags renamed so that one idea has one name on both tools (docs/CLI.md); the old names
    /// keep working, hidden, for one release.
    static let formerNames = FormerNames([
        "init": ["scheme": "client-scheme"],
        "jwt": ["client-id": "audience"],
        // A flag that became a value: --pem is --format=pem.
        "show": ["pem": "format=pem"],
    ])

    static func main() async {
        await Tool.main(Self.self, name: "dcclient", formerNames: formerNames, urlHandler: HandleURL.self)
    }
}

/// The error for a command that needs the client's passphrase and was given none.
func passphraseRequired() -> DCError {
    DCError(
        .passphraseRequired, "the client's passphrase is needed",
        hint: "pass --passphrase-file FILE or --passphrase-fd N")
}

/// How `init` and `unlock` ask for the client's passphrase when no option gave it: on the
/// terminal, else through a pinentry (docs/CLI.md).
func clientPassphraseQuestion(new: Bool, scheme: URLScheme?, providerScheme: URLScheme?) -> InteractivePassphrase {
    let client = "the managed client \(scheme.map { "\($0)" } ?? "dcclient")"
    let provider = providerScheme.map { " of the provider \($0)" } ?? ""
    return InteractivePassphrase(
        title: "dcclient",
        description: { _ in
            new
                ? "Choose a passphrase for the encrypted store of \(client)\(provider) "
                    + "(at least \(DCClient.Init.minimumPassphraseLength) characters)."
                : "Enter the passphrase of \(client)\(provider) to unlock its store."
        }, confirming: new)
}

/// The error for a command that needs a client that `dcclient init` has not set up.
func notSetUp() -> DCError {
    DCError(
        .fileNotFound, "the client is not set up",
        hint: "run dcclient init --client-scheme SCHEME --provider-scheme SCHEME --passphrase-file FILE")
}

extension ManagedClient {
    /// The client's own scheme, or the error that says to run `dcclient init`.
    func setUpScheme() throws -> URLScheme {
        guard let scheme else { throw notSetUp() }
        return scheme
    }

    /// The provider the client is set up with and the registration it published; nil when the
    /// client has no provider or the provider published none.
    func registeredProvider() throws -> RegisteredProvider? {
        guard let scheme = providerScheme,
            let registration = try Registrations.read(
                ProviderRegistration.self, at: locations.providerRegistration(scheme))
        else { return nil }
        return RegisteredProvider(scheme: scheme, registration: registration)
    }

    /// Opens `url` with the handler `provider` registered for its scheme (refusing a hijacker),
    /// forwarding its output unless `--quiet`.
    func open(_ url: String, at provider: RegisteredProvider) async throws {
        try await SchemeHandlers().openForwardingOutput(
            url, scheme: provider.scheme, expectedExecutable: provider.registration.executable,
            passingStandardOutput: !Console.isQuiet)
    }
}

/// A provider's scheme and the registration it published: where the client's messages go.
struct RegisteredProvider {
    let scheme: URLScheme
    let registration: ProviderRegistration
}

extension DCClient {
    struct Init: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Set up the client: keys, the encrypted store, the registration.")
        @Option(help: ArgumentHelp("This client's URL scheme (reverse DNS, no digits).", valueName: "scheme"))
        var clientScheme: URLScheme
        @Option(help: ArgumentHelp("The provider's URL scheme (where requests and results go).", valueName: "scheme"))
        var providerScheme: URLScheme
        @Option(
            help: ArgumentHelp(
                "CA certificates a delivered credential must chain to (PEM or DER); repeatable.", valueName: "file"))
        var trustAnchor: [String] = []
        @Option(
            help: ArgumentHelp(
                "The new app's id, its container's name and client id (default: $DCCLIENT_APP, else dcclient).",
                valueName: "id"))
        var app: ClientID?
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var output: OutputOptions
        /// The fewest characters a new store's passphrase may have.
        static let minimumPassphraseLength = 8

        func run() async throws {
            let apps = ManagedApps()
            // A new app is the one named (--app, else the variable) or the default one, never
            // "the only app there is".
            let named = ProcessInfo.processInfo.environment[ManagedApps.environmentVariable] ?? ""
            let chosen = try apps.choose(app ?? (named.isEmpty ? ManagedApps.defaultApp : nil))
            // A URL finds its app by scheme: two apps cannot share one.
            if let owner = try apps.app(forScheme: clientScheme), owner.app != chosen.app {
                throw DCError(
                    .outputExists, "the scheme \(clientScheme): is the app \(owner.app)'s already",
                    hint: "give this app a scheme of its own")
            }
            // Refused before anyone is asked to choose a passphrase.
            try chosen.checkNotSetUp()
            // A new store's passphrase must have some length; unlocking an existing store takes
            // whatever passphrase it was made with.
            let question = clientPassphraseQuestion(new: true, scheme: clientScheme, providerScheme: providerScheme)
            let secret = try passphrase.read(asking: question, for: "\(clientScheme)", orThrow: passphraseRequired()) {
                guard SecretInput.characterCount($0) >= Self.minimumPassphraseLength else {
                    throw DCError(
                        .usage,
                        "the passphrase for a new store is shorter than \(Self.minimumPassphraseLength) characters",
                        hint: "choose a longer one")
                }
            }
            try chosen.initialize(
                scheme: clientScheme, providerScheme: providerScheme,
                executable: Tool.executablePath,
                passphrase: secret,
                trustAnchors: trustAnchor.flatMap { try CredentialReader().read(file: $0).certificates })
            Console.say("app \(chosen.app) set up; registration published; unlocked")
        }
    }

    struct Register: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "register",
            abstract: "Register this client as the handler of its scheme and publish its registration.",
            discussion: """
                If the provider is registered already, its signing key is pinned now (otherwise at the first \
                dcclient request); deliveries are installed only when signed with the pinned key.
                """)
        @Flag(help: "Forget the pinned provider key and pin the one the provider's registration shows now.")
        var repinProvider = false
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            let scheme = try client.setUpScheme()
            // All or nothing: a step that fails puts back the pin, the registration and the handler.
            try Rollback.allOrNothing { rollback in
                let handlers = SchemeHandlers()
                for path in try client.registrationFiles + handlers.registrationFiles(scheme: scheme) {
                    rollback.keep(path)
                }
                if repinProvider { try client.forgetProvider() }
                try client.publishRegistration(executable: Tool.executablePath)
                try handlers.register(
                    scheme: scheme, executable: Tool.executablePath, name: "dcclient (managed client)")
            }
            Console.say("registered as the handler of \(scheme):")
        }
    }

    struct Unregister: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "unregister",
            abstract: "Remove this client's scheme handler and its registration (the store stays).")
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            let scheme = try client.setUpScheme()
            // All or nothing: a step that fails puts back the handler's files and the registration.
            try Rollback.allOrNothing { rollback in
                let handlers = SchemeHandlers()
                for path in try client.registrationFiles + handlers.registrationFiles(scheme: scheme) {
                    rollback.keep(path)
                }
                try handlers.unregister(scheme: scheme)
                try client.withdrawRegistration()
            }
            Console.say("unregistered \(scheme): (registration withdrawn; dcclient register brings it back)")
        }
    }

    struct Request: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "request",
            abstract: "Ask the provider for a credential (opens <provider-scheme>:/new…).")
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            // All or nothing until the URL goes out: a provider key pinned for this request is
            // unpinned again when the request cannot be made.
            let (url, provider) = try Rollback.allOrNothing { rollback in
                for path in try client.registrationFiles { rollback.keep(path) }
                let (url, providerScheme) = try client.requestURL()
                guard let provider = try client.registeredProvider() else {
                    throw DCError(
                        .missingClient, "no provider is registered for \(providerScheme):",
                        hint:
                            "register one (dcprovision register --provider-scheme \(providerScheme) …), then ask again"
                    )
                }
                return (url, provider)
            }
            Console.say("requesting: \(url)")
            try await client.open(url, at: provider)
        }
    }

    struct HandleURL: URLHandlingCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "handle-url",
            abstract: "The x-scheme-handler entry point (deliveries, policies and auth-token delegations).")
        @Argument var url: String
        @Flag(help: "Install the delivery even if it is older than the installed credential (a rollback).")
        var allowOlder = false
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            try await Self.handle(url, allowOlder: allowOlder, client: app.app == nil ? nil : try app.client())
        }

        static func handle(url: String) async throws { try await handle(url, allowOlder: false, client: nil) }

        /// Handles `url` with the library's scheme handler, which answers the provider; prints what
        /// it did before the provider's handler prints anything, and how the answer went after.
        /// The URL's scheme names the app it is for (each app has its own); `client`, when the
        /// user named an app, must be that one.
        static func handle(_ url: String, allowOlder: Bool, client named: ManagedClient?) async throws {
            let scheme = url.split(separator: ":", maxSplits: 1).first.flatMap { URLScheme(validating: String($0)) }
            guard let scheme, let client = try ManagedApps().app(forScheme: scheme) else {
                throw DCError(
                    .fileNotFound, "no managed app here has the URL's scheme",
                    subject: String(url.prefix(64)).escapingControlCharacters,
                    hint: "set one up with dcclient init --client-scheme SCHEME")
            }
            if let named, named.app != client.app {
                throw DCError(
                    .usage, "the URL is for the app \(client.app), not \(named.app)", subject: scheme.description)
            }
            let outcome: ManagedClient.URLOutcome
            do {
                outcome = try await client.handle(
                    url: url, allowOlder: allowOlder, forwardingOutput: !Console.isQuiet,
                    whenHandled: { Console.say(report($0)) })
            } catch let error as DCError {
                ClientNotifications.locked(error, url: url, app: client.app)
                throw error
            }
            for line in report(outcome) { Console.say(line) }
            ClientNotifications.handled(outcome, app: client.app)
        }

        /// The line that says what the client did with a URL.
        static func report(_ handled: ManagedClient.HandledURL) -> String {
            switch handled {
            case .delegation(let delegation):
                return
                    "dcclient: auth-token delegation \(delegation.claims.id) kept, valid until \(Date(timeIntervalSince1970: TimeInterval(delegation.claims.expires)).formatted(.iso8601))"
            case .delivery(let handled) where handled.replay:
                return
                    "dcclient: request \(handled.request) was already handled (\(handled.status)); not installed again"
            case .delivery(let handled):
                return
                    "dcclient: received request \(handled.request): \(handled.status == .ok ? "installed \"\(handled.credentialName ?? "")\"" : "rejected (\(handled.status))")"
            case .policy(let update):
                // As the reference app, dcclient supports secure file I/O and applies every state.
                let policy = update.policy
                let why = policy.message.isEmpty ? "" : ": \(policy.message.escapingControlCharacters)"
                return update.repeated
                    ? "dcclient: policy \(policy.sequence) again (\(policy.state)); acknowledging it again"
                    : "dcclient: policy \(policy.sequence): \(policy.state)\(why)"
            }
        }

        /// The lines that say how the provider was answered, after its handler's own.
        static func report(_ outcome: ManagedClient.URLOutcome) -> [String] {
            guard case .policy(let update) = outcome.handled, outcome.answer != .noProvider else { return [] }
            var lines: [String] = []
            if outcome.answer == .awaitsUnlock {
                lines.append(
                    update.policy.state == .retired
                        ? "dcclient: locked, so no acknowledgement could be signed; the provider shows it unacknowledged"
                        : "dcclient: applied; the acknowledgement waits until the client is unlocked")
            }
            if outcome.erased { lines.append("dcclient: retired: keys, credential and secure files erased") }
            return lines
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

    struct List: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the installed credential's entries (never key material).")
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let installed = try app.client().installed()
            if format.json {
                let view = try installed.map {
                    CredentialView(
                        name: $0.name, serialNumber: $0.serialNumber, expirationDate: $0.expirationDate,
                        entries: try $0.entries.map(EntryView.init))
                }
                return try printJSON("credential", view)
            }
            guard let credential = installed else {
                Console.print("no credential installed")
                return
            }
            Console.print(
                "\(credential.name.escapingControlCharacters)  serial \(credential.serialNumber.escapingControlCharacters)  expires \(credential.expirationDate.formatted(.iso8601))"
            )
            for entry in credential.entries {
                let details = try CertificateDetails(entry.certificate)
                let history = entry.keyHistory.isEmpty ? "" : "  (+\(entry.keyHistory.count) retired)"
                Console.print(
                    "  \(entry.tag.rawValue.padding(toLength: 15, withPad: " ", startingAt: 0)) \(details.keyAlgorithm.padding(toLength: 9, withPad: " ", startingAt: 0)) \(details.subject.escapingControlCharacters)\(history)"
                )
            }
        }
    }

    struct Show: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show one entry's certificate details (never key material).")
        @Argument(help: "authentication, signing, encryption or escrow.") var tag: CredentialTag
        @Option(
            help: ArgumentHelp(
                "text (the details), or pem: the certificate to give to correspondents (never the key).",
                valueName: "format"))
        var format: ShowFormat = .text
        @OptionGroup var json: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        /// `--format`: what `show` prints.
        enum ShowFormat: String, ExpressibleByArgument, CaseIterable {
            case text, pem
        }

        func run() async throws {
            let client = try app.client()
            guard let entry = try client.installed()?[tag] else {
                throw DCError(
                    .fileNotFound, "no \(tag) entry installed", hint: "see what is installed with dcclient list")
            }
            if format == .pem {
                guard !json.json else { throw DCError(.usage, "give --format pem or --json, not both") }
                // Handing a certificate out is using the credential: not when it has lapsed.
                _ = try client.usableCredential()
                // PEM is base64 and its armor lines: nothing to escape.
                _ = PEM.certificate(entry.certificate).withUnsafeBytes { StandardStream.output.write(bytes: $0) }
                return
            }
            if json.json { return try printJSON("entry", try EntryView(entry)) }
            let details = try CertificateDetails(entry.certificate)
            Console.print(
                "tag:          \(tag)\nsubject:      \(details.subject.escapingControlCharacters)\nissuer:       \(details.issuer.escapingControlCharacters)\nserial:       \(details.serialNumber)\nkey:          \(details.keyAlgorithm)\nkey usage:    \((details.keyUsage?.names ?? []).joined(separator: ", "))\npurposes:     \((details.extendedKeyUsageNames ?? []).joined(separator: ", "))\npolicies:     \((details.certificatePolicies ?? []).map(\.name).joined(separator: ", "))\nnot after:    \(details.notAfter?.formatted(.iso8601) ?? "?")\nsha256:       \(details.sha256Fingerprint)\nkey history:  \(entry.keyHistory.count) retired pair(s)"
            )
        }
    }

    struct Lock: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "lock",
            abstract: "Make secure services unavailable (destroys the unlocked store key).")
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            try app.client().lock()
            Console.say("locked")
        }
    }

    struct Unlock: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "unlock", abstract: "Make secure services available.")
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            let question = clientPassphraseQuestion(
                new: false, scheme: client.scheme, providerScheme: client.providerScheme)
            _ = try passphrase.read(
                asking: question, for: client.scheme.map { "\($0)" } ?? "dcclient", orThrow: passphraseRequired(),
                ready: { _ = try client.setUpScheme() }, check: { try client.unlock(passphrase: $0) })
            Console.say("unlocked")
            // The availability notification: queued deliveries may come now.
            guard client.providerScheme != nil, let url = try client.availabilityURL(),
                let provider = try client.registeredProvider()
            else { return }
            Console.say("announcing: \(url)")
            try await client.open(url, at: provider)
        }
    }
}
