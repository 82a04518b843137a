import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// One desktop notification as the toolkit posts it (freedesktop's Desktop Notifications
/// specification): a short summary, a body, the actions offered, an urgency.
///
/// **Never a secret.** A notification is shown on the screen (and on a locked screen, by some
/// desktops), kept in the notification server's history, and crosses the session bus, where every
/// program of the user can read it (`dbus-monitor`). A caller passes only what may be seen there:
/// what happened and what to do, a credential's name, the provider's message — never a
/// passphrase, a PIN, a key, a token or a URL that carries one. The type holds text and nothing
/// else on purpose.
///
/// The text is made safe when the value is made: control characters (but the body's line
/// breaks) and the invisible characters that reorder text are removed, and the summary and body
/// are cut to ``summaryLimit`` and ``bodyLimit`` characters (a trailing `…` shows the cut). The
/// characters markup gives a meaning (`&`, `<`, `>`) are escaped when posted
/// (``DesktopNotifications/markupEscaped(_:)``), in the summary too: servers take markup without
/// saying so (dunst announces no `body-markup` and still reads markup in what it shows), so a
/// provider's `<b>` or `&lt;` is shown as written, never interpreted.
public struct DesktopNotification: Sendable, Equatable {
    /// How urgent the notification is (the specification's `urgency` hint).
    public enum Urgency: UInt8, Sendable {
        /// Low: news that can wait.
        case low = 0
        /// Normal.
        case normal = 1
        /// Critical: servers keep it on screen until the user closes it.
        case critical = 2
    }

    /// An action the server offers (a button, or a click on the notification for the key
    /// `default`), and the label it shows.
    public struct Action: Sendable, Equatable {
        /// What ``DesktopNotifications/wait(for:timeout:until:)`` reports when it is invoked.
        public let key: String
        /// The label shown.
        public let label: String

        /// An action `key` labelled `label` (both cleaned as a summary is).
        public init(key: String, label: String) {
            self.key = DesktopNotification.plain(key, limit: 40, keepingLineBreaks: false)
            self.label = DesktopNotification.plain(label, limit: 40, keepingLineBreaks: false)
        }

        /// The `default` action: what a click on the notification itself does (dunst, GNOME).
        public static func `default`(_ label: String) -> Action { Action(key: "default", label: label) }
    }

    /// The most characters a summary keeps.
    public static let summaryLimit = 80
    /// The most characters a body keeps.
    public static let bodyLimit = 400

    /// The summary: one line, plain text.
    public let summary: String
    /// The body: a few lines of plain text (escaped for a server that takes markup when posted).
    public let body: String
    /// The actions offered, in order.
    public let actions: [Action]
    /// How urgent it is.
    public let urgency: Urgency
    /// A freedesktop icon name (`dialog-password`), or empty for the server's default.
    public let icon: String
    /// How long the server shows it; nil for the server's default.
    public let lifetime: Duration?

    /// A notification; `summary` and `body` are cleaned and cut as the type's documentation says.
    public init(
        summary: String, body: String = "", actions: [Action] = [], urgency: Urgency = .normal, icon: String = "",
        lifetime: Duration? = nil
    ) {
        self.summary = Self.plain(summary, limit: Self.summaryLimit, keepingLineBreaks: false)
        self.body = Self.plain(body, limit: Self.bodyLimit, keepingLineBreaks: true)
        self.actions = actions
        self.urgency = urgency
        self.icon = Self.plain(icon, limit: 80, keepingLineBreaks: false)
        self.lifetime = lifetime
    }

    /// `text` without control characters (line breaks kept when `keepingLineBreaks`, a tab made a
    /// space) or the formatting characters that reorder or hide text, cut to `limit` characters.
    static func plain(_ text: String, limit: Int, keepingLineBreaks: Bool) -> String {
        var kept = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0A where keepingLineBreaks: kept.append(scalar)
            case 0x09, 0x0A, 0x0D: kept.append(" ")
            // Bidirectional embeddings, overrides and isolates; the line and paragraph separators.
            case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: continue
            default:
                if scalar.properties.generalCategory == .control { continue }
                kept.append(scalar)
            }
        }
        let cleaned = String(kept)
        guard cleaned.count > limit else { return cleaned }
        return String(cleaned.prefix(limit - 1)) + "…"
    }
}

