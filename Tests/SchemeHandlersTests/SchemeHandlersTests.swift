import DerivedCredentials
import Foundation
import SchemeHandlers
import SystemSupport
import TestSupport
import Testing

/// The test's `Sandbox` (HOME and every XDG directory inside one temporary directory, so neither
/// the user's nor the system's `mimeapps.list` and desktop files are read), with the system data
/// directory at `system-share/` and the handlers resolved there.
private struct HandlerSandbox {
    let dir: TemporaryDirectory
    let handlers: SchemeHandlers

    init(desktop: String? = nil) throws {
        let sandbox = try TestSupport.Sandbox("xdg")
        dir = sandbox.directory
        var environment = sandbox.xdg
        environment["XDG_DATA_DIRS"] = dir.file("system-share")
        if let desktop { environment["XDG_CURRENT_DESKTOP"] = desktop }
        handlers = SchemeHandlers(directories: XDGDirectories(environment: environment))
    }

    /// A handler script that records its argv, one argument per line.
    func recorder(_ name: String) throws -> String {
        let path = try dir.write(name, "#!/bin/bash\nprintf '%s\\n' \"$@\" > '\(dir.file(name + ".argv"))'\n")
        chmod(path, 0o755)
        return path
    }

    func desktopFile(_ directory: String, _ id: String, exec: String, scheme: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try TemporaryDirectory.write(
            directory + "/" + id,
            "[Desktop Entry]\nType=Application\nName=x\nExec=\(exec)\nMimeType=x-scheme-handler/\(scheme);\n")
    }
}

extension TemporaryDirectory {
    fileprivate static func write(_ path: String, _ text: String) throws -> String {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }
}

