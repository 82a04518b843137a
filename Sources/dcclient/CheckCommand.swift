import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// `dcclient check`: every certificate's remaining lifetime, its revocation status when asked,
    /// and, when the credential ends within the window, the renewal request (the authenticated
    /// `new`, as `dcclient request` sends it). Run daily by the `dcclient-check` systemd user timer.
    struct Check: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Report the installed credential's remaining lifetime; ask for a renewal when it is due.",
            discussion: """
                Exit status: 0 when the credential can be used (a renewal asked for, if due), 80 when its \\
                expiration date has passed or its authentication or signing certificate has expired or is \\
                not valid yet (a renewal is asked for too, with --renew-within), 79 when --crl/--ocsp find a \\
                certificate revoked, 75 when its status cannot be had (unless --allow-unchecked-revocation); \\
                locked 69, not authorized 77.
                """)
        @Option(
            help: ArgumentHelp(
                "Ask the provider for a renewal when a certificate ends within DAYS days (0-3650; the report's window is 30 without it).",
                valueName: "days"))
        var renewWithin: Int?
        @OptionGroup(title: "Revocation") var revocation: RevocationOptions
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        /// What `check --json` prints.
        struct Report: Encodable {
            var lifetime: CredentialLifetime
            var usable: Bool
            var renewalDue: Bool
            var renewalRequested: Bool
            var revocation: [Revocation]
        }

        /// One certificate's revocation status in `check --json`.
        struct Revocation: Encodable {
            var tag: CredentialTag
            var serialNumber: String
            var status: String
            var detail: String
        }

        func validate() throws {
            if let renewWithin, !(0...3650).contains(renewWithin) {
                throw ValidationError("--renew-within is a number of days, 0 to 3650")
            }
        }

        func run() async throws {
            let client = try app.client()
            let window = TimeInterval(renewWithin ?? 30) * 86400
            guard let credential = try client.installed() else {
                throw DCError(
                    .fileNotFound, "no credential installed", hint: "ask the provider for one: dcclient request")
            }
            var lifetime = try CredentialLifetime(credential, now: Date(), window: window)
            let renewalDue = lifetime.renewalDue
            var requested = false
            var current = credential
            if renewalDue && renewWithin != nil {
                let (url, providerScheme) = try client.requestURL()
                guard let provider = try client.registeredProvider() else {
                    throw DCError(
                        .missingClient, "a renewal is due and no provider is registered for \(providerScheme):",
                        hint: "register one (dcprovision register --provider-scheme \(providerScheme) …)")
                }
                Console.say("renewal due: requesting \(url)")
                try await client.open(url, at: provider)
                requested = true
                // A provider that answers at once has installed the new credential by now: report that one.
                if let renewed = try client.installed(),
                    renewed.serialNumber != credential.serialNumber
                        || renewed.entries.map(\.certificate) != credential.entries.map(\.certificate)
                {
                    Console.say("renewed: \(renewed.name.escapingControlCharacters) is installed")
                    current = renewed
                    lifetime = try CredentialLifetime(renewed, now: Date(), window: window)
                }
            }
            var statuses: [(CredentialTag, String, RevocationStatus)] = []
            if let policy = try revocation.policy() {
                // The issuers are the client's trust anchors (dcclient init --trust-anchor).
                let issuers = try client.trustAnchors()
                for entry in current.entries {
                    let state = lifetime.certificates.first { $0.tag == entry.tag && $0.historyIndex == nil }?.state
                    if state == .expired { continue }
                    statuses.append(
                        (
                            entry.tag, try CertificateDetails(entry.certificate).serialNumber,
                            policy.status(of: entry.certificate, issuers: issuers)
                        ))
                }
            }
            let usable = lifetime.usable
            if format.json {
                try printJSON(
                    "check",
                    Report(
                        lifetime: lifetime, usable: usable, renewalDue: renewalDue, renewalRequested: requested,
                        revocation: statuses.map { tag, serial, status in
                            Revocation(
                                tag: tag, serialNumber: serial,
                                status: {
                                    switch status {
                                    case .good: "good"
                                    case .revoked: "revoked"
                                    case .unknown: "unknown"
                                    }
                                }(), detail: status.description)
                        }))
            } else {
                print(lifetime, statuses: statuses, due: renewalDue)
            }
            // Revoked first, then unknown (when required), then expiry: the most severe decides.
            for (tag, _, status) in statuses {
                if case .revoked = status { throw DCError(.certificateRevoked, "the \(tag) certificate is \(status)") }
            }
            if let policy = try revocation.policy() {
                for (tag, _, status) in statuses { try policy.require(status, for: "the \(tag) certificate") }
            }
            // The client's one rule: each certificate's validity, then the credential's expiration date.
            try lifetime.requireUsable()
        }

        private func print(
            _ lifetime: CredentialLifetime, statuses: [(CredentialTag, String, RevocationStatus)], due: Bool
        ) {
            let left = Int(lifetime.expirationDate.timeIntervalSince(lifetime.checked).rounded(.down))
            Console.print(
                "\("credential".padding(toLength: 20, withPad: " ", startingAt: 0)) \(lifetime.credentialState.rawValue.padding(toLength: 14, withPad: " ", startingAt: 0)) until \(lifetime.expirationDate.formatted(.iso8601)) (\(left >= 0 ? "\(left / 86400) days left" : "ended \(-left / 86400) days ago"))  its expiration date"
            )
            for certificate in lifetime.certificates {
                let place =
                    certificate.historyIndex.map { "\(certificate.tag) history \($0)" } ?? certificate.tag.rawValue
                let remaining = certificate.remainingSeconds.map { seconds in
                    seconds >= 0 ? "\(seconds / 86400) days left" : "ended \(-seconds / 86400) days ago"
                }
                Console.print(
                    "\(place.padding(toLength: 20, withPad: " ", startingAt: 0)) \(certificate.state.rawValue.padding(toLength: 14, withPad: " ", startingAt: 0)) until \(certificate.notAfter?.formatted(.iso8601) ?? "?") (\(remaining ?? "?"))  \(certificate.subject.escapingControlCharacters)"
                )
            }
            for (tag, serial, status) in statuses {
                Console.print("revocation \(tag) \(serial): \(status)".escapingControlCharacters)
            }
            let days = renewWithin ?? 30
            switch (due, renewWithin != nil) {
            case (false, _): Console.print("renewal: not due (nothing ends within \(days) days)")
            case (true, true): Console.print("renewal: due (a certificate ends within \(days) days): requested")
            case (true, false):
                Console.print("renewal: due (a certificate ends within \(days) days); --renew-within DAYS asks for it")
            }
        }
    }
}
