import Foundation
import TestSupport
import Testing

/// A command on a pseudo-terminal of its own (script(1)), typed into as a person types: each
/// answer is written only once the text it answers has appeared in the terminal's output. The
/// terminal's output (everything the command and a pinentry-tty showed there) is kept in a file.
final class TerminalSession {
    let log: String
    let fifo: String
    let process: SpawnedProcess
    private var writer: Int32
    private var seen = 0

    /// Starts `shell` (a shell command line) under script(1) with the sandbox's environment plus
    /// `environment`; the typed text goes through a FIFO to script's standard input.
    init(_ shell: String, in sandbox: Sandbox, label: String, environment: [String: String] = [:]) throws {
        log = sandbox.file("\(label).terminal")
        fifo = sandbox.file("\(label).keys")
        guard mkfifo(fifo, 0o600) == 0 else { throw POSIXError(.EIO) }
        // Read-write, so that opening does not wait for a reader and script never sees an end of
        // file before the session is over.
        writer = open(fifo, O_RDWR | O_CLOEXEC)
        var full = sandbox.environment.merging(environment) { $1 }
        full["TERM"] = full["TERM"] ?? "xterm"
        process = try SpawnedProcess(
            "/bin/bash", ["-c", "exec script -qefc \"$0\" /dev/null < \"$1\"", shell, fifo], environment: full,
            output: log)
    }

    deinit { if writer >= 0 { close(writer) } }

    /// The terminal's output so far.
    var output: String { (try? readText(log)) ?? "" }

    /// Waits until `text` appears after what earlier waits saw; true when it did in time.
    @discardableResult
    func waitFor(_ text: String, timeout: Duration = .seconds(30)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let bytes = Array(output.utf8)
            if bytes.count > seen,
                let range = String(decoding: bytes[seen...], as: UTF8.self).range(of: text)
            {
                let after = String(decoding: bytes[seen...], as: UTF8.self)[..<range.upperBound]
                seen += after.utf8.count
                return true
            }
            usleep(50_000)
        }
        return false
    }

    /// Types `text` on the terminal.
    func type(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
    }

    /// Waits for the session to end (killing it at the deadline) and returns the `exit=N` the
    /// shell line printed, or nil.
    func finish(timeout: Duration = .seconds(60)) -> Int? {
        waitFor("exit=", timeout: timeout)
        close(writer)
        writer = -1
        process.wait(timeout: .seconds(10))
        guard let range = output.range(of: "exit=") else { return nil }
        return Int(output[range.upperBound...].prefix { $0.isNumber })
    }
}

/// The processes of this user whose environment points `HOME` into `sandbox`: what a test left
/// running (a pinentry, an X server, a dcclient).
func processes(inside sandbox: Sandbox) -> [String] {
    let marker = Data("HOME=\(sandbox.home)\0".utf8)
    let own = "\(getpid())"
    return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter { pid in
        guard pid != own, pid.allSatisfy(\.isNumber),
            let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ")
        else { return false }
        return environ.range(of: marker) != nil
    }.compactMap { pid in
        (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8))?.replacingOccurrences(
            of: "\0", with: " ")
    }
}

/// Writes the desktop settings file naming `program` as the pinentry.
func configurePinentry(_ program: String, in sandbox: Sandbox) throws {
    let directory = sandbox.configHome + "/derived-credentials"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try Data("pinentry-program \(program)\n".utf8).write(to: URL(fileURLWithPath: directory + "/desktop.conf"))
}

/// `dcclient init`'s arguments for the example client, with no passphrase option.
private let initArguments = [
    "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
]

/// A shell command line of `arguments`, each single-quoted.
func shellLine(_ arguments: [String]) -> String {
    arguments.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
}

@Suite(
    "Secrets asked the desktop's way: the terminal, pinentry-tty, pinentry-gtk2, else the one-line error",
    .serialized, .ownThreads, .timeLimit(.minutes(5)))
struct PinentryTests {
    static let passphrase = "correct horse battery"
    static var dcclient: String { Binaries.directory + "/dcclient" }

