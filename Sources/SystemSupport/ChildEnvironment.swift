import FoundationEssentials

/// The environment the toolkit gives the programs it starts on the user's behalf (exec plug-ins,
/// scheme handlers): a short list of variables copied from ours, never the whole of it, so that
/// nothing the user exported for this process (a PIN in `--pin-env NAME`, a token) reaches them.
/// docs/PROVIDER-PROTOCOL.md lists the same names.
public enum ChildEnvironment {
    /// Variables passed on when set, by exact name.
    public static let names: [String] = ["PATH", "HOME", "LANG", "SOFTHSM2_CONF"]
    /// Variables passed on when set, by prefix: the XDG base directories and desktop, the locale
    /// categories, p11-kit's settings.
    public static let prefixes: [String] = ["XDG_", "LC_", "P11_KIT_"]

    /// The addresses of the desktop session, which a program that talks to the user needs (a
    /// scheme handler posting a notification, a pinentry drawing its window): the display, its
    /// authority file and the session bus. Addresses, not secrets; never given to exec plug-ins.
    public static let desktopNames: [String] = ["DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS"]

    /// ``minimal(from:)`` and the desktop session's addresses (``desktopNames``): what the
    /// programs that talk to the user get (scheme handlers, pinentry, the notification waiter).
    public static func desktop(from environment: [String: String] = ProcessInfo.processInfo.environment)
        -> [String: String]
    {
        minimal(from: environment).merging(environment.filter { desktopNames.contains($0.key) }) { $1 }
    }

    /// The variables of `environment` that the lists above name; nothing else.
    public static func minimal(from environment: [String: String] = ProcessInfo.processInfo.environment)
        -> [String: String]
    {
        environment.filter { key, _ in names.contains(key) || prefixes.contains { key.hasPrefix($0) } }
    }
}