/// How a notification ended, as ``DesktopNotifications/wait(for:timeout:until:)`` saw it.
public enum DesktopNotificationResponse: Sendable, Equatable {
    /// The user invoked the action with this key.
    case action(String)
    /// The notification was closed: the specification's reason (1 expired, 2 dismissed by the
    /// user, 3 closed by a call, 4 undefined).
    case closed(reason: UInt32)
    /// Neither came within the time limit, or the bus went away.
    case noAnswer
}

/// Desktop notifications through `org.freedesktop.Notifications` on the session bus, spoken
/// through `libdbus-1.so.3` (loaded at first use; nothing of D-Bus is needed to build).
///
/// Best effort by design: when notifications are off (``DesktopSettings/notifications``), when
/// there is no session bus (`DBUS_SESSION_BUS_ADDRESS` unset and no `$XDG_RUNTIME_DIR/bus`),
/// when libdbus is not installed, or when no notification server answers, nothing is shown and
/// nothing fails: ``connect(appName:settings:environment:)`` or ``post(_:replacing:)`` return nil. The bus
/// is never started for us (no `autolaunch`).
///
/// A server sends an action's signal to the connection that posted the notification only (dunst
/// and GNOME Shell do): a program that waits for an action posts the notification itself and
/// keeps the connection until ``wait(for:timeout:until:)`` returns.
///
/// Not for use from several threads at once: one connection, one thread.
public final class DesktopNotifications {
    private let connection: DBusConnection
    private let appName: String
    /// What the server said it can do (`GetCapabilities`): `actions`, `body-markup`, …
    public let capabilities: Set<String>

    static let destination = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"
    /// How long a call to the server may take (a server started on demand included).
    static let callTimeout: Duration = .seconds(5)

    /// The notification server's unique bus name: the only sender whose signals are believed.
    private let server: String

    private init(connection: DBusConnection, appName: String, capabilities: Set<String>, server: String) {
        self.connection = connection
        self.appName = appName
        self.capabilities = capabilities
        self.server = server
    }

