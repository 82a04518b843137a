import ArgumentParser
import CommandLineSupport
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// What `handle-url` does once a policy (`<scheme>:/policy…`) was applied: acknowledges it
    /// as the reference app (it supports secure file I/O and applies every state); a retired
    /// client is erased once the acknowledgement went out.
    static func acknowledge(_ update: ManagedClient.PolicyUpdate, client: ManagedClient) async throws {
        let policy = update.policy
        let why = policy.message.isEmpty ? "" : ": \(policy.message.escapingControlCharacters)"
        Console.say(
            update.repeated
                ? "dcclient: policy \(policy.sequence) again (\(policy.state)); acknowledging it again"
                : "dcclient: policy \(policy.sequence): \(policy.state)\(why)")
        guard let provider = try client.registeredProvider() else {
            if policy.state == .retired { try client.eraseEverything() }
            return
        }
        let send: (String) async throws -> Void = { try await client.open($0, at: provider) }
        do {
            if policy.state != .retired, update.becameReady || update.repeated {
                try await client.secureFileIOPolicyApplied(.applied, send: send)
            }
            try await client.authStateApplied(.applied, send: send)
        } catch DCError.Code.serviceUnavailable where policy.state == .retired {
            // Locked: the acknowledgement cannot be signed, and the erasure does not wait for an
            // unlock (authStateApplied erased everything before it threw). The provider keeps
            // showing the retire as not acknowledged, and sends this client nothing either way.
            Console.say("dcclient: locked, so no acknowledgement could be signed; the provider shows it unacknowledged")
        } catch DCError.Code.serviceUnavailable {
            // Locked: the acknowledgement cannot be signed now. The provider sends the policy
            // again when the client announces availability (dcclient unlock).
            Console.say("dcclient: applied; the acknowledgement waits until the client is unlocked")
        }
        if policy.state == .retired { Console.say("dcclient: retired: keys, credential and secure files erased") }
    }

    struct Status: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Where the app stands: ready, authorization, secure services, the credential.")
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var output: OutputOptions

        /// What `status --json` prints.
        struct View: Encodable {
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
            let client = ManagedClient()
            _ = try client.setUpScheme()
            let policy = try client.currentPolicy()
            let available = client.secureServicesAvailability
            let credential = available == .available ? try client.installed() : nil
            let view = View(
                ready: policy != nil, authState: policy?.state.description, authMessage: policy?.message,
                secureServices: available.description,
                secureFileIOPolicy: policy.map { _ in SecureFileIOPolicy.required.description },
                unlocked: client.isUnlocked, autoLockSeconds: policy?.autoLock, policy: policy?.sequence,
                credential: try credential.map {
                    CredentialView(
                        name: $0.name, serialNumber: $0.serialNumber, expirationDate: $0.expirationDate,
                        entries: try $0.entries.map(EntryView.init))
                })
            if format.json { return try printJSON("status", view) }
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
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let pasteboard = ManagedClient().pasteboard
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
            @OptionGroup var output: OutputOptions

            func run() async throws {
                guard let text = try ManagedClient().pasteboard.paste() else {
                    throw DCError(
                        .fileNotFound, "the pasteboard is empty", hint: "copy first: dcclient pasteboard copy")
                }
                StandardStream.output.write(text)
            }
        }
    }
}
