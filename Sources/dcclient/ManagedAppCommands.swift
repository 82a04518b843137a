import ArgumentParser
import CommandLineSupport
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    struct Status: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Where the app stands: ready, authorization, secure services, the credential.")
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        /// What `status --json` prints.
        struct View: Encodable {
            var app: String
            var userId: String?
            var ready: Bool
            var authState: String?
            var authMessage: String?
            var secureServices: String
            var secureFileIOPolicy: String?
            var unlocked: Bool
            var autoLockSeconds: Int?
            var policy: UInt64?
            /// Present only while secure services are available.
            var credential: CredentialView?
        }

        func run() async throws {
            let client = try app.client()
            _ = try client.setUpScheme()
            let policy = try client.currentPolicy()
            let available = client.secureServicesAvailability
            let credential = available == .available ? try client.installed() : nil
            let view = View(
                app: client.app.description, userId: client.userID, ready: policy != nil,
                authState: policy?.state.description, authMessage: policy?.message,
                secureServices: available.description,
                secureFileIOPolicy: policy.map { _ in SecureFileIOPolicy.required.description },
                unlocked: client.isUnlocked, autoLockSeconds: policy?.autoLock, policy: policy?.sequence,
                credential: try credential.map {
                    CredentialView(
                        name: $0.name, serialNumber: $0.serialNumber, expirationDate: $0.expirationDate,
                        entries: try $0.entries.map(EntryView.init))
                })
            if format.json { return try printJSON("status", view) }
            Console.print("app:              \(client.app)")
            if let user = client.userID { Console.print("user:             \(user.escapingControlCharacters)") }
            guard let policy else {
                Console.print("ready:            no (no policy from the provider yet)")
                Console.print("unlocked:         \(client.isUnlocked ? "yes" : "no")")
                return
            }
            Console.print("ready:            yes (policy \(policy.sequence))")
            Console.print("authorization:    \(policy.state)")
            if !policy.message.isEmpty {
                Console.print("message:          \(policy.message.escapingControlCharacters)")
            }
            Console.print("secure services:  \(available)\(client.isUnlocked ? "" : " (locked)")")
            Console.print("secure file I/O:  required")
            Console.print("auto-lock:        \(policy.autoLock) s")
            guard available == .available else {
                return Console.print("credential:       not shown while secure services are unavailable")
            }
            guard let credential else { return Console.print("credential:       none installed") }
            Console.print(
                "credential:       \(credential.name.escapingControlCharacters), \(credential.entries.map(\.tag.rawValue).joined(separator: ", ")), expires \(credential.expirationDate.formatted(.iso8601))"
            )
        }
    }

    /// `dcclient pasteboard copy|paste`: the secure pasteboard.
    struct Pasteboard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pasteboard",
            abstract: "The secure pasteboard: text sealed in the store, usable only while secure services are.",
            subcommands: [Copy.self, Paste.self])

        struct Copy: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "copy",
                abstract: "Copy standard input to the secure pasteboard.")
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let pasteboard = try app.client().pasteboard
                let bytes = try BoundedInput.read(nil, limit: SecurePasteboard.maximumLength)
                guard let text = String(validating: bytes, as: UTF8.self) else {
                    throw DCError(.invalid, "the pasteboard takes text (UTF-8)", subject: "standard input")
                }
                try pasteboard.copy(text)
                Console.say("copied \(bytes.count) bytes")
            }
        }

        struct Paste: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "paste",
                abstract: "Write the secure pasteboard's text to standard output.")
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                guard let text = try app.client().pasteboard.paste() else {
                    throw DCError(
                        .fileNotFound, "the pasteboard is empty", hint: "copy first: dcclient pasteboard copy")
                }
                StandardStream.output.write(text)
            }
        }
    }
}

extension DCClient {
    /// `dcclient apps`: the managed apps set up for this user, one container each.
    struct Apps: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "apps",
            abstract: "List the managed apps set up for this user (one container each).")
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var output: OutputOptions

        /// What `apps --json` prints of one app.
        struct View: Encodable {
            var app: String
            var scheme: String?
            var providerScheme: String?
            var authState: String?
            var unlocked: Bool
            var credentialInstalled: Bool
        }

        func run() async throws {
            let apps = ManagedApps()
            let views = try apps.list().map { id in
                let client = apps.client(id)
                return View(
                    app: id.description, scheme: client.scheme?.description,
                    providerScheme: client.providerScheme?.description,
                    authState: (try? client.currentPolicy())??.state.description, unlocked: client.isUnlocked,
                    credentialInstalled: client.hasInstalledCredential)
            }
            if format.json { return try printJSON("apps", views) }
            guard !views.isEmpty else { return Console.print("no managed app is set up") }
            for view in views {
                let state = view.authState ?? "no policy yet"
                Console.print(
                    "\(view.app.padding(toLength: 20, withPad: " ", startingAt: 0)) \((view.scheme ?? "?") + ":")  \(state), \(view.unlocked ? "unlocked" : "locked"), \(view.credentialInstalled ? "credential installed" : "no credential")"
                )
            }
        }
    }
}

extension DCClient {
    /// `dcclient acknowledge [--error TEXT]`: the app's answer to the policy in force, again
    /// (AppConnect's `authStateApplied`): `applied`, or `error` with what the app could not do.
    struct Acknowledge: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "acknowledge",
            abstract: "Answer the provider's policy in force: applied, or --error TEXT when the app could not apply it."
        )
        @Option(
            help: ArgumentHelp(
                "Answer error, with TEXT saying what the app could not do (at most 200 bytes, one line).",
                valueName: "text"))
        var error: String?
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            _ = try client.setUpScheme()
            guard let policy = try client.currentPolicy() else {
                throw DCError(.notReady, "no policy from the provider yet: there is nothing to acknowledge")
            }
            guard let provider = try client.registeredProvider() else {
                throw DCError(.missingClient, "no provider is registered for the client's provider scheme")
            }
            let state: PolicyState = error == nil ? .applied : .error
            try await client.authStateApplied(state, message: error ?? "") { try await client.open($0, at: provider) }
            Console.say("policy \(policy.sequence) (\(policy.state)) acknowledged: \(state)")
        }
    }
}