    /// Whether `name` is a unique bus name as the bus daemon gives them (`:1.42`): what may go
    /// into a match rule between quotes.
    static func isUniqueName(_ name: String) -> Bool {
        name.hasPrefix(":") && name.utf8.count <= 255
            && name.utf8.allSatisfy {
                $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_")
                    || $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0)
                    || (0x61...0x7A).contains($0)
            }
    }

    /// The session bus's address in `environment`: `DBUS_SESSION_BUS_ADDRESS`, else the socket
    /// `$XDG_RUNTIME_DIR/bus` that systemd's user session provides; nil when there is neither.
    public static func busAddress(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return address }
        guard let runtime = XDGDirectories(environment: environment).runtimeDirectory else { return nil }
        let socket = runtime + "/bus"
        var info = stat()
        guard stat(socket, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK else { return nil }
        return "unix:path=" + addressEscaped(socket)
    }

    /// `value` as a D-Bus address value: bytes other than `-0-9A-Za-z_/.\*` as `%XX`.
    static func addressEscaped(_ value: String) -> String {
        let allowed = Set("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_/.\\*".utf8)
        return value.utf8.map {
            allowed.contains($0) ? String(UnicodeScalar($0)) : "%" + $0.zeroPadded(width: 2, radix: 16, uppercase: true)
        }
        .joined()
    }

    /// Whether a notification could be posted at all: on in `settings`, a session bus in
    /// `environment`, libdbus installed. Connects to nothing (a server may still not answer).
    public static func mayPost(
        settings: DesktopSettings, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        settings.notifications && busAddress(environment: environment) != nil && DBus.library() != nil
    }

    /// A connection to the session bus of `environment` that posts as `appName`; nil when
    /// notifications are off in `settings`, there is no bus or no libdbus, or no notification
    /// server answers.
    public static func connect(
        appName: String, settings: DesktopSettings,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> DesktopNotifications? {
        guard settings.notifications, let address = busAddress(environment: environment),
            let library = DBus.library(), let connection = DBusConnection(address: address, library: library)
        else { return nil }
        guard
            let capabilities = connection.call(
                destination: destination, path: path, interface: destination, method: "GetCapabilities",
                timeout: callTimeout, append: { _ in true }, read: { $0.strings() })
        else { return nil }
        // The server's unique name: only its signals count. Any peer on the bus can broadcast an
        // ActionInvoked; only the bus daemon sets a message's sender.
        guard
            let owner = connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                method: "GetNameOwner", timeout: callTimeout, append: { $0.string(destination) },
                read: { $0.string() }),
            isUniqueName(owner)
        else { return nil }
        // Both signals, whether the server sends them to us alone or to everyone.
        connection.addMatch("type='signal',sender='\(owner)',interface='\(destination)',path='\(path)'")
        return DesktopNotifications(
            connection: connection, appName: appName, capabilities: Set(capabilities), server: owner)
    }

    /// `text` with the characters that markup gives a meaning escaped: `&`, `<`, `>`.
    public static func markupEscaped(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// Posts `notification` (in place of the one numbered `replacing`, if not 0) and returns the
    /// server's number for it; nil when the server did not take it. The summary and body are
    /// markup-escaped; the actions are left out when the server has none to offer.
    @discardableResult
    public func post(_ notification: DesktopNotification, replacing: UInt32 = 0) -> UInt32? {
        let summary = Self.markupEscaped(notification.summary)
        let body = Self.markupEscaped(notification.body)
        let actions = capabilities.contains("actions") ? notification.actions : []
        let timeout: Int32 = notification.lifetime.map { max(1, DBus.milliseconds($0)) } ?? -1
        return connection.call(
            destination: Self.destination, path: Self.path, interface: Self.destination, method: "Notify",
            timeout: Self.callTimeout,
            append: { message in
                message.string(appName) && message.uint32(replacing) && message.string(notification.icon)
                    && message.string(summary) && message.string(body)
                    && message.container(DBus.typeArray, "s") { array in
                        actions.allSatisfy { array.string($0.key) && array.string($0.label) }
                    }
                    && message.container(DBus.typeArray, "{sv}") { hints in
                        hints.container(DBus.typeDictEntry, nil) { entry in
                            entry.string("urgency")
                                && entry.container(DBus.typeVariant, "y") { $0.byte(notification.urgency.rawValue) }
                        }
                    }
                    && message.int32(timeout)
            },
            read: { $0.uint32() })
    }

    /// Waits at most `timeout` for the notification numbered `id` (one this connection posted) to
    /// end: an action invoked, or closed. Whatever else the server says is ignored. `until` is
    /// asked about once a second: when it holds, the wait ends with ``DesktopNotificationResponse/noAnswer``.
    public func wait(
        for id: UInt32, timeout: Duration, until: () -> Bool = { false }
    ) -> DesktopNotificationResponse {
        connection.waitForSignal(
            interface: Self.destination, members: ["ActionInvoked", "NotificationClosed"], sender: server,
            timeout: timeout, until: until
        ) { member, reader -> DesktopNotificationResponse? in
            guard reader.uint32() == id else { return nil }
            if member == "ActionInvoked" { return reader.string().map { .action($0) } }
            return .closed(reason: reader.uint32() ?? 4)
        } ?? .noAnswer
    }

    /// Withdraws the notification numbered `id` (`CloseNotification`); nothing when it is gone already.
    public func close(_ id: UInt32) {
        _ = connection.call(
            destination: Self.destination, path: Self.path, interface: Self.destination, method: "CloseNotification",
            timeout: Self.callTimeout, append: { $0.uint32(id) }, read: { _ in true })
    }

    /// Posts `notification` on its own connection and lets go of it: for a notification no one
    /// waits on. Nil, and nothing shown, in every case ``connect(appName:settings:environment:)``
    /// lists.
    @discardableResult
    public static func post(
        _ notification: DesktopNotification, appName: String, settings: DesktopSettings,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> UInt32? {
        connect(appName: appName, settings: settings, environment: environment)?.post(notification)
    }
}
