import Foundation

/// The XDG base directories (XDG Base Directory spec), from an environment, with the spec's
/// defaults. Passing the environment explicitly lets a sandbox (the demo, the tests) use its own.
public struct XDGDirectories: Sendable, Equatable {
    /// `$HOME` if it is absolute, else the account's home directory.
    public var home: String
    /// `$XDG_CONFIG_HOME`, or `~/.config`.
    public var configHome: String
    /// `$XDG_CONFIG_DIRS`, most important first, or `/etc/xdg`.
    public var configDirs: [String]
    /// `$XDG_DATA_HOME`, or `~/.local/share`.
    public var dataHome: String
    /// `$XDG_DATA_DIRS`, most important first, or `/usr/local/share` and `/usr/share`.
    public var dataDirs: [String]
    /// `$XDG_STATE_HOME`, or `~/.local/state`.
    public var stateHome: String
    /// `XDG_CURRENT_DESKTOP`, lowercased, for desktop-specific `<desktop>-mimeapps.list` files.
    public var currentDesktops: [String]

    /// The directories `environment` names, falling back to the spec's defaults; relative paths, which
    /// the spec says to ignore, are ignored, and a list left empty takes the default.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.hasPrefix("/") ? $0 : nil } }
        func list(_ name: String, _ fallback: [String]) -> [String] {
            let entries = (environment[name] ?? "").split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
            return entries.isEmpty ? fallback : entries
        }
        home = value("HOME") ?? NSHomeDirectory()
        configHome = value("XDG_CONFIG_HOME") ?? home + "/.config"
        configDirs = list("XDG_CONFIG_DIRS", ["/etc/xdg"])
        dataHome = value("XDG_DATA_HOME") ?? home + "/.local/share"
        dataDirs = list("XDG_DATA_DIRS", ["/usr/local/share", "/usr/share"])
        stateHome = value("XDG_STATE_HOME") ?? home + "/.local/state"
        currentDesktops = (environment["XDG_CURRENT_DESKTOP"] ?? "").split(separator: ":").map { $0.lowercased() }
    }

    /// mimeapps.list files, most important first (MIME Applications Associations spec).
    public var mimeappsLists: [String] {
        var files: [String] = []
        for directory in [configHome] + configDirs {
            files += currentDesktops.map { "\(directory)/\($0)-mimeapps.list" }
            files.append("\(directory)/mimeapps.list")
        }
        for directory in [dataHome] + dataDirs {
            files += currentDesktops.map { "\(directory)/applications/\($0)-mimeapps.list" }
            files.append("\(directory)/applications/mimeapps.list")
        }
        return files
    }

    /// Directories holding `.desktop` files, most important first.
    public var applicationDirectories: [String] { ([dataHome] + dataDirs).map { $0 + "/applications" } }
}
