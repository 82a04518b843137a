import Foundation
import SystemSupport
import TestSupport
import Testing

/// The journey a user has on a Linux desktop, in a real session of the test's own (a session
/// bus, Xvfb, the notification server dunst, pinentry-gtk2, xdotool as the user's hands,
/// dbus-monitor as the oracle of what was notified): the client's handlers run with no terminal
/// anywhere, started through their freedesktop registration — by `gio open`, as a browser or mail
/// client starts them, and by the provider's own launcher, which resolves the same registration.
@Suite("The desktop journey: no terminal anywhere", .ownThreads, .timeLimit(.minutes(8)))
struct DesktopJourneyTests {
    static let provider = ["--provider-scheme", "org.example.provider"]

    @Test(
        "Launched only through the desktop: a credential sent to a locked app waits in a notification; its Unlock asks through pinentry (typed by xdotool) and installs it; an unauthorize shows its message; two apps are retired one at a time"
    )
    func journey() throws {
        let tools = try Tools("desktop-journey")
        defer { tools.sandbox.remove() }
        let session = try DesktopSession(in: tools.sandbox)
        defer { session.stop() }
        let sandbox = tools.sandbox
        let desktop = session.environment
        /// A tool run as the operator or the setup would, in the session (never on a terminal).
        @discardableResult
        func tool(_ name: String, _ arguments: [String], _ location: SourceLocation = #_sourceLocation) throws
            -> ProcessResult
        {
            let result = try sandbox.run(
                Binaries.directory + "/" + name, arguments, stdin: [], environment: desktop, timeout: 120)
            #expect(
                result.status == 0, "\(name) \(arguments.joined(separator: " ")): \(result.stderrText)",
                sourceLocation: location)
            return result
        }
        try FileManager.default.createDirectory(
            atPath: sandbox.configHome + "/derived-credentials", withIntermediateDirectories: true)
        try "pinentry-program /usr/bin/pinentry-gtk-2\n".write(
            toFile: sandbox.configHome + "/derived-credentials/desktop.conf", atomically: true, encoding: .utf8)
        try sandbox.write("pass.txt", "correct horse\n")
        try tool("dcprovision", ["testca", "init", "ca"])
        try tool("dcprovision", ["register", "--brand", "Example", "--testca", "ca"] + Self.provider)
        for app in ["mail", "chat"] {
            let scheme = "org.example.\(app)"
            try tool(
                "dcclient",
                ["init", "--app", app, "--client-scheme", scheme, "--passphrase-file", "pass.txt"] + Self.provider)
            try tool("dcclient", ["register", "--app", app])
            try tool("dcprovision", ["pair", "--client-scheme", scheme, "--user-id", "alice@example.com"])
            try tool("dcprovision", ["authorize", "--client-scheme", scheme])
        }
        try tool("dcclient", ["lock", "--app", "mail"])

        // The provider sends to the locked app: queued, and the app is told. Its handler, started
        // through the registration, cannot install it and says a credential waits.
        let sent = try tool(
            "dcprovision",
            ["send", "--queue", "--testca", "ca", "--brand", "Example", "--client-scheme", "org.example.mail"]
                + Self.provider)
        let queued = try #require(
            sent.stdoutText.split(separator: "\n").first { $0.hasPrefix("queued: ") }.map {
                String($0.dropFirst("queued: ".count).prefix { $0 != " " })
            })
        let waiting = session.waitForNotification { $0.summary.contains("credential waits") }
        #expect(waiting?.actions.contains("default") == true, "\(session.notifications())")
        // The same URL opened by the desktop's own launcher, as a browser would: the same offer.
        try session.closeAll()
        let opened = try run(
            "/usr/bin/setsid", ["-w", try which("gio"), "open", queued], stdin: [],
            environment: sandbox.environment.merging(desktop) { $1 }, timeout: 60)
        #expect(opened.status == 0, "\(opened.stderrText)")
        #expect(
            DesktopSession.waitUntil {
                session.notifications().filter { $0.summary.contains("credential waits") }.count == 2
            }, "\(session.notifications())")
        try session.screenshot(to: sandbox.file("waiting.png"))

        // The user clicks it: Unlock asks through pinentry-gtk2; the user types the passphrase.
        try session.clickTopNotification()
        let xdotool = try which("xdotool")
        let environment = sandbox.environment.merging(desktop) { $1 }
        let window = try run(
            xdotool, ["search", "--sync", "--onlyvisible", "--class", "pinentry"], environment: environment,
            timeout: 60)
        let pinentry = try #require(window.stdoutText.split(separator: "\n").first.map(String.init))
        _ = try run(
            try which("import"), ["-window", "root", "-display", session.display, sandbox.file("pinentry.png")],
            environment: environment)
        _ = try run(xdotool, ["windowfocus", "--sync", pinentry], environment: environment)
        _ = try run(xdotool, ["type", "--delay", "20", "correct horse"], environment: environment)
        _ = try run(xdotool, ["key", "Return"], environment: environment)
        // Unlocked, the app announces it; the provider delivers what was queued; it installs.
        let installed = session.waitForNotification { $0.summary == "Credential installed" }
        #expect(installed != nil, "\(session.notifications())")
        #expect(try tool("dcclient", ["list", "--app", "mail"]).stdoutText.contains("serial"))
        // The passphrase typed into pinentry is in no notification, nor in any argument of any
        // call the bus carried to the notification server.
        #expect(session.calls("Notify") > 0)
        #expect(!session.monitorText().contains("correct horse"))
        #expect(!session.monitorText().lowercased().contains("correct%20horse"))

        // The provider withdraws the authorization with a reason: it is shown, and on request again.
        try tool(
            "dcprovision",
            ["unauthorize", "--client-scheme", "org.example.mail", "--message", "Laptop out of compliance"])
        let unauthorized = session.waitForNotification { $0.body.contains("Laptop out of compliance") }
        #expect(unauthorized?.urgency == 2, "\(session.notifications())")
        try tool("dcclient", ["message", "--show", "--app", "mail"])
        #expect(
            DesktopSession.waitUntil {
                session.notifications().filter { $0.body.contains("Laptop out of compliance") }.count == 2
            })
        try session.screenshot(to: sandbox.file("unauthorized.png"))

        // Two apps retired one at a time: each hears only its own.
        try tool("dcprovision", ["retire", "--client-scheme", "org.example.chat"])
        let chatRetired = session.waitForNotification { $0.summary.contains("retired") }
        #expect(chatRetired?.summary == "chat was retired", "\(session.notifications())")
        #expect(chatRetired?.body.hasSuffix("Its keys, credential and secure files were erased.") == true)
        let apps = try tool("dcclient", ["apps", "--json"]).stdoutText
        #expect(apps.contains("\"authState\" : \"retired\"") && apps.contains("\"authState\" : \"unauthorized\""))
        // Retiring chat said nothing of mail.
        #expect(!session.notifications().contains { $0.summary.hasPrefix("mail") && $0.summary.contains("retired") })
        try tool("dcprovision", ["retire", "--client-scheme", "org.example.mail"])
        #expect(
            DesktopSession.waitUntil {
                session.notifications().filter { $0.summary.contains("retired") }.map(\.summary) == [
                    "chat was retired", "mail was retired",
                ]
            }, "\(session.notifications().map(\.summary))")
        // Still no secret anywhere the bus carried.
        #expect(!session.monitorText().contains("correct horse"))
        // `DC_SCREENSHOT_DIR=DIR` keeps the pictures (docs/images/journey-*.png are made so).
        if let keep = ProcessInfo.processInfo.environment["DC_SCREENSHOT_DIR"] {
            for name in ["waiting", "pinentry", "unauthorized"] {
                _ = try? FileManager.default.removeItem(atPath: keep + "/journey-\(name).png")
                try FileManager.default.copyItem(
                    atPath: sandbox.file(name + ".png"), toPath: keep + "/journey-\(name).png")
            }
        }
        // Nothing the journey started is left but the session itself.
        session.stop()
        #expect(
            DesktopSession.waitUntil(timeout: .seconds(10)) { session.processesLeft().isEmpty },
            "left running: \(session.commandLines(session.processesLeft()))")
    }
}
