import Foundation
import SystemSupport
import TestSupport
import Testing

/// dcclient's desktop notifications, shown by a real notification server (dunst on Xvfb) on a
/// session bus of the test's own; `dbus-monitor` is the oracle of what was posted, and xdotool
/// clicks as a person would.
@Suite("Desktop notifications through a real session bus and dunst", .ownThreads, .timeLimit(.minutes(5)))
struct DesktopNotificationTests {
    static let scheme = ["--client-scheme", "org.example.dcclient"]
    static let send = [
        "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
        "--client-scheme", "org.example.dcclient",
    ]

    /// A managed client set up in a sandbox with a desktop session of its own; `body` runs, then
    /// the session stops and no process the test started may be left.
    static func withDesktop(
        _ label: String, tools make: (String) throws -> Tools = { try Tools($0) },
        _ body: (Tools, DesktopSession) async throws -> Void
    ) async throws {
        let tools = try make(label)
        defer { tools.sandbox.remove() }
        let session = try DesktopSession(in: tools.sandbox)
        do {
            try await body(tools, session)
        } catch {
            session.stop()
            throw error
        }
        // The handlers a URL started may still be answering one another (a client's result to the
        // provider): they finish while the session they may talk to is still there.
        _ = DesktopSession.waitUntil(timeout: .seconds(15)) { session.toolProcessesLeft().isEmpty }
        session.stop()
        // A handler is given at most 60 s by the one that opened it (SchemeHandlers.open), which
        // then ends it: nothing may outlive that deadline.
        _ = DesktopSession.waitUntil(timeout: .seconds(90)) { session.processesLeft().isEmpty }
        let left = session.processesLeft()
        let said = session.commandLines(left, threads: true)
        // A known breach, kept visible: under a full parallel run as an ordinary user, the
        // provider's handler of a result URL has been seen running (state R) past that deadline.
        // Not yet understood. As an ordinary user, only processes that are still dumpable are
        // seen here (a tool makes itself undumpable at start-up, and its environment is then
        // root's to read), so the one seen had not got that far, or undid it; the threads'
        // states, CPU ticks and system calls are recorded to tell where it is.
        if !left.isEmpty,
            left.allSatisfy({ session.commandLines([$0]).contains("handle-url org.example.provider:/result?") })
        {
            withKnownIssue("the provider's handler of a result URL outlives its deadline", isIntermittent: true) {
                Issue.record("left running: \(said)")
            }
            for pid in left { kill(pid, SIGKILL) }
        } else {
            #expect(left.isEmpty, "left running: \(said)")
        }
    }

    /// Runs dcclient or dcprovision with the session's bus address and display.
    @discardableResult
    static func run(_ tools: Tools, _ session: DesktopSession, _ tool: String, _ arguments: [String]) throws
        -> ProcessResult
    {
        try tools.sandbox.run(
            Binaries.directory + "/" + tool, arguments, environment: session.environment, timeout: 120)
    }

