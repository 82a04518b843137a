import DerivedCredentials
import Foundation
import SchemeHandlers
import SystemSupport
import TestSupport
import Testing

/// One arrangement of `.desktop` files and `mimeapps.list` entries, and which handler each resolver
/// picks for `x-scheme-handler/org.example.dc`: ours, `xdg-mime query default` (xdg-utils, its
/// generic path: no desktop session variables but `XDG_CURRENT_DESKTOP` where the case sets it),
/// and `gio mime` (GLib). `.agrees` means the tool must name the same handler as ours (or none when
/// ours is nil); `.differs` records, with the reason, where a tool follows another rule.
///
/// Known differences not in the table, where both tools take a handler we refuse: a default whose
/// desktop file is `Hidden=true` (the Desktop Entry spec: "deleted"), and a default whose desktop
/// file does not list the scheme's type (the MIME Applications spec: the default must support it).
struct HandlerCase: Sendable, CustomTestStringConvertible {
    enum Oracle: Sendable {
        case agrees
        case differs(String)
    }

    /// A desktop file: where, its id, and whether it claims the scheme.
    enum Place: Sendable {
        case user, system
    }

    var name: String
    /// Desktop files claiming the scheme (Exec is the sandbox's handler, unquoted).
    var desktopFiles: [(Place, String)] = []
    /// mimeapps.list files: path relative to the sandbox's config/data directories, and contents.
    var lists: [(MimeappsPlace, String)] = []
    /// `XDG_CURRENT_DESKTOP`, when set.
    var desktop: String? = nil
    /// Register through ``SchemeHandlers/register(scheme:executable:name:)`` (and maybe unregister).
    var register = false
    var unregister = false
    var expected: String?
    var xdgMime: Oracle = .agrees
    var gio: Oracle = .agrees
    var testDescription: String { name }

    enum MimeappsPlace: Sendable {
        case userConfig(String)
        case systemConfig
        case systemData
    }

    static let type = "x-scheme-handler/org.example.dc"
    static func defaults(_ ids: String) -> String { "[Default Applications]\n\(type)=\(ids)\n" }

    static let all: [HandlerCase] = [
        HandlerCase(
            name: "the user's default beats a claimant that sorts first",
            desktopFiles: [(.user, "dc.desktop"), (.system, "aaa.desktop")],
            lists: [(.userConfig("mimeapps.list"), defaults("dc.desktop"))], expected: "dc.desktop"),
        HandlerCase(
            name: "the user's default beats the system's",
            desktopFiles: [(.user, "dc.desktop"), (.system, "vendor.desktop")],
            lists: [
                (.systemConfig, defaults("vendor.desktop")), (.userConfig("mimeapps.list"), defaults("dc.desktop")),
            ],
            expected: "dc.desktop"),
        HandlerCase(
            name: "a default in XDG_CONFIG_DIRS", desktopFiles: [(.user, "dc.desktop"), (.system, "vendor.desktop")],
            lists: [(.systemConfig, defaults("vendor.desktop"))], expected: "vendor.desktop"),
        HandlerCase(
            name: "a default in XDG_DATA_DIRS/applications",
            desktopFiles: [(.user, "aaa.desktop"), (.system, "vendor.desktop")],
            lists: [(.systemData, defaults("vendor.desktop"))], expected: "vendor.desktop"),
        HandlerCase(
            name: "a desktop-specific list outranks the user's default (a hijack we must see)",
            desktopFiles: [(.user, "dc.desktop"), (.user, "evil.desktop")],
            lists: [
                (.userConfig("mimeapps.list"), defaults("dc.desktop")),
                (.userConfig("gnome-mimeapps.list"), defaults("evil.desktop")),
            ],
            desktop: "GNOME", expected: "evil.desktop"),
        HandlerCase(
            name: "no default: the first claimant, system directories in order, names sorted",
            desktopFiles: [(.system, "zzz.desktop"), (.system, "aaa.desktop")], expected: "aaa.desktop",
            gio: .differs("GLib finds claimants only through mimeinfo.cache, which no one wrote here")),
        HandlerCase(
            name: "no default: the user's claimant before the system's",
            desktopFiles: [(.user, "zzz.desktop"), (.system, "aaa.desktop")], expected: "zzz.desktop",
            gio: .differs("GLib finds claimants only through mimeinfo.cache")),
        HandlerCase(
            name: "a default that is not installed falls back to a claimant",
            desktopFiles: [(.system, "vendor.desktop")],
            lists: [(.userConfig("mimeapps.list"), defaults("gone.desktop"))], expected: "vendor.desktop",
            gio: .differs("GLib finds claimants only through mimeinfo.cache")),
        HandlerCase(
            name: "a list of defaults: the first one installed",
            desktopFiles: [(.user, "dc.desktop"), (.system, "vendor.desktop")],
            lists: [(.userConfig("mimeapps.list"), defaults("gone.desktop;vendor.desktop;dc.desktop"))],
            expected: "vendor.desktop",
            xdgMime: .differs("xdg-mime 1.1.3 reads only the first id of a default list, then falls back")),
        HandlerCase(
            name: "Added Associations come before other claimants",
            desktopFiles: [(.system, "zzz.desktop"), (.system, "aaa.desktop")],
            lists: [(.userConfig("mimeapps.list"), "[Added Associations]\n\(type)=zzz.desktop;\n")],
            expected: "zzz.desktop", xdgMime: .differs("xdg-mime 1.1.3 ignores Added Associations")),
        HandlerCase(
            name: "Removed Associations hide the only claimant", desktopFiles: [(.system, "vendor.desktop")],
            lists: [(.userConfig("mimeapps.list"), "[Removed Associations]\n\(type)=vendor.desktop;\n")],
            expected: nil, xdgMime: .differs("xdg-mime 1.1.3 ignores Removed Associations")),
        HandlerCase(name: "nothing claims the scheme", expected: nil),
        HandlerCase(
            name: "registered by us, with a claimant that sorts first", desktopFiles: [(.system, "aaa.desktop")],
            register: true, expected: "dc-org.example.dc.desktop"),
        HandlerCase(name: "registered by us, then unregistered", register: true, unregister: true, expected: nil),
    ]
}

