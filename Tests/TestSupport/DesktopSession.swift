import Foundation
import SystemSupport

/// A desktop session of a test's own inside its sandbox: a session bus (`dbus-daemon`, listening
/// on `$XDG_RUNTIME_DIR/bus` as systemd's user session does), an X server (`Xvfb`, on a display
/// number it picks free), the notification server `dunst` on both, and `dbus-monitor` recording
/// every call to `org.freedesktop.Notifications`: the oracle of what was notified.
///
/// ``stop()`` ends all four (a test calls it in a `defer`); the bus going away ends any program
/// still connected to it, as dcclient's notification waiter.
public final class DesktopSession: Sendable {
    /// The sandbox it lives in.
    public let sandbox: Sandbox
    /// The bus's address, as `DBUS_SESSION_BUS_ADDRESS` gives it.
    public let busAddress: String
    /// The X display, `:N`.
    public let display: String
    private let processes: [Int32]
    private let monitorLog: String

    /// What a program needs to reach this session: the bus's address and the display.
    public var environment: [String: String] { ["DBUS_SESSION_BUS_ADDRESS": busAddress, "DISPLAY": display] }

    /// Starts the bus, the X server, dunst and the monitor in `sandbox`; throws (having stopped
    /// what started) when one of them does not come up within 30 s.
    public init(in sandbox: Sandbox) throws {
        self.sandbox = sandbox
        var started: [Int32] = []
        func fail(_ what: String, log: String) -> RunningService.StartFailure {
            for process in started.reversed() { Self.end(process) }
            return RunningService.StartFailure(description: "\(what) did not start: \(RunningService.readLog(log))")
        }
        let socket = sandbox.runtimeDirectory + "/bus"
        let config = try sandbox.write(
            "session-bus.conf",
            """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(socket)</listen>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """)
        let busLog = sandbox.file("dbus-daemon.log")
        started.append(
            try Self.start(
                try which("dbus-daemon"), ["--config-file=" + config, "--nofork", "--print-address=1"],
                environment: sandbox.environment, output: busLog))
        guard Self.waitUntil({ FileManager.default.fileExists(atPath: socket) }) else {
            throw fail("dbus-daemon", log: busLog)
        }
        busAddress = "unix:path=" + socket
        // -displayfd: the server takes the first free display number and writes it out.
        let xLog = sandbox.file("xvfb.log")
        started.append(
            try Self.start(
                try which("Xvfb"), ["-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "1280x1024x24"],
                environment: sandbox.environment, output: xLog))
        var number: String?
        guard
            Self.waitUntil({
                number = RunningService.readLog(xLog).split(separator: "\n").first {
                    !$0.isEmpty && $0.allSatisfy(\.isNumber)
                }.map(String.init)
                return number != nil
            }), let number
        else { throw fail("Xvfb", log: xLog) }
        display = ":" + number
        let session = sandbox.environment.merging(["DBUS_SESSION_BUS_ADDRESS": busAddress, "DISPLAY": display]) {
            $1
        }
        monitorLog = sandbox.file("dbus-monitor.log")
        started.append(
            try Self.start(
                try which("dbus-monitor"), ["--session", "interface='org.freedesktop.Notifications'"],
                environment: session, output: monitorLog))
        // A left click invokes the default action (and closes the notification); nothing times out
        // by itself unless the sender gave it a lifetime.
        let dunstConfig = try sandbox.write(
            "dunstrc",
            """
            [global]
                font = Monospace 11
                origin = top-right
                offset = 10x10
                width = 420
                frame_width = 2
                mouse_left_click = do_action, close_current
                show_indicators = true
            [urgency_low]
                timeout = 0
            [urgency_normal]
                timeout = 0
            [urgency_critical]
                timeout = 0

            """)
        let dunstLog = sandbox.file("dunst.log")
        started.append(
            try Self.start(
                try which("dunst"), ["-config", dunstConfig], environment: session, output: dunstLog))
        let probe = {
            (try? run(
                try which("dbus-send"),
                [
                    "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.Notifications",
                ], environment: session, timeout: 10))?.stdoutText.contains("boolean true") == true
        }
        guard Self.waitUntil(probe) else { throw fail("dunst", log: dunstLog) }
        processes = started
    }

    /// Polls `condition` every 20 ms for at most `timeout`.
    public static func waitUntil(timeout: Duration = .seconds(30), _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }

    /// Starts `executable` with `arguments`, its output appended to `output`, detached
    /// (`ChildProcess.startDetached`: a session of its own, an empty signal mask and default
    /// dispositions, so that SIGTERM ends it cleanly — Xvfb then removes its lock file and socket;
    /// a child spawned from a test thread would inherit that thread's blocked signals).
    static func start(
        _ executable: String, _ arguments: [String], environment: [String: String], output: String
    ) throws -> Int32 {
        try ChildProcess.startDetached(
            "/bin/sh",
            arguments: ["-c", "log=$1; shift; exec \"$@\" >>\"$log\" 2>&1", "sh", output, executable] + arguments,
            environment: environment)
    }

    /// Sends SIGTERM to `pid` and waits (10 s at most, then SIGKILL) until it is gone.
    static func end(_ pid: Int32) {
        kill(pid, SIGTERM)
        if !waitUntil(timeout: .seconds(10), { kill(pid, 0) != 0 }) {
            kill(pid, SIGKILL)
            _ = waitUntil(timeout: .seconds(10)) { kill(pid, 0) != 0 }
        }
    }

    /// Ends dunst, the monitor, the X server and the bus, and waits for each.
    public func stop() {
        for process in processes.reversed() { Self.end(process) }
    }

    /// One `Notify` call as the monitor recorded it.
    public struct Notify: Sendable, Equatable {
        /// The application name.
        public var appName: String
        /// The icon.
        public var icon: String
        /// The summary.
        public var summary: String
        /// The body.
        public var body: String
        /// The actions: key, label, key, label…
        public var actions: [String]
        /// The urgency hint, if given.
        public var urgency: Int?
        /// The expiry timeout in milliseconds.
        public var expireTimeout: Int
    }

    /// How many calls of `member` (`Notify`, `CloseNotification`…) the monitor saw so far.
    public func calls(_ member: String) -> Int {
        RunningService.readLog(monitorLog).components(separatedBy: "member=\(member)\n").count - 1
    }

    /// Everything the monitor recorded so far, as dbus-monitor printed it: every call to
    /// `org.freedesktop.Notifications` with all its arguments (for a test that looks for what
    /// must never be there, such as a passphrase).
    public func monitorText() -> String { RunningService.readLog(monitorLog) }

    /// Every `Notify` call so far, in order.
    public func notifications() -> [Notify] { Self.parse(RunningService.readLog(monitorLog)) }

    /// The `Notify` calls in dbus-monitor's text: strings print as `string "…"`, unescaped, so a
    /// string that holds a line break spans lines; the fields come in the call's order.
    static func parse(_ log: String) -> [Notify] {
        var found: [Notify] = []
        let calls = log.components(separatedBy: "member=Notify\n").dropFirst()
        for call in calls {
            var rest = Substring(call)
            func string() -> String? {
                guard let start = rest.range(of: "string \"") else { return nil }
                rest = rest[start.upperBound...]
                // A string ends at a quote followed by a line break and the next argument's indent.
                guard let end = rest.range(of: "\"\n   ") ?? rest.range(of: "\"\n") else { return nil }
                let value = String(rest[..<end.lowerBound])
                rest = rest[end.upperBound...]
                return value
            }
            guard let app = string(), let icon = string(), let summary = string(), let body = string(),
                let arrayEnd = rest.range(of: "\n   ]")
            else { continue }
            let actionsText = rest[..<arrayEnd.lowerBound]
            let actions = actionsText.components(separatedBy: "string \"").dropFirst().map {
                String($0[..<($0.range(of: "\"", options: .backwards)?.lowerBound ?? $0.endIndex)])
            }
            rest = rest[arrayEnd.upperBound...]
            var urgency: Int?
            if let hint = rest.range(of: "string \"urgency\"") {
                let after = rest[hint.upperBound...]
                if let byte = after.range(of: "byte ") {
                    urgency = Int(after[byte.upperBound...].prefix { $0.isNumber })
                }
            }
            var timeout = 0
            if let int = rest.range(of: "int32 ") {
                timeout = Int(rest[int.upperBound...].prefix { $0.isNumber || $0 == "-" }) ?? 0
            }
            found.append(
                Notify(
                    appName: app, icon: icon, summary: summary, body: body, actions: actions, urgency: urgency,
                    expireTimeout: timeout))
        }
        return found
    }

    /// Waits (at most `timeout`) until a `Notify` call matches `predicate`, and returns it.
    public func waitForNotification(
        timeout: Duration = .seconds(60), _ predicate: (Notify) -> Bool
    ) -> Notify? {
        var match: Notify?
        _ = Self.waitUntil(timeout: timeout) {
            match = notifications().first(where: predicate)
            return match != nil
        }
        return match
    }

    /// Closes every notification dunst shows (`dunstctl close-all`, through dunst's own bus interface).
    public func closeAll() throws {
        let environment = sandbox.environment.merging(self.environment) { $1 }
        let closed = try run(try which("dunstctl"), ["close-all"], environment: environment)
        guard closed.status == 0 else {
            throw RunningService.StartFailure(description: "dunstctl close-all failed: \(closed.stderrText)")
        }
    }

    /// The X window dunst shows its notifications in.
    func notificationWindow() throws -> String {
        let environment = sandbox.environment.merging(self.environment) { $1 }
        let windows = try run(try which("xdotool"), ["search", "--class", "Dunst"], environment: environment)
        guard let window = windows.stdoutText.split(separator: "\n").first else {
            throw RunningService.StartFailure(description: "dunst shows no window: \(windows.stderrText)")
        }
        return String(window)
    }

    /// Left-clicks the topmost notification dunst shows, with xdotool, as a person would.
    public func clickTopNotification() throws {
        let environment = sandbox.environment.merging(self.environment) { $1 }
        let window = try notificationWindow()
        let geometry = try run(
            try which("xdotool"), ["getwindowgeometry", "--shell", String(window)], environment: environment
        ).stdoutText
        func value(_ name: String) -> Int {
            geometry.split(separator: "\n").first { $0.hasPrefix(name + "=") }.flatMap {
                Int($0.dropFirst(name.count + 1))
            }
                ?? 0
        }
        let (x, y) = (value("X") + 40, value("Y") + 20)
        let clicked = try run(
            try which("xdotool"), ["mousemove", String(x), String(y), "click", "1"], environment: environment)
        guard clicked.status == 0 else {
            throw RunningService.StartFailure(description: "xdotool could not click: \(clicked.stderrText)")
        }
    }

    /// Saves what dunst's window shows now as a PNG at `path` (ImageMagick's `import`).
    public func screenshot(to path: String) throws {
        let environment = sandbox.environment.merging(self.environment) { $1 }
        let result = try run(
            try which("import"), ["-window", try notificationWindow(), "-display", display, path],
            environment: environment)
        guard result.status == 0 else {
            throw RunningService.StartFailure(description: "import failed: \(result.stderrText)")
        }
    }

    /// The processes the test's tools started and left, not the session's own (its bus, X server,
    /// notification server, monitor): a URL's handlers may still be answering one another when a
    /// test's last check passes.
    public func toolProcessesLeft() -> [Int32] {
        processesLeft().filter { !processes.contains($0) }
    }

    /// The command lines of `processes` (`pid: argv…`, its state and what it waits in), for a test
    /// that names what was left running; with `threads`, each thread's state, CPU ticks and
    /// system call too (`/proc/PID/task/TID/stat` and `syscall`), for one that must say where a
    /// process that should have ended is.
    public func commandLines(_ processes: [Int32], threads: Bool = false) -> String {
        /// The fields of a `stat` file after the command name: state is the first, utime and
        /// stime the 12th and 13th.
        func statFields(_ path: String) -> [Substring] {
            (try? String(contentsOfFile: path, encoding: .utf8))?.split(separator: ")").last?.split(separator: " ")
                ?? []
        }
        return processes.map { pid in
            let argv = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline").map {
                $0.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
            }
            let state = statFields("/proc/\(pid)/stat").first.map(String.init) ?? "?"
            let wchan = (try? String(contentsOfFile: "/proc/\(pid)/wchan", encoding: .utf8)) ?? "?"
            var line = "\(pid): \(argv ?? "(gone)") [state \(state), waiting in \(wchan)]"
            if threads {
                let tasks = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).sorted()
                line +=
                    " threads: "
                    + tasks.map { tid in
                        let fields = statFields("/proc/\(pid)/task/\(tid)/stat")
                        let ticks = fields.count > 12 ? "\(fields[11])+\(fields[12])" : "?"
                        let call =
                            (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/syscall", encoding: .utf8))?
                            .split(separator: " ").first.map(String.init) ?? "?"
                        return "\(tid) \(fields.first ?? "?") ticks \(ticks) syscall \(call)"
                    }.joined(separator: ", ")
            }
            return line
        }.joined(separator: "; ")
    }

    /// The processes whose environment holds this sandbox's `HOME`: what a test started and left.
    /// Run as root it sees them all; run as an ordinary user it cannot see a tool past its
    /// start-up, which makes itself undumpable (`ProcessSecrecy`), so that its environment is
    /// root's to read: the suite run as root is the one that holds this check fully.
    public func processesLeft() -> [Int32] {
        let marker = Array("HOME=\(sandbox.home)\0".utf8)
        let own = getpid()
        return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { entry in
            guard let pid = Int32(entry), pid != own,
                let environ = FileManager.default.contents(atPath: "/proc/\(entry)/environ")
            else { return nil }
            let bytes = Array(environ)
            guard bytes.count >= marker.count else { return nil }
            for start in 0...(bytes.count - marker.count)
            where bytes[start..<(start + marker.count)].elementsEqual(marker) {
                // A zombie keeps no environment; a running one is what counts.
                return pid
            }
            return nil
        }
    }
}
