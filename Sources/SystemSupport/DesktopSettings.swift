import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The user's desktop settings for both tools: which `pinentry` asks for secrets when there is no
/// terminal, and whether notifications are shown. One small file,
/// `$XDG_CONFIG_HOME/derived-credentials/desktop.conf`, in the style of `gpg-agent.conf`: one
/// `key value` per line, `#` starts a comment, blank lines are ignored.
///
/// ```
/// # $XDG_CONFIG_HOME/derived-credentials/desktop.conf
/// pinentry-program /usr/bin/pinentry-gtk-2
/// notifications off
/// ```
///
/// A missing file means the defaults. The file names the program that is given passphrases and
/// PINs, so one that is not a regular file of this user, or that group or others can write, is
/// refused. An unknown key or a bad value is reported by ``load(from:)``
/// as an error naming the line, never silently ignored: a setting the user wrote and we skipped
/// would be a surprise (a notification they turned off appearing anyway).
public struct DesktopSettings: Sendable, Equatable {
    /// `pinentry-program PATH`: the pinentry to run; nil means `pinentry` found on `PATH`, as
    /// gpg-agent does.
    public var pinentryProgram: String?
    /// `notifications on|off`: whether the tools post desktop notifications (on by default).
    public var notifications: Bool

    /// The defaults: `pinentry` from `PATH`, notifications on.
    public init(pinentryProgram: String? = nil, notifications: Bool = true) {
        self.pinentryProgram = pinentryProgram
        self.notifications = notifications
    }

    /// The settings file's path under `locations`.
    public static func path(in locations: XDGDirectories) -> String {
        locations.configHome + "/derived-credentials/desktop.conf"
    }

    /// The settings in `locations`' file; the defaults when there is none. Throws
    /// `DCError/Code/usage` for a line it does not understand, naming the file and line.
    public static func load(from locations: XDGDirectories = XDGDirectories()) throws -> DesktopSettings {
        let path = path(in: locations)
        var info = stat()
        guard lstat(path, &info) == 0 else { return DesktopSettings() }
        // It names the program that is given passphrases and PINs: only this user may have
        // written it (as ssh asks of its config).
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw DCError(
                .permissionDenied, "the desktop settings are not a regular file only this user can write",
                subject: path, hint: "chmod go-w the file (and check who wrote it)")
        }
        guard let data = FileManager.default.contents(atPath: path) else { return DesktopSettings() }
        guard data.count <= 64 * 1024, let text = String(data: data, encoding: .utf8) else {
            throw DCError(.usage, "the desktop settings are not a short UTF-8 text file", subject: path)
        }
        var settings = DesktopSettings()
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            guard let key = words.first else { continue }
            let value = words.dropFirst().joined(separator: " ")
            let subject = "\(path):\(index + 1)"
            switch key {
            case "pinentry-program":
                guard value.hasPrefix("/") else {
                    throw DCError(.usage, "pinentry-program needs an absolute path", subject: subject)
                }
                settings.pinentryProgram = value
            case "notifications":
                guard value == "on" || value == "off" else {
                    throw DCError(.usage, "notifications is on or off", subject: subject)
                }
                settings.notifications = value == "on"
            default:
                throw DCError(
                    .usage, "unknown desktop setting \(String(key).escapingControlCharacters)", subject: subject,
                    hint: "the settings are pinentry-program and notifications")
            }
        }
        return settings
    }
}