@Suite("Scheme handlers against xdg-mime and gio", .ownThreads, .timeLimit(.minutes(5)))
struct SchemeHandlersOracleTests {
    @Test(arguments: HandlerCase.all)
    func resolution(_ handlerCase: HandlerCase) throws {
        var sandbox = try Sandbox("handlers-oracle")
        defer { sandbox.remove() }
        if let desktop = handlerCase.desktop { sandbox.extra["XDG_CURRENT_DESKTOP"] = desktop }
        let handler = try sandbox.write("handler", "#!/bin/sh\nexit 0\n")
        chmod(handler, 0o755)
        for (place, id) in handlerCase.desktopFiles {
            let directory = (place == .user ? sandbox.dataHome : sandbox.dataDirectories) + "/applications"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try Data(
                "[Desktop Entry]\nType=Application\nName=\(id)\nExec=\(handler) handle-url %u\nMimeType=\(HandlerCase.type);\n"
                    .utf8
            ).write(to: URL(fileURLWithPath: directory + "/" + id))
        }
        for (place, contents) in handlerCase.lists {
            let path =
                switch place {
                case .userConfig(let name): sandbox.configHome + "/" + name
                case .systemConfig: sandbox.configDirectories + "/mimeapps.list"
                case .systemData: sandbox.dataDirectories + "/applications/mimeapps.list"
                }
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
        }
        let handlers = SchemeHandlers(directories: XDGDirectories(environment: sandbox.environment))
        if handlerCase.register {
            try handlers.register(scheme: try URLScheme("org.example.dc"), executable: handler, name: "Ours")
        }
        if handlerCase.unregister { try handlers.unregister(scheme: try URLScheme("org.example.dc")) }

        let ours = try handlers.resolve(scheme: try URLScheme("org.example.dc"))?.entry.id
        #expect(ours == handlerCase.expected)

        let xdgMime = try sandbox.run("xdg-mime", ["query", "default", HandlerCase.type])
        try #require(xdgMime.status == 0, "xdg-mime: \(xdgMime.stderrText)")
        let xdgMimeSays = xdgMime.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let gio = try sandbox.run("gio", ["mime", HandlerCase.type])
        let gioSays = try #require(Self.gioDefault(gio.stdoutText), "gio: \(gio.stdoutText) \(gio.stderrText)")

        if case .agrees = handlerCase.xdgMime {
            #expect((xdgMimeSays.isEmpty ? nil : xdgMimeSays) == ours, "xdg-mime says \(xdgMimeSays)")
        }
        if case .agrees = handlerCase.gio {
            #expect(gioSays == ours, "gio says \(gio.stdoutText)")
        }
    }

