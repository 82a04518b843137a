import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// `dcclient check`: every certificate's remaining lifetime, its revocation status when asked,
    /// and, when the credential ends within the window, the renewal request (the authenticated
    /// `new`, as `dcclient request` sends it). With no app named (`--app`, `DCCLIENT_APP`) it checks
    /// every app set up, each in turn, one app's failure stopping none of the others. Run daily by
    /// the `dcclient-check` systemd user timer.
    struct Check: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Report the installed credential's remaining lifetime; ask for a renewal when it is due.",
            discussion: """
                With no app named (--app, DCCLIENT_APP), every app set up is checked in turn, each under an \\
                "app ID:" line (with --json, a "checks" document of one entry per app); an app that fails is \\
                said on standard error and the others are still checked. \\
                Exit status: 0 when the credential can be used (a renewal asked for, if due), 80 when its \\
                expiration date has passed or its authentication or signing certificate has expired or is \\
                not valid yet (a renewal is asked for too, with --renew-within), 79 when --crl/--ocsp find a \\
                certificate revoked, 75 when its status cannot be had (unless --allow-unchecked-revocation); \\
                locked 69, not authorized 77. Of several apps, the worst: 79 if any is revoked, else 80 if \\
                any has expired, else the first failing app's status.
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

        /// One app's entry in the `checks` document that `check --json` prints for several apps:
        /// its report, or the error that kept it from one; and the status it alone would exit with.
        struct AppCheck: Encodable {
            var app: String
            var report: Report?
            var error: String?
            var exitStatus: Int32
        }

        /// What one app's check found: the report, its revocation statuses, and the failure it
        /// exits with (nil when the credential can be used).
        struct Outcome {
            var report: Report
            var statuses: [(CredentialTag, String, RevocationStatus)]
            var failure: DCError?
        }

        func validate() throws {
            if let renewWithin, !(0...3650).contains(renewWithin) {
                throw ValidationError("--renew-within is a number of days, 0 to 3650")
            }
        }

        func run() async throws {
            let clients = try app.clients()
            if clients.count == 1 {
                let outcome = try await check(clients[0])
                if format.json {
                    try printJSON("check", outcome.report)
                } else {
                    print(outcome.report.lifetime, statuses: outcome.statuses, due: outcome.report.renewalDue)
                }
                if let failure = outcome.failure { throw failure }
                return
            }
            var checks: [AppCheck] = []
            var failures: [DCError] = []
            for client in clients {
                if !format.json { Console.print("app \(client.app):") }
                do {
                    let outcome = try await check(client)
                    if !format.json {
                        print(outcome.report.lifetime, statuses: outcome.statuses, due: outcome.report.renewalDue)
                    }
                    if let failure = outcome.failure {
                        Console.error("\(client.app): " + failure.description)
                        failures.append(failure)
                    }
                    checks.append(
                        AppCheck(
                            app: client.app.description, report: outcome.report,
                            error: outcome.failure.map { $0.description },
                            exitStatus: outcome.failure?.code.category.exitStatus ?? 0))
                } catch {
                    // One app's failure (locked, nothing installed, not authorized) stops none of the others.
                    let failure =
                        error as? DCError
                        ?? DCError(.unknown, "the check failed", underlying: error)
                    Console.error("\(client.app): " + failure.description)
                    failures.append(failure)
                    checks.append(
                        AppCheck(
                            app: client.app.description, report: nil,
                            error: failure.description,
                            exitStatus: failure.code.category.exitStatus))
                }
            }
            if format.json { try printJSON("checks", checks) }
            if let worst = Self.worst(failures) { throw ExitCode(worst.code.category.exitStatus) }
        }

        /// The failure several apps' check exits with: a revoked certificate first, then an expired
        /// credential, then the first app's failure (in id order).
        static func worst(_ failures: [DCError]) -> DCError? {
            failures.first { $0.code.category == .revoked } ?? failures.first { $0.code.category == .expired }
                ?? failures.first
        }

        /// Checks the app `client` serves: its lifetime, the renewal when due and asked for, the
        /// revocation statuses; tells the desktop what it found. Throws when there is nothing to
        /// report on (locked, nothing installed).
        func check(_ client: ManagedClient) async throws -> Outcome {
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
            let policy = try revocation.policy()
            if let policy {
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
            ClientNotifications.checked(lifetime, renewalRequested: requested, app: client.app)
            let report = Report(
                lifetime: lifetime, usable: lifetime.usable, renewalDue: renewalDue, renewalRequested: requested,
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
                })
            return Outcome(report: report, statuses: statuses, failure: Self.failure(lifetime, statuses, policy))
        }

        /// What a check exits with, the most severe first: a revoked certificate, then an unknown
        /// status (when required), then the client's one rule of use (each certificate's validity,
        /// then the credential's expiration date). Nil when the credential can be used.
        static func failure(
            _ lifetime: CredentialLifetime, _ statuses: [(CredentialTag, String, RevocationStatus)],
            _ policy: RevocationPolicy?
        ) -> DCError? {
            for (tag, _, status) in statuses {
                if case .revoked = status { return DCError(.certificateRevoked, "the \(tag) certificate is \(status)") }
            }
            do {
                if let policy {
                    for (tag, _, status) in statuses { try policy.require(status, for: "the \(tag) certificate") }
                }
                try lifetime.requireUsable()
                return nil
            } catch let error as DCError {
                return error
            } catch {
                return DCError(.unknown, "the check failed", underlying: error)
            }
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
