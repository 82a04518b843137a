import ArgumentParser
import CommandLineSupport
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import SystemSupport

/// What dcclient tells the desktop (docs/CLI.md, "Desktop notifications"): the library reports
/// events and outcomes, and this maps them to notifications, so ManagedClient knows nothing of
/// D-Bus. Everything here is best effort: notifications off, no session bus, no libdbus, no
/// server, or a desktop settings file that does not parse, and nothing is shown and nothing fails.
///
/// What goes into a notification is what a terminal would show anyway: the authorization state
/// and the provider's message, a credential's name and dates. Never a secret
/// (`DesktopNotification`'s rule); URLs stay out of the text.
enum ClientNotifications {
    static let appName = "dcclient"
    /// How long a notification that asks for an unlock stays, and its waiter waits: as long as
    /// a delivery's request id is good (`ManagedClient.requestTimeLimit`).
    static let unlockLifetime: Duration = .seconds(Int64(ManagedClient.requestTimeLimit))

    /// The desktop settings, or nil when their file does not parse (then nothing is posted: a
    /// setting the user wrote and we could not read may have turned notifications off).
    static func settings() -> DesktopSettings? { try? DesktopSettings.load() }

    /// Posts `notification` and lets go of it; nothing when notifications cannot be posted.
    static func post(_ notification: DesktopNotification) {
        guard let settings = settings() else { return }
        DesktopNotifications.post(notification, appName: appName, settings: settings)
    }

    /// The notification for the authorization state `policy` states.
    static func authorization(_ policy: ClientPolicy, app: ClientID) -> DesktopNotification {
        let message = policy.message
        switch policy.state {
        case .authorized:
            return DesktopNotification(
                summary: "\(app) is authorized",
                body: message.isEmpty ? "The provider authorized this app: its credential can be used." : message,
                icon: "dialog-information")
        case .unauthorized:
            return DesktopNotification(
                summary: "\(app) is not authorized",
                body: message.isEmpty ? "The provider withdrew this app's authorization." : message,
                urgency: .critical, icon: "dialog-warning")
        case .retired:
            return DesktopNotification(
                summary: "\(app) was retired",
                body: (message.isEmpty ? "" : message + "\n") + "Its keys, credential and secure files were erased.",
                urgency: .critical, icon: "dialog-warning")
        }
    }

    /// Tells what `handle-url` did: a credential installed or renewed, the authorization state
    /// changed; a policy whose acknowledgement waits for an unlock is offered an Unlock action.
    static func handled(_ outcome: ManagedClient.URLOutcome, app: ClientID) {
        switch outcome.handled {
        case .delivery(let handled) where !handled.replay && handled.status == .ok:
            let name = handled.credentialName ?? "the credential"
            post(
                DesktopNotification(
                    summary: handled.installedSequence == nil ? "Credential installed" : "Credential renewed",
                    body: "\(app) installed \"\(name)\".", icon: "dialog-information"))
        case .policy(let update) where outcome.answer == .awaitsUnlock && update.policy.state != .retired:
            let note = authorization(update.policy, app: app)
            askToUnlock(
                summary: update.authChanged ? note.summary : "\(app) waits for an unlock",
                body: (update.authChanged ? note.body + "\n" : "")
                    + "Unlock \(app) to acknowledge the provider's policy.",
                replaying: nil, app: app)
        case .policy(let update) where update.authChanged:
            post(authorization(update.policy, app: app))
        default:
            break
        }
    }

    /// Tells that `handle-url` could not take the delivery `url` because the client of `app` is
    /// locked (`error`), offering an Unlock action whose waiter unlocks and hands the URL over again.
    static func locked(_ error: DCError, url: String, app: ClientID) {
        guard error.code == .serviceUnavailable, error.remedy == .unlockClient,
            url.contains(":/deliver?")
        else { return }
        askToUnlock(
            summary: "A credential waits for an unlock",
            body: "Unlock \(app) to install the credential the provider sent.", replaying: url, app: app)
    }

    /// Tells what `check` found for `app`: its credential expired or unusable, or ending within
    /// the window. Each notification names the app: a daily check of several apps posts one per app.
    static func checked(_ lifetime: CredentialLifetime, renewalRequested: Bool, app: ClientID) {
        let days = Int(lifetime.expirationDate.timeIntervalSince(lifetime.checked) / 86400)
        if !lifetime.usable {
            post(
                DesktopNotification(
                    summary: "\(app): the credential cannot be used",
                    body: "It expired or a certificate is outside its validity."
                        + (renewalRequested
                            ? " A renewal was requested." : " Ask for a new one: dcclient request --app \(app)."),
                    urgency: .critical, icon: "dialog-warning"))
        } else if lifetime.renewalDue {
            post(
                DesktopNotification(
                    summary: "\(app): the credential expires soon",
                    body:
                        "A certificate ends within \(Int(lifetime.window / 86400)) days; the credential's expiration date is in \(days) days."
                        + (renewalRequested
                            ? " A renewal was requested."
                            : " Renew it: dcclient check --app \(app) --renew-within 30."),
                    icon: "dialog-warning"))
        }
    }