    @Test(
        "A combining mark after a quote, a backslash or a space hides nothing: our Exec argv is the one gio launch runs, and a registration under an XDG_DATA_HOME with a quote and a mark launches"
    )
    func execScalarByScalar() throws {
        var sandbox = try Sandbox("exec-marks")
        defer { sandbox.remove() }
        // The recorder writes its argv, one argument per line, where the test reads it.
        let record = sandbox.file("argv")
        let recorder = try sandbox.write("recorder", "#!/bin/sh\nprintf '%s\\n' \"$@\" > '\(record)'\n")
        chmod(recorder, 0o755)
        let url = "org.example.dc:/new?v=1"
        func gioLaunch(_ entry: String) throws -> [String] {
            try? FileManager.default.removeItem(atPath: record)
            let launched = try sandbox.run("gio", ["launch", entry, url])
            try #require(launched.status == 0, "gio launch: \(launched.stderrText)")
            for _ in 0..<250 where !FileManager.default.fileExists(atPath: record) { usleep(20_000) }
            return try readText(record).split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(
                String.init)
        }
        let mark = "\u{301}"
        for (index, exec) in [
            "\(recorder) \"x\\\"\(mark)y\" %u", "\(recorder) a \"\(mark)b\" %u", "\(recorder) a \(mark)b %u",
        ].enumerated() {
            let path = try sandbox.write(
                "entry\(index).desktop", "[Desktop Entry]\nType=Application\nName=x\nExec=\(exec)\nTerminal=false\n")
            let ours = try #require(
                DesktopEntry(id: "entry\(index).desktop", path: path, contents: try readText(path))
            ).arguments(for: url)
            #expect(try gioLaunch(path) == Array(ours.dropFirst()), "\(exec)")
        }
        // Registered under a data home whose path has a quote and a backslash, each followed by a
        // mark: the launcher is quoted and escaped scalar by scalar, and gio runs it.
        sandbox.extra["XDG_DATA_HOME"] = sandbox.file("data \"\(mark)\\\(mark)")
        let handlers = SchemeHandlers(directories: XDGDirectories(environment: sandbox.environment))
        try handlers.register(scheme: try URLScheme("org.example.dc"), executable: recorder, name: "Ours \\\(mark)")
        let entry = try #require(try handlers.resolve(scheme: try URLScheme("org.example.dc"))).entry
        #expect(
            try entry.arguments(for: url) == [
                handlers.launcherPath(scheme: try URLScheme("org.example.dc")), "handle-url", url,
            ])
        #expect(try gioLaunch(entry.path) == ["handle-url", url])
    }

    /// The id in gio's `Default application for “TYPE”: ID` line; `.some(nil)` for `No default
    /// applications…`; nil when the output is neither.
    static func gioDefault(_ output: String) -> String?? {
        let first = output.split(separator: "\n").first.map(String.init) ?? ""
        if first.hasPrefix("No default applications") { return .some(nil) }
        guard first.hasPrefix("Default application for "), let colon = first.range(of: ": ", options: .backwards)
        else { return nil }
        return .some(String(first[colon.upperBound...]))
    }
}

@Suite("xdg-open and gio open start our registered handler", .ownThreads, .timeLimit(.minutes(3)))
struct SchemeHandlersLaunchOracleTests {
    /// A URL with every character a shell or an Exec line would read: it must arrive whole, as one
    /// argument, and run nothing.
    static func hostileURL(_ marker: String) -> String {
        "org.example.dc:/deliver?a=1&b=x y\"$(touch \(marker))`touch \(marker)`;touch \(marker)|*'<>#~%20\\%u"
    }

    @Test(
        "Registered from a path with a space: each launcher runs our handler with the exact URL as one argument",
        arguments: [["xdg-open"], ["gio", "open"]])
    func launch(launcher: [String]) throws {
        var sandbox = try Sandbox("handlers-launch")
        defer { sandbox.remove() }
        // xdg-open 1.1.3 takes scheme handlers only with a display (it never connects to it).
        sandbox.extra["DISPLAY"] = ":99"
        let argv = sandbox.file("argv")
        try FileManager.default.createDirectory(atPath: sandbox.file("with space"), withIntermediateDirectories: true)
        let handler = try sandbox.write(
            "with space/handler", "#!/bin/sh\nprintf '%s\\n' \"$@\" > '\(argv).tmp' && mv '\(argv).tmp' '\(argv)'\n")
        chmod(handler, 0o755)
        try SchemeHandlers(directories: XDGDirectories(environment: sandbox.environment)).register(
            scheme: try URLScheme("org.example.dc"), executable: handler, name: "Ours")
        let marker = sandbox.file("pwned")
        let url = Self.hostileURL(marker)
        let result = try sandbox.run(launcher[0], Array(launcher.dropFirst()) + [url])
        #expect(result.status == 0, "\(launcher): \(result.stdoutText)\(result.stderrText)")
        // gio open does not wait for the handler.
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: argv) && Date() < deadline { usleep(50_000) }
        #expect(try readText(argv) == "handle-url\n\(url)\n")
        #expect(!FileManager.default.fileExists(atPath: marker))
    }
}