    @Test(
        "Unauthorized and authorized through handle-url, and message --show, post the state with the provider's message, its markup escaped"
    )
    func authorization() async throws {
        try await Self.withDesktop("notify-authorization") { tools, session in
            // The provider's handler starts dcclient with the short environment (no bus address): it
            // finds the bus at $XDG_RUNTIME_DIR/bus, as in a systemd session.
            try tools.setUpManagedClient()
            let authorized = session.waitForNotification { $0.summary == "dcclient is authorized" }
            #expect(authorized?.appName == "dcclient")
            #expect(authorized?.actions == [])

            try tools.check(
                "dcprovision", ["unauthorize"] + Self.scheme + ["--message", "<b>Device</b> out of compliance & more"])
            let unauthorized = try #require(
                session.waitForNotification { $0.summary == "dcclient is not authorized" })
            #expect(unauthorized.body == "&lt;b&gt;Device&lt;/b&gt; out of compliance &amp; more")
            #expect(unauthorized.urgency == 2)

            let shown = try Self.run(tools, session, "dcclient", ["message", "--show"])
            #expect(shown.status == 0, "\(shown.stderrText)")
            #expect(shown.stdoutText == "unauthorized: <b>Device</b> out of compliance & more\n")
            #expect(shown.stderr.isEmpty, "\(shown.stderrText)")
            try await eventually {
                session.notifications().filter { $0.summary == "dcclient is not authorized" }.count == 2
            }

            // Authorized again while locked (unauthorize locked the app): applied at once, and the
            // acknowledgement waits for an unlock, which the notification offers.
            // Its message starts with "-": still the body, never an option of the waiter's.
            try tools.check("dcprovision", ["authorize"] + Self.scheme + ["--message=-- all clear"])
            let offered = try #require(
                session.waitForNotification { $0.summary == "dcclient is authorized" && !$0.actions.isEmpty })
            #expect(offered.body.hasPrefix("-- all clear"), "\(offered.body)")
            #expect(offered.actions == ["default", "Unlock"])
            #expect(offered.body.hasSuffix("Unlock dcclient to acknowledge the provider's policy."), "\(offered.body)")
            // Unlocked in a terminal instead: the waiter withdraws its offer and ends.
            try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
            try await eventually { session.calls("CloseNotification") == 1 }