    /// Starts the detached waiter (`dcclient notification-wait`) that posts the notification
    /// `summary`/`body` with an Unlock action and, when it is invoked, unlocks `app` (then hands
    /// `replaying` to `handle-url` again). The waiter posts it itself: a notification server sends
    /// the action to the connection that posted. Nothing when notifications cannot be posted.
    static func askToUnlock(summary: String, body: String, replaying url: String?, app: ClientID) {
        // The toolkit's short list and the desktop's addresses (for the unlock's pinentry).
        let environment = ChildEnvironment.desktop()
        guard let settings = settings(), DesktopNotifications.mayPost(settings: settings, environment: environment)
        else { return }
        // `--name=value`: a provider's message that starts with "-" stays a value.
        var arguments = ["notification-wait", "--app=\(app)", "--summary=" + summary, "--body=" + body]
        if let url { arguments += ["--replay=" + url] }
        _ = try? ChildProcess.startDetached(Tool.executablePath, arguments: arguments, environment: environment)
    }

}

extension DCClient {
    /// `dcclient message [--show]`: the authorization message (AppConnect's
    /// `displayMessage:withCompletion:`), printed, and with `--show` posted as a notification.
    struct Message: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "message",
            abstract: "Print the authorization state and the provider's message; --show posts it as a notification.")
        @Flag(help: "Also show it as a desktop notification (when notifications are on and a server runs).")
        var show = false
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            _ = try client.setUpScheme()
            // policyNotReady (exit 69) before the provider's first policy.
            _ = try client.authState
            guard let policy = try client.currentPolicy() else { return }
            Console.print(
                policy.message.isEmpty
                    ? "\(policy.state)" : "\(policy.state): \(policy.message.escapingControlCharacters)"
            )
            guard show else { return }
            // A settings file the user wrote wrong is said here, where they asked for a notification.
            let settings = try DesktopSettings.load()
            DesktopNotifications.post(
                ClientNotifications.authorization(policy, app: client.app), appName: ClientNotifications.appName,
                settings: settings)
        }
    }

    /// `dcclient notification-wait` (hidden; `handle-url` starts it, detached): posts a
    /// notification with an Unlock action and waits for it as long as it lasts. Invoked, it
    /// unlocks (`dcclient unlock`, unless the client is unlocked already) and then hands the
    /// delivery it was given to `dcclient handle-url` again; the unlock's failure is told in a
    /// notification of its own. Unlocked some other way meanwhile, it withdraws the notification
    /// and hands the delivery over.
    struct NotificationWait: AsyncParsableCommand, OutputCommand {
        /// Takes the app's offer lock (`flock` on a file in its container) for the rest of this
        /// process, waiting at most two seconds for a waiter that is ending; false when another
        /// waiter holds it. The descriptor is left open on purpose: the lock ends with the process.
        static func holdTheOffer(of client: ManagedClient) -> Bool {
            let descriptor = open(
                client.base + "/.notification-wait.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else { return false }
            let deadline = ContinuousClock.now + .seconds(2)
            while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                guard ContinuousClock.now < deadline else {
                    close(descriptor)
                    return false
                }
                usleep(50_000)
            }
            return true
        }

        static let configuration = CommandConfiguration(
            commandName: "notification-wait",
            abstract: "Show a notification that offers to unlock, and unlock when asked (started by handle-url).",
            shouldDisplay: false)
        @Option(help: "The notification's summary.") var summary: String
        @Option(help: "The notification's body.") var body: String
        @Option(help: "A delivery URL to handle again once unlocked.") var replay: String?
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            // One offer per app at a time: a URL replayed a thousand times (any program can open
            // one) starts a thousand handlers, not a thousand waiting processes and prompts.
            guard Self.holdTheOffer(of: client) else { return }
            guard let settings = ClientNotifications.settings(),
                let desktop = DesktopNotifications.connect(appName: ClientNotifications.appName, settings: settings)
            else { return }
            let offersAction = desktop.capabilities.contains("actions")
            let notification = DesktopNotification(
                summary: summary, body: offersAction ? body : body + "\nRun: dcclient unlock --app \(client.app)",
                actions: [.default("Unlock")], icon: "dialog-password", lifetime: ClientNotifications.unlockLifetime)
            guard let id = desktop.post(notification), offersAction else { return }
            // Unlocked some other way meanwhile (a terminal, another notification): the offer is
            // withdrawn, and the delivery is handed over all the same (the provider resends only
            // what it queued).
            var watcher = try client.unlockWatcher()
            switch desktop.wait(
                for: id, timeout: ClientNotifications.unlockLifetime + .seconds(5), until: { watcher.isUnlocked() })
            {
            // Only the Unlock (`default`) action unlocks.
            case .action(let key) where key == "default": break
            case .action, .closed: return
            case .noAnswer:
                // The offer's time is up, or the session's bus went away.
                guard client.isUnlocked else { return }
                desktop.close(id)
            }
            if !client.isUnlocked {
                // The same command a person runs; without a terminal it asks through pinentry.
                let unlock = try await ChildProcess.run(
                    Tool.executablePath, arguments: ["unlock", "--app", "\(client.app)"],
                    // Three tries of a pinentry that waits two minutes each, and some room.
                    limits: .init(timeout: .seconds(3 * (Int64(Pinentry.timeout.components.seconds) + 20))))
                guard unlock.termination == .exited(0) else {
                    let said = String(decoding: unlock.stderr, as: UTF8.self).split(separator: "\n").first
                        .map { String($0.dropFirst($0.hasPrefix("dcclient: ") ? 10 : 0)) }
                    desktop.post(
                        DesktopNotification(
                            summary: "\(client.app) was not unlocked", body: said ?? "dcclient unlock failed.",
                            icon: "dialog-warning"))
                    return
                }
                desktop.post(DesktopNotification(summary: "\(client.app) is unlocked", urgency: .low))
            }
            guard let replay else { return }
            _ = try await ChildProcess.run(
                Tool.executablePath, arguments: ["handle-url", replay], limits: .init(timeout: .seconds(120)))
        }
    }
}