@Suite("Scheme handlers (freedesktop, headless)", .ownThreads, .timeLimit(.minutes(3)))
struct SchemeHandlersTests {
    @Test("Exec lines become argv arrays per the Desktop Entry spec")
    func execParsing() throws {
        func arguments(_ exec: String) throws -> [String] {
            try #require(
                DesktopEntry(id: "t.desktop", path: "/t", contents: "[Desktop Entry]\nType=Application\nExec=\(exec)\n")
            )
            .arguments(for: "x:/new?v=1")
        }
        #expect(
            try arguments(#""/opt/My App/bin/dc" handle-url %u"#) == ["/opt/My App/bin/dc", "handle-url", "x:/new?v=1"])
        #expect(
            try arguments(#"/bin/dc "a \"quoted\" \$HOME \`x\` \\ arg" %U"#) == [
                "/bin/dc", #"a "quoted" $HOME `x` \ arg"#, "x:/new?v=1",
            ])
        #expect(try arguments("/bin/dc --percent=100%% %i %u") == ["/bin/dc", "--percent=100%", "x:/new?v=1"])
        for bad in ["/bin/dc --url=%u", "/bin/dc %z %u", "\"/bin/dc %u", "/bin/dc", "/bin/dc \"\\n\" %u"] {
            #expect(throws: DCError.self, "\(bad)") { try arguments(bad) }
        }
    }

    @Test("Schemes are validated and lowercased (RFC 3986)")
    func schemes() throws {
        #expect(try URLScheme("Org.Example.DC").text == "org.example.dc")
        #expect(try URLScheme("a+b-c.d9").text == "a+b-c.d9")
        for bad in ["", "9abc", "a b", "a_b", "a:b", "ä"] {
            #expect(throws: DCError.self) { try URLScheme(bad) }
        }
    }

    @Test(
        "register writes a desktop entry and an explicit default, keeping the rest of mimeapps.list; unregister undoes it"
    )
    func registration() throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        let configHome = sandbox.handlers.directories.configHome
        try FileManager.default.createDirectory(atPath: configHome, withIntermediateDirectories: true)
        _ = try TemporaryDirectory.write(
            configHome + "/mimeapps.list",
            "[Default Applications]\ntext/html=firefox.desktop\n\n[Added Associations]\nimage/png=gimp.desktop;\n")
        let handler = try sandbox.recorder("handler")
        try sandbox.handlers.register(scheme: try URLScheme("Org.Example.DC"), executable: handler, name: "Test")
        let resolved = try #require(try sandbox.handlers.resolve(scheme: try URLScheme("org.example.dc")))
        #expect(resolved.choice == .explicitDefault)
        #expect(resolved.entry.id == "dc-org.example.dc.desktop")
        // Exec runs the launcher, a link to the handler at a path of plain characters (xdg-open 1.1.3
        // cannot run a quoted program).
        let launcher = sandbox.handlers.launcherPath(scheme: try URLScheme("org.example.dc"))
        #expect(try resolved.entry.arguments(for: "u:") == [launcher, "handle-url", "u:"])
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: launcher) == handler)
        let list = try String(contentsOfFile: configHome + "/mimeapps.list", encoding: .utf8)
        #expect(list.contains("text/html=firefox.desktop"))
        #expect(list.contains("x-scheme-handler/org.example.dc=dc-org.example.dc.desktop"))
        #expect(list.contains("[Added Associations]\nimage/png=gimp.desktop;"))
        try sandbox.handlers.unregister(scheme: try URLScheme("org.example.dc"))
        #expect(try sandbox.handlers.resolve(scheme: try URLScheme("org.example.dc")) == nil)
        #expect(!FileManager.default.fileExists(atPath: launcher))
        #expect(
            try String(contentsOfFile: configHome + "/mimeapps.list", encoding: .utf8).contains(
                "text/html=firefox.desktop"))
    }

    @Test("open launches the registered handler with an argv array: no shell ever sees the URL")
    func launch() async throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        let handler = try sandbox.recorder("handler")
        try sandbox.handlers.register(scheme: try URLScheme("org.example.dc"), executable: handler, name: "Test")
        let marker = sandbox.dir.file("pwned")
        let url = "org.example.dc:/new?v=1&client=$(touch \(marker))&x=`touch \(marker)`;touch \(marker)"
        let outcome = try await sandbox.handlers.open(
            url, scheme: try URLScheme("org.example.dc"), expectedExecutable: handler)
        #expect(outcome.termination == .exited(0))
        #expect(try readText(sandbox.dir.file("handler.argv")) == "handle-url\n\(url)\n")
        #expect(!FileManager.default.fileExists(atPath: marker))
    }

    @Test("A hijacking handler is refused: another default, or a fallback that sorts first")
    func hijack() async throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        let ours = try sandbox.recorder("ours")
        let evil = try sandbox.recorder("evil")
        let applications = sandbox.handlers.directories.dataHome + "/applications"
        // No default at all: the alphabetically first claimant would win. Refused.
        try sandbox.desktopFile(applications, "aaa-evil.desktop", exec: "\(evil) %u", scheme: "org.example.dc")
        await #expect(throws: DCError.self) {
            _ = try await sandbox.handlers.open(
                "org.example.dc:/x?v=1", scheme: try URLScheme("org.example.dc"), expectedExecutable: ours)
        }
        // Our registration makes ours the explicit default: accepted.
        try sandbox.handlers.register(scheme: try URLScheme("org.example.dc"), executable: ours, name: "Ours")
        _ = try await sandbox.handlers.open(
            "org.example.dc:/x?v=1", scheme: try URLScheme("org.example.dc"), expectedExecutable: ours)
        // A desktop-specific mimeapps.list that outranks ours names the evil one: refused, evil never runs.
        let desktopSandbox = try HandlerSandbox(desktop: "GNOME")
        defer { desktopSandbox.dir.remove() }
        let ours2 = try desktopSandbox.recorder("ours")
        let evil2 = try desktopSandbox.recorder("evil")
        try desktopSandbox.handlers.register(scheme: try URLScheme("org.example.dc"), executable: ours2, name: "Ours")
        let apps2 = desktopSandbox.handlers.directories.dataHome + "/applications"
        try desktopSandbox.desktopFile(apps2, "evil.desktop", exec: "\(evil2) %u", scheme: "org.example.dc")
        _ = try TemporaryDirectory.write(
            desktopSandbox.handlers.directories.configHome + "/gnome-mimeapps.list",
            "[Default Applications]\nx-scheme-handler/org.example.dc=evil.desktop\n")
        do {
            _ = try await desktopSandbox.handlers.open(
                "org.example.dc:/x?v=1", scheme: try URLScheme("org.example.dc"), expectedExecutable: ours2)
            Issue.record("sent to a hijacking handler")
        } catch let error as DCError {
            #expect(error.description.contains("another handler claims org.example.dc:"))
        }
        #expect(!FileManager.default.fileExists(atPath: desktopSandbox.dir.file("evil.argv")))
    }

    @Test(
        "A hijacker is refused when its Exec spells our program's path with other bytes that Swift calls equal (U+212A for K), or runs our program with other arguments"
    )
    func hijackBySpelling() async throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        for directory in ["K", "\u{212A}"] {
            try FileManager.default.createDirectory(
                atPath: sandbox.dir.file(directory), withIntermediateDirectories: true)
        }
        // Two files: the Kelvin sign's directory is another directory to the kernel.
        let ours = try sandbox.recorder("K/handler")
        let evil = try sandbox.recorder("\u{212A}/handler")
        #expect(ours == evil, "Swift compares canonically equivalent strings as equal")
        #expect(!ours.utf8.elementsEqual(evil.utf8))
        try sandbox.handlers.register(scheme: try URLScheme("org.example.dc"), executable: ours, name: "Ours")
        let applications = sandbox.handlers.directories.dataHome + "/applications"
        let list = sandbox.handlers.directories.configHome + "/mimeapps.list"
        for (id, exec) in [
            ("evil.desktop", "\(evil) handle-url %u"), ("other.desktop", "\(ours) remove --everything %u"),
        ] {
            try sandbox.desktopFile(applications, id, exec: exec, scheme: "org.example.dc")
            _ = try TemporaryDirectory.write(list, "[Default Applications]\nx-scheme-handler/org.example.dc=\(id)\n")
            do {
                _ = try await sandbox.handlers.open(
                    "org.example.dc:/x?v=1", scheme: try URLScheme("org.example.dc"), expectedExecutable: ours)
                Issue.record("sent to \(exec)")
            } catch let error as DCError {
                #expect(error.description.contains("another handler claims org.example.dc:"), "\(error)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.dir.file("\u{212A}/handler.argv")))
        #expect(!FileManager.default.fileExists(atPath: sandbox.dir.file("K/handler.argv")))
    }

    @Test("Removed Associations hide a fallback; no handler at all is missingClient")
    func removedAndMissing() async throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        let system = sandbox.dir.file("system-share/applications")
        try sandbox.desktopFile(system, "vendor.desktop", exec: "/bin/true %u", scheme: "org.example.dc")
        #expect(try sandbox.handlers.resolve(scheme: try URLScheme("org.example.dc"))?.choice == .fallback)
        try FileManager.default.createDirectory(
            atPath: sandbox.handlers.directories.configHome, withIntermediateDirectories: true)
        _ = try TemporaryDirectory.write(
            sandbox.handlers.directories.configHome + "/mimeapps.list",
            "[Removed Associations]\nx-scheme-handler/org.example.dc=vendor.desktop;\n")
        #expect(try sandbox.handlers.resolve(scheme: try URLScheme("org.example.dc")) == nil)
        do {
            _ = try await sandbox.handlers.open(
                "org.example.dc:/x?v=1", scheme: try URLScheme("org.example.dc"), expectedExecutable: "/bin/true")
            Issue.record("opened without a handler")
        } catch let error as DCError {
            #expect(error.code == .missingClient)
        }
    }

    @Test(
        "register refuses, before writing anything, a name or an executable a desktop entry cannot hold",
        arguments: [
            ("Two\nlines", "/bin/true"), ("Bell\u{07}", "/bin/true"), ("", "/bin/true"), ("ok", "relative"),
            ("ok", "/bin/new\nline"),
        ])
    func refusedValues(name: String, executable: String) throws {
        let sandbox = try HandlerSandbox()
        defer { sandbox.dir.remove() }
        do {
            try sandbox.handlers.register(scheme: try URLScheme("org.example.dc"), executable: executable, name: name)
            Issue.record("registered")
        } catch let error as DCError {
            #expect(error.code == .usage)
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.handlers.directories.dataHome + "/applications"))
        #expect(
            !FileManager.default.fileExists(
                atPath: sandbox.handlers.launcherPath(scheme: try URLScheme("org.example.dc"))))
    }
}