    @Test(
        "With standard input not a terminal, dcclient init and unlock ask through the configured pinentry-tty on the controlling terminal; a wrong passphrase is asked again with the pinentry's error; nothing is echoed"
    )
    func pinentryTTY() throws {
        let tools = try Tools("pinentry-tty")
        defer { tools.sandbox.remove() }
        try configurePinentry("/usr/bin/pinentry-tty", in: tools.sandbox)
        let setUp = try TerminalSession(
            shellLine([Self.dcclient] + initArguments) + " < /dev/null; echo \"exit=$?\"", in: tools.sandbox,
            label: "init")
        #expect(setUp.waitFor("Choose a passphrase for the encrypted store of the managed client org.example.dcclient"))
        #expect(setUp.waitFor("Passphrase:"))
        setUp.type(Self.passphrase + "\r")
        #expect(setUp.waitFor("Repeat:"))
        setUp.type(Self.passphrase + "\r")
        #expect(setUp.finish() == 0, "\(setUp.output)")
        #expect(!setUp.output.contains(Self.passphrase), "\(setUp.output)")
        try tools.check("dcclient", ["lock"])

        let unlock = try TerminalSession(
            shellLine([Self.dcclient, "unlock"]) + " < /dev/null; echo \"exit=$?\"", in: tools.sandbox, label: "unlock")
        #expect(unlock.waitFor("to unlock its store"))
        #expect(unlock.waitFor("Passphrase:"))
        unlock.type("wrong horse\r")
        #expect(unlock.waitFor("The passphrase does not unlock the client."), "\(unlock.output)")
        #expect(unlock.waitFor("Passphrase:"))
        unlock.type(Self.passphrase + "\r")
        #expect(unlock.finish() == 0, "\(unlock.output)")
        for secret in [Self.passphrase, "wrong horse"] {
            #expect(!unlock.output.contains(secret), "\(unlock.output)")
        }
        #expect(try tools.run("dcclient", ["status"]).stdoutText.contains("unlocked:         yes"))
        #expect(processes(inside: tools.sandbox).isEmpty, "\(processes(inside: tools.sandbox))")
    }

    @Test(
        "The pinentry's argv is its path alone, its environment the minimal one plus the display variables: no secret, nothing else of ours"
    )
    func pinentryEnvironment() throws {
        let tools = try Tools("pinentry-environment")
        defer { tools.sandbox.remove() }
        // The real pinentry-tty behind a wrapper that records what it was started with.
        let recorded = tools.sandbox.file("recorded")
        let wrapper = try tools.sandbox.write(
            "pinentry-recorder",
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '\(recorded).argv'\nenv > '\(recorded).env'\n"
                + "exec /usr/bin/pinentry-tty \"$@\"\n")
        chmod(wrapper, 0o700)
        try configurePinentry(wrapper, in: tools.sandbox)
        try tools.sandbox.write("pass.txt", Self.passphrase + "\n")
        try tools.check("dcclient", initArguments + ["--passphrase-file", "pass.txt"])
        try tools.check("dcclient", ["lock"])
        let session = try TerminalSession(
            shellLine([Self.dcclient, "unlock"]) + " < /dev/null; echo \"exit=$?\"", in: tools.sandbox, label: "unlock",
            environment: [
                "DC_TEST_TOKEN": "not-for-the-pinentry", "DISPLAY": "", "XAUTHORITY": tools.sandbox.file("xauth"),
                "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent", "GPG_AGENT_INFO": "not-for-the-pinentry",
            ])
        #expect(session.waitFor("Passphrase:"))
        session.type(Self.passphrase + "\r")
        #expect(session.finish() == 0, "\(session.output)")
        #expect(try readText(recorded + ".argv") == wrapper + "\n")
        let environment = try readText(recorded + ".env")
        let names = Set(
            environment.split(separator: "\n").compactMap { $0.split(separator: "=").first.map(String.init) })
        let allowed: Set<String> = [
            "PATH", "HOME", "LANG", "SOFTHSM2_CONF", "DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "TERM",
        ]
        // sh adds PWD (and SHLVL, _) itself.
        let extra = names.subtracting(allowed).subtracting(["PWD", "SHLVL", "_", "OLDPWD"]).filter {
            !$0.hasPrefix("XDG_") && !$0.hasPrefix("LC_") && !$0.hasPrefix("P11_KIT_")
        }
        #expect(extra.isEmpty, "\(environment)")
        #expect(names.isSuperset(of: ["XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "TERM", "HOME"]), "\(environment)")
        #expect(!environment.contains("not-for-the-pinentry"))
        #expect(!environment.contains(Self.passphrase))
    }

