import Foundation

/// The XDG base directories (freedesktop's XDG Base Directory specification), read from an
/// environment, with the specification's defaults. This is the one place the toolkit computes
/// them; passing the environment explicitly lets a sandbox (the demo, the tests) use its own.
///
/// A value that is not an absolute path is ignored, as the specification says, and the default
/// is used in its place; a list left empty that way takes its default too.
public struct XDGDirectories: Sendable, Equatable {
    /// `$HOME` if it is absolute, else the account's home directory.
    public var home: String
    /// `$XDG_DATA_HOME`, or `~/.local/share`.
    public var dataHome: String
    /// `$XDG_CONFIG_HOME`, or `~/.config`.
    public var configHome: String
    /// `$XDG_STATE_HOME`, or `~/.local/state`.
    public var stateHome: String
    /// `$XDG_RUNTIME_DIR`, or nil: the specification gives it no default.
    public var runtimeDirectory: String?
    /// `$XDG_DATA_DIRS`, most important first, or `/usr/local/share` and `/usr/share`.
    public var dataDirs: [String]
    /// `$XDG_CONFIG_DIRS`, most important first, or `/etc/xdg`.
    public var configDirs: [String]
    /// `$XDG_CURRENT_DESKTOP`, lowercased, most important first (empty when unset).
    public var currentDesktops: [String]

    /// The directories `environment` names, falling back to the specification's defaults.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.hasPrefix("/") ? $0 : nil } }
        func list(_ name: String, _ fallback: [String]) -> [String] {
            let entries = (environment[name] ?? "").split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
            return entries.isEmpty ? fallback : entries
        }
        home = value("HOME") ?? NSHomeDirectory()
        dataHome = value("XDG_DATA_HOME") ?? home + "/.local/share"
        configHome = value("XDG_CONFIG_HOME") ?? home + "/.config"
        stateHome = value("XDG_STATE_HOME") ?? home + "/.local/state"
        runtimeDirectory = value("XDG_RUNTIME_DIR")
        dataDirs = list("XDG_DATA_DIRS", ["/usr/local/share", "/usr/share"])
        configDirs = list("XDG_CONFIG_DIRS", ["/etc/xdg"])
        currentDesktops = (environment["XDG_CURRENT_DESKTOP"] ?? "").split(separator: ":").map { $0.lowercased() }
    }
}
