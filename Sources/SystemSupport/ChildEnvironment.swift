import Foundation

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

    /// The variables of `environment` that the lists above name; nothing else.
    public static func minimal(from environment: [String: String] = ProcessInfo.processInfo.environment)
        -> [String: String]
    {
        environment.filter { key, _ in names.contains(key) || prefixes.contains { key.hasPrefix($0) } }
    }
}