    @Test("A cancelled pinentry: one error line, exit 77, nothing written")
    func cancelled() throws {
        let tools = try Tools("pinentry-cancel")
        defer { tools.sandbox.remove() }
        try configurePinentry("/usr/bin/pinentry-tty", in: tools.sandbox)
        let session = try TerminalSession(
            shellLine([Self.dcclient] + initArguments) + " < /dev/null; echo \"exit=$?\"", in: tools.sandbox,
            label: "cancel")
        #expect(session.waitFor("Passphrase:"))
        session.type("\u{04}")  // Ctrl-D: pinentry-tty's cancel
        #expect(session.finish() == 77, "\(session.output)")
        let errors = session.output.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("dcclient:") }
        #expect(errors.count == 1, "\(session.output)")
        #expect(errors.first?.contains("the pinentry was cancelled; nothing was changed") == true, "\(errors)")
        #expect(!FileManager.default.fileExists(atPath: tools.sandbox.dataHome + "/dcclient"))
        #expect(processes(inside: tools.sandbox).isEmpty, "\(processes(inside: tools.sandbox))")
    }

    @Test("On a terminal, dcclient init asks twice and unlock once, with echo off")
    func terminalPrompt() throws {
        let tools = try Tools("pinentry-terminal")
        defer { tools.sandbox.remove() }
        let setUp = try TerminalSession(
            shellLine([Self.dcclient] + initArguments) + "; echo \"exit=$?\"", in: tools.sandbox, label: "init")
        #expect(setUp.waitFor("Passphrase for org.example.dcclient: "))
        setUp.type(Self.passphrase + "\r")
        #expect(setUp.waitFor("The passphrase again for org.example.dcclient: "))
        setUp.type(Self.passphrase + "\r")
        #expect(setUp.finish() == 0, "\(setUp.output)")
        #expect(!setUp.output.contains(Self.passphrase), "\(setUp.output)")
        try tools.check("dcclient", ["lock"])
        let unlock = try TerminalSession(
            shellLine([Self.dcclient, "unlock"]) + "; echo \"exit=$?\"", in: tools.sandbox, label: "unlock")
        #expect(unlock.waitFor("Passphrase for org.example.dcclient: "))
        unlock.type(Self.passphrase + "\r")
        #expect(unlock.finish() == 0, "\(unlock.output)")
        #expect(!unlock.output.contains(Self.passphrase), "\(unlock.output)")
        #expect(try tools.run("dcclient", ["status"]).stdoutText.contains("unlocked:         yes"))
    }

    @Test(
        "Without a terminal, a display or a configured pinentry, nobody is asked: the one-line error, at once, even with pinentry on PATH"
    )
    func nobodyAsked() throws {
        let tools = try Tools("pinentry-none")
        defer { tools.sandbox.remove() }
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/bin/pinentry"))
        let started = ContinuousClock.now
        for arguments in [initArguments, ["unlock"]] {
            let result = try tools.sandbox.run(Self.dcclient, arguments, stdin: [])
            #expect(result.status == 77, "\(result.stderrText)")
            #expect(result.stderrText.contains("the client's passphrase is needed"), "\(result.stderrText)")
            #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
        }
        #expect(ContinuousClock.now - started < .seconds(20))
        #expect(!FileManager.default.fileExists(atPath: tools.sandbox.dataHome + "/dcclient"))
    }

    @Test(
        "pinentry-gtk2 on a private X server: its window is found and typed into, dcclient unlocks; Escape cancels with exit 77"
    )
    func pinentryGTK2() throws {
        let tools = try Tools("pinentry-gtk2")
        defer { tools.sandbox.remove() }
        try tools.sandbox.write("pass.txt", Self.passphrase + "\n")
        try tools.check("dcclient", initArguments + ["--passphrase-file", "pass.txt"])
        try tools.check("dcclient", ["lock"])
        try configurePinentry("/usr/bin/pinentry-gtk-2", in: tools.sandbox)
        let display = try PrivateXServer(in: tools.sandbox)
        defer { display.stop() }
        let environment = tools.sandbox.environment.merging(["DISPLAY": display.name]) { $1 }

        func unlock(_ label: String, answer: (String) throws -> Void) throws -> (Int32?, String) {
            let log = tools.sandbox.file(label + ".log")
            let child = try SpawnedProcess(Self.dcclient, ["unlock"], environment: environment, output: log)
            let found = try run(
                "xdotool", ["search", "--sync", "--onlyvisible", "--class", "pinentry"], environment: environment,
                timeout: 30)
            let window = found.stdoutText.split(separator: "\n").first.map(String.init) ?? ""
            #expect(found.status == 0 && !window.isEmpty, "\(found.stderrText)")
            try answer(window)
            let status = child.wait(timeout: .seconds(60))
            return (status.map { ($0 >> 8) & 0xFF }, (try? readText(log)) ?? "")
        }

        let (cancelledStatus, cancelledOutput) = try unlock("escape") { (_: String) throws in
            usleep(500_000)
            #expect(try run("xdotool", ["key", "Escape"], environment: environment).status == 0)
        }
        #expect(cancelledStatus == 77, "\(cancelledOutput)")
        #expect(cancelledOutput.contains("the pinentry was cancelled"), "\(cancelledOutput)")
        #expect(try tools.run("dcclient", ["status"]).stdoutText.contains("unlocked:         no"))

        let (status, output) = try unlock("typed") { (window: String) throws in
            usleep(500_000)
            let picture = tools.sandbox.file("pinentry-gtk2.png")
            let shot = try run("import", ["-window", window, picture], environment: environment, timeout: 30)
            #expect(shot.status == 0, "\(shot.stderrText)")
            let png = (try? readBytes(picture)) ?? []
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]), "not a PNG: \(png.count) bytes")
            if let keep = ProcessInfo.processInfo.environment["DC_PINENTRY_SCREENSHOT"] {
                _ = try? FileManager.default.removeItem(atPath: keep)
                try FileManager.default.copyItem(atPath: picture, toPath: keep)
            }
            #expect(try run("xdotool", ["type", Self.passphrase], environment: environment).status == 0)
            #expect(try run("xdotool", ["key", "Return"], environment: environment).status == 0)
        }
        #expect(status == 0, "\(output)")
        #expect(try tools.run("dcclient", ["status"]).stdoutText.contains("unlocked:         yes"))
        display.stop()
        #expect(processes(inside: tools.sandbox).isEmpty, "\(processes(inside: tools.sandbox))")
    }
}

