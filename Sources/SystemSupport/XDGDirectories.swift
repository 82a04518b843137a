import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

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
        home = value("HOME") ?? FileManager.default.homeDirectoryForCurrentUser.path
        dataHome = value("XDG_DATA_HOME") ?? home + "/.local/share"
        configHome = value("XDG_CONFIG_HOME") ?? home + "/.config"
        stateHome = value("XDG_STATE_HOME") ?? home + "/.local/state"
        runtimeDirectory = value("XDG_RUNTIME_DIR")
        dataDirs = list("XDG_DATA_DIRS", ["/usr/local/share", "/usr/share"])
        configDirs = list("XDG_CONFIG_DIRS", ["/etc/xdg"])
        currentDesktops = (environment["XDG_CURRENT_DESKTOP"] ?? "").split(separator: ":").map { $0.lowercased() }
    }
}

extension XDGDirectories {
    /// The runtime directory, checked to be a place for a secret that must not outlive the login
    /// or be copied with the home directory: set, a directory owned by this user with mode 0700,
    /// and not inside the home directory. Throws `DCError/Code/serviceUnavailable` with what to do otherwise.
    public func privateRuntimeDirectory() throws -> String {
        guard let runtime = runtimeDirectory else {
            throw DCError(
                .serviceUnavailable, "XDG_RUNTIME_DIR is not set: there is no private place for the unlocked key",
                hint: "log in through a session that sets it (systemd does: /run/user/$UID)")
        }
        var info = stat()
        guard stat(runtime, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(),
            info.st_mode & 0o077 == 0
        else {
            throw DCError(
                .serviceUnavailable, "XDG_RUNTIME_DIR is not a private directory of this user (mode 0700)",
                subject: runtime, hint: "log in through a session that sets it up (systemd does: /run/user/$UID)")
        }
        let resolved = PathText.resolvingLinks(runtime)
        let resolvedHome = PathText.resolvingLinks(home)
        guard resolved != resolvedHome,
            !resolved.hasPrefix(resolvedHome.hasSuffix("/") ? resolvedHome : resolvedHome + "/")
        else {
            throw DCError(
                .serviceUnavailable, "XDG_RUNTIME_DIR is inside the home directory, which backups copy",
                subject: runtime, hint: "use the session's runtime directory (/run/user/$UID)")
        }
        return runtime
    }
}