            // Turned off in the desktop settings: message --show posts nothing, and says nothing.
            try FileManager.default.createDirectory(
                atPath: tools.sandbox.configHome + "/derived-credentials", withIntermediateDirectories: true)
            try tools.sandbox.write("home/.config/derived-credentials/desktop.conf", "notifications off\n")
            let before = session.notifications().count
            let off = try Self.run(tools, session, "dcclient", ["message", "--show"])
            #expect(off.status == 0 && off.stderr.isEmpty, "\(off.stderrText)")
            try await Task.sleep(for: .milliseconds(500))
            #expect(session.notifications().count == before)
        }
    }

    @Test(
        "A delivery that finds the client locked: handle-url exits 69 and offers Unlock; a click in dunst runs dcclient unlock, whose failure is told; the delivery is installed once unlocked"
    )
    func deliveryWaitingForUnlock() async throws {
        try await Self.withDesktop("notify-unlock") { tools, session in
            try tools.setUpManagedClient()
            // The unlock the action runs asks through a pinentry when there is no terminal: here one
            // that fails, so the outcome does not depend on what is installed.
            try FileManager.default.createDirectory(
                atPath: tools.sandbox.configHome + "/derived-credentials", withIntermediateDirectories: true)
            try tools.sandbox.write("home/.config/derived-credentials/desktop.conf", "pinentry-program /bin/false\n")
            try tools.check("dcclient", ["lock"])
            let queued = try tools.check("dcprovision", Self.send + ["--queue"])
            let output = queued.stdoutText + queued.stderrText
            let start = try #require(output.range(of: "org.example.dcclient:/deliver?"))
            let url = String(output[start.lowerBound...].prefix { !$0.isWhitespace })
            // The set-up's notifications go; the one to click is then the only one shown.
            _ = session.waitForNotification { $0.summary == "dcclient is authorized" }
            try session.closeAll()

            let locked = try Self.run(tools, session, "dcclient", ["handle-url", url])
            #expect(locked.status == 69, "\(locked.stderrText)")
            #expect(locked.stderrText.contains("the client is locked"), "\(locked.stderrText)")
            let asked = try #require(session.waitForNotification { $0.summary == "A credential waits for an unlock" })
            #expect(asked.body == "Unlock dcclient to install the credential the provider sent.")
            #expect(asked.actions == ["default", "Unlock"])
            #expect(asked.expireTimeout == 600_000)
            #expect(asked.icon == "dialog-password")
            // The URL is not shown: it stays in the waiter's arguments.
            #expect(!asked.body.contains("deliver?"))

            try await Task.sleep(for: .milliseconds(500))
            let screenshot = tools.sandbox.file("notification.png")
            try session.screenshot(to: screenshot)
            #expect(try Data(contentsOf: URL(fileURLWithPath: screenshot)).starts(with: [0x89, 0x50, 0x4E, 0x47]))
            // `DC_SCREENSHOT_DIR=docs/images` keeps it (docs/images/notification.png is made so).
            if let keep = ProcessInfo.processInfo.environment["DC_SCREENSHOT_DIR"] {
                _ = try? FileManager.default.removeItem(atPath: keep + "/notification.png")
                try FileManager.default.copyItem(atPath: screenshot, toPath: keep + "/notification.png")
            }

            try session.clickTopNotification()
            let failed = try #require(session.waitForNotification { $0.summary == "dcclient was not unlocked" })
            #expect(!failed.body.isEmpty)
            #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("(locked)"))

            // Unlocked by hand, the provider sends what it queued, and the install is told.
            try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
            let installed = try #require(session.waitForNotification { $0.summary == "Credential installed" })
            #expect(installed.body.hasPrefix("dcclient installed \""))
        }
    }

    @Test(
        "Attack: a locked delivery's URL opened ten times makes one offer and one waiting process; an ActionInvoked forged by another program on the bus unlocks nothing; the real click still does"
    )
    func replayedAndForged() async throws {
        try await Self.withDesktop("notify-replay") { tools, session in
            try tools.setUpManagedClient()
            try FileManager.default.createDirectory(
                atPath: tools.sandbox.configHome + "/derived-credentials", withIntermediateDirectories: true)
            try tools.sandbox.write("home/.config/derived-credentials/desktop.conf", "pinentry-program /bin/false\n")
            // The set-up's notifications go; the offer is then the only one shown.
            _ = session.waitForNotification { $0.summary == "dcclient is authorized" }
            try session.closeAll()
            try tools.check("dcclient", ["lock"])
            let queued = try tools.check("dcprovision", Self.send + ["--queue"])
            let output = queued.stdoutText + queued.stderrText
            let start = try #require(output.range(of: "org.example.dcclient:/deliver?"))
            let url = String(output[start.lowerBound...].prefix { !$0.isWhitespace })
            // The provider's knock made the first offer.
            _ = session.waitForNotification { $0.summary == "A credential waits for an unlock" }
            for _ in 0..<10 {
                let replayed = try Self.run(tools, session, "dcclient", ["handle-url", url])
                #expect(replayed.status == 69, "\(replayed.stderrText)")
            }
            try await Task.sleep(for: .seconds(3))
            #expect(session.notifications().filter { $0.summary == "A credential waits for an unlock" }.count == 1)
            // The waiters of this delivery, by their argv (world-readable, unlike the environment
            // of a tool that made itself non-dumpable, when the suite runs as an ordinary user).
            let request = try #require(url.split(separator: "&").first { $0.hasPrefix("request=") })
            let waiters = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter { entry in
                guard Int32(entry) != nil,
                    let line = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline").map({
                        String(decoding: $0, as: UTF8.self)
                    })
                else { return false }
                return line.contains("notification-wait") && line.contains(String(request))
            }
            #expect(waiters.count == 1, "\(waiters)")

            // Another program on the bus broadcasts the click for every likely id: ignored, since
            // only the notification server's signals count.
            let environment = tools.sandbox.environment.merging(session.environment) { $1 }
            for id in 1...40 {
                _ = try TestSupport.run(
                    try which("dbus-send"),
                    [
                        "--session", "--type=signal", "/org/freedesktop/Notifications",
                        "org.freedesktop.Notifications.ActionInvoked", "uint32:\(id)", "string:default",
                    ], environment: environment, timeout: 10)
            }
            try await Task.sleep(for: .seconds(2))
            #expect(!session.notifications().contains { $0.summary == "dcclient was not unlocked" })
            // The person's click still unlocks (here through a pinentry that fails, and says so).
            try session.clickTopNotification()
            #expect(session.waitForNotification { $0.summary == "dcclient was not unlocked" } != nil)
        }
    }

    @Test("check: a credential ending within the window posts that it expires soon; one that is not due posts nothing")
    func expirySoon() async throws {
        try await Self.withDesktop("notify-expiry") { tools, session in
            try tools.setUpManagedClient()
            try tools.check("dcprovision", Self.send + ["--option", "validity-days=3"])
            #expect(session.waitForNotification { $0.summary == "Credential installed" } != nil)
            let checked = try Self.run(tools, session, "dcclient", ["check"])
            #expect(checked.status == 0, "\(checked.stderrText)")
            let soon = try #require(
                session.waitForNotification { $0.summary == "dcclient: the credential expires soon" })
            #expect(soon.body.hasPrefix("A certificate ends within 30 days"), "\(soon.body)")
            #expect(soon.body.hasSuffix("Renew it: dcclient check --app dcclient --renew-within 30."), "\(soon.body)")
            let before = session.notifications().count
            try Self.run(tools, session, "dcclient", ["check", "--renew-within", "1"])
            try await Task.sleep(for: .milliseconds(500))
            #expect(session.notifications().count == before)
        }
    }

    @Test(
        "The daily check with two apps, as the systemd unit runs it (no app named): each app's expiry is told naming it; one app locked fails alone (exit 69, said naming it) while the other is renewed and its renewal told"
    )
    func checkEveryApp() async throws {
        try await Self.withDesktop("notify-check-apps", tools: ManagedAppsCommandTests.twoApps) { tools, session in
            for app in ["mail", "chat"] {
                try tools.check(
                    "dcprovision",
                    [
                        "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
                        "--client-scheme", "org.example.\(app)", "--option", "validity-days=3",
                    ])
                #expect(
                    session.waitForNotification {
                        $0.summary == "Credential installed" && $0.body.hasPrefix("\(app) installed")
                    } != nil, "\(session.notifications())")
            }
            // Without --renew-within: a report of each app, and a notification for each, naming it.
            let reported = try Self.run(tools, session, "dcclient", ["check"])
            #expect(reported.status == 0, "\(reported.stderrText)")
            #expect(reported.stdoutText.contains("app chat:\n") && reported.stdoutText.contains("app mail:\n"))
            #expect(reported.stdoutText.components(separatedBy: "renewal: due").count == 3, "\(reported.stdoutText)")
            for app in ["mail", "chat"] {
                let soon = session.waitForNotification { $0.summary == "\(app): the credential expires soon" }
                #expect(soon?.body.hasSuffix("dcclient check --app \(app) --renew-within 30.") == true)
            }
            let json = try Self.run(tools, session, "dcclient", ["check", "--json"])
            let checks = try #require(try jsonPayload(json.stdout, "checks") as? [[String: Any]])
            #expect(checks.map { $0["app"] as? String } == ["chat", "mail"])
            #expect(checks.allSatisfy { $0["exitStatus"] as? Int == 0 && $0["report"] != nil })

            // The unit's own command line, with chat locked: mail is renewed, chat fails alone.
            let unit = try readText(Repository.root + "/packaging/systemd/dcclient-check.service.in")
            let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
            let words = execStart.split(separator: " ").map(String.init)
            #expect(words.first == "ExecStart=@bindir@/dcclient", "\(execStart)")
            try tools.check("dcclient", ["lock", "--app", "chat"])
            let daily = try Self.run(tools, session, "dcclient", Array(words.dropFirst()))
            #expect(daily.status == 69, "\(daily.stderrText)")
            #expect(daily.stderrText.contains("dcclient: chat: "), "\(daily.stderrText)")
            #expect(daily.stdoutText.contains("app mail:\n"), "\(daily.stdoutText)")
            #expect(daily.stdoutText.contains("renewal: due (a certificate ends within 30 days): requested"))
            let renewed = try #require(session.waitForNotification { $0.summary == "Credential renewed" })
            #expect(renewed.body.hasPrefix("mail installed \""), "\(renewed.body)")
            #expect(
                !session.notifications().contains { $0.summary == "Credential renewed" && $0.body.hasPrefix("chat") })
            // Renewed, mail is not due any more; chat still is, and is renewed once unlocked.
            try tools.check("dcclient", ["unlock", "--app", "chat", "--passphrase-file", "pass.txt"])
            let again = try Self.run(tools, session, "dcclient", Array(words.dropFirst()))
            #expect(again.status == 0, "\(again.stderrText)")
            #expect(
                session.waitForNotification {
                    $0.summary == "Credential renewed" && $0.body.hasPrefix("chat installed")
                } != nil)
        }
    }

    @Test("A hostile body is escaped, its control and reordering characters removed, and cut to 400 characters")
    func hostileBody() async throws {
        try await Self.withDesktop("notify-hostile") { tools, session in
            let hostile =
                "<b>bold</b> & <a href='x'>link</a>\u{1B}[31m\u{7}\u{202E}evil\u{0}\tend\r\n"
                + String(repeating: "x", count: 1000)
            let id = DesktopNotifications.post(
                DesktopNotification(summary: "Hostile\u{1B}[2J <i>summary</i>", body: hostile),
                appName: "hostile-test", settings: DesktopSettings(),
                environment: tools.sandbox.xdg.merging(session.environment) { $1 })
            #expect(id != nil)
            let posted = try #require(session.waitForNotification { $0.appName == "hostile-test" })
            let cleaned = "<b>bold</b> & <a href='x'>link</a>[31mevil end \n" + String(repeating: "x", count: 1000)
            let cut = String(cleaned.prefix(399)) + "…"
            #expect(posted.body == DesktopNotifications.markupEscaped(cut))
            #expect(posted.summary == "Hostile[2J &lt;i&gt;summary&lt;/i&gt;")
            #expect(!posted.body.unicodeScalars.contains { $0.properties.generalCategory == .control && $0 != "\n" })
        }
    }

    @Test(
        "No session bus: message --show, handle-url and check succeed or fail as before, with nothing more on standard error"
    )
    func noBus() throws {
        let tools = try Tools("notify-no-bus")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        #expect(!FileManager.default.fileExists(atPath: tools.sandbox.runtimeDirectory + "/bus"))
        let shown = try tools.run("dcclient", ["message", "--show"])
        #expect(shown.status == 0)
        #expect(shown.stdoutText == "authorized\n")
        #expect(shown.stderr.isEmpty, "\(shown.stderrText)")
        try tools.check("dcclient", ["lock"])
        let queued = try tools.check("dcprovision", Self.send + ["--queue"])
        let output = queued.stdoutText + queued.stderrText
        let start = try #require(output.range(of: "org.example.dcclient:/deliver?"))
        let url = String(output[start.lowerBound...].prefix { !$0.isWhitespace })
        let locked = try tools.run("dcclient", ["handle-url", url])
        #expect(locked.status == 69)
        #expect(locked.stderrText.split(separator: "\n").count == 1, "\(locked.stderrText)")
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        let checked = try tools.run("dcclient", ["check"])
        #expect(checked.status == 0, "\(checked.stderrText)")
        #expect(checked.stderr.isEmpty, "\(checked.stderrText)")
        // A bus address that leads nowhere is no bus either.
        let nowhere = try tools.sandbox.run(
            Binaries.directory + "/dcclient", ["message", "--show"],
            environment: ["DBUS_SESSION_BUS_ADDRESS": "unix:path=" + tools.sandbox.file("no-such-bus")])
        #expect(nowhere.status == 0 && nowhere.stderr.isEmpty, "\(nowhere.stderrText)")
    }
}