/// An X server of the test's own (Xvfb, no TCP), on a display number it chose itself (`-displayfd`).
private final class PrivateXServer {
    let process: SpawnedProcess
    let name: String
    private var stopped = false

    init(in sandbox: Sandbox) throws {
        let log = sandbox.file("xvfb.log")
        process = try SpawnedProcess(
            try which("Xvfb"), ["-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "800x600x24"],
            environment: sandbox.environment, output: log)
        let deadline = ContinuousClock.now + .seconds(30)
        var number: String?
        while number == nil && ContinuousClock.now < deadline {
            let text = (try? readText(log)) ?? ""
            number = text.split(whereSeparator: \.isNewline).first { $0.allSatisfy(\.isNumber) }.map(String.init)
            if number == nil { usleep(50_000) }
        }
        guard let number else {
            process.kill()
            process.wait(timeout: .seconds(5))
            throw NoDisplay(log: (try? readText(log)) ?? "")
        }
        name = ":" + number
    }

    /// Xvfb did not say which display it took.
    struct NoDisplay: Error, CustomStringConvertible {
        var log: String
        var description: String { "Xvfb started no display: \(log)" }
    }

    func stop() {
        guard !stopped else { return }
        stopped = true
        process.kill(SIGTERM)
        process.wait(timeout: .seconds(10))
    }
}
