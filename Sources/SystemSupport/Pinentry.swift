import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Asks for a secret through a pinentry: the program gpg-agent runs to ask for a passphrase
/// (pinentry-gnome3, -gtk2, -qt, -curses, -tty), spoken to over the Assuan protocol on its standard
/// input and output.
///
/// The program is chosen as gpg-agent chooses it: `pinentry-program` in the desktop settings
/// (``DesktopSettings/pinentryProgram``), else `pinentry` found on `PATH`. It is started with
/// ``ChildProcess`` (its own process group, no descriptor but 0–2, a deadline) and with
/// ``ChildEnvironment/minimal(from:)`` plus only what it needs to reach the display
/// (``displayVariables``): never a secret, and the secret it returns never travels in its argv
/// or environment.
///
/// The conversation is sent in one piece (Assuan answers each command in order, so a pinentry
/// reads the next command only after it has answered the previous one): the terminal `OPTION`s
/// when there is a controlling terminal, `SETTIMEOUT`, `SETTITLE`, `SETDESC`, `SETPROMPT`,
/// `SETERROR` for a retry, `SETREPEAT` and `SETREPEATERROR` for a new secret, `GETPIN`, `BYE`.
/// The answer's `D` lines are percent-decoded straight into `SecretBytes`; every buffer that held
/// them is wiped. A cancelled, failed, missing or silent pinentry is one
/// `DCError/Code/passphraseRequired` error.
public struct Pinentry: Sendable {
    /// The variables a pinentry needs to reach the user's display or terminal, passed on when set:
    /// the desktop session's addresses (`ChildEnvironment.desktopNames`) and the terminal's type;
    /// on top of ``ChildEnvironment/minimal(from:)``, nothing else of this process's environment.
    public static let displayVariables = ChildEnvironment.desktopNames + ["TERM"]
    /// How long the pinentry waits for the user (`SETTIMEOUT`); the process is killed a little later.
    public static let timeout: Duration = .seconds(120)
    /// Assuan's error code for a cancelled dialog (GPG_ERR_CANCELED from the pinentry source).
    static let cancelledCode = "83886179"
    /// Assuan's error code for a dialog that timed out (GPG_ERR_TIMEOUT from the pinentry source).
    static let timeoutCode = "83886142"

    /// The pinentry program's absolute path.
    public var program: String
    /// The environment the pinentry gets.
    public var environment: [String: String]
    /// The controlling terminal, for `OPTION ttyname` (a curses or tty pinentry asks there).
    public var terminal: String?
    /// `TERM`, for `OPTION ttytype`.
    public var terminalType: String?
    /// The character set of the terminal, for `OPTION lc-ctype`.
    public var characterType: String?

    /// One question to ask.
    public struct Question: Sendable {
        /// The window title (the asking program's name).
        public var title: String
        /// What is asked for and why; several lines are fine.
        public var description: String
        /// The label before the entry field, without a colon (`Passphrase`, `PIN`).
        public var prompt: String
        /// An error shown above the question, for a retry (the previous answer was wrong).
        public var error: String?
        /// For a new secret: the label of the second entry that must repeat the first.
        public var repeatPrompt: String?
        /// For a new secret: what the pinentry says when the two entries differ.
        public var repeatError: String?

        /// A question with the given texts; `repeatPrompt` asks for a new secret twice.
        public init(
            title: String, description: String, prompt: String, error: String? = nil, repeatPrompt: String? = nil,
            repeatError: String? = nil
        ) {
            self.title = title
            self.description = description
            self.prompt = prompt
            self.error = error
            self.repeatPrompt = repeatPrompt
            self.repeatError = repeatError
        }
    }

    /// A pinentry at `program`, started with `environment` as it is (callers use
    /// ``init(program:from:)``, which filters it).
    public init(
        program: String, environment: [String: String], terminal: String? = nil, terminalType: String? = nil,
        characterType: String? = nil
    ) {
        self.program = program
        self.environment = environment
        self.terminal = terminal
        self.terminalType = terminalType
        self.characterType = characterType
    }

    /// The pinentry `program` with the environment, terminal and locale taken from `environment`
    /// (this process's): the minimal child environment plus ``displayVariables``; the terminal is
    /// `GPG_TTY` when set (as for gpg-agent), else the terminal of standard error or output.
    public init(program: String, from environment: [String: String] = ProcessInfo.processInfo.environment) {
        var child = ChildEnvironment.desktop(from: environment)
        if let type = environment["TERM"] { child["TERM"] = type }
        self.init(
            program: program, environment: child,
            terminal: environment["GPG_TTY"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? Self.controllingTerminal(),
            terminalType: environment["TERM"],
            characterType: environment["LC_ALL"] ?? environment["LC_CTYPE"] ?? environment["LANG"])
    }

    /// The pinentry to use under `settings`: the configured program, else `pinentry` on `PATH`;
    /// nil when there is none.
    public static func find(
        settings: DesktopSettings, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Pinentry? {
        if let program = settings.pinentryProgram { return Pinentry(program: program, from: environment) }
        for directory in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") where directory.hasPrefix("/") {
            let path = "\(directory)/pinentry"
            if access(path, X_OK) == 0 { return Pinentry(program: path, from: environment) }
        }
        return nil
    }

    /// Whether a pinentry could show a question to someone when standard input is not a terminal:
    /// there is a display (`DISPLAY` or `WAYLAND_DISPLAY`), or the user configured a pinentry
    /// explicitly (a pinentry-tty on a controlling terminal). Otherwise nobody asked for a dialog
    /// and none is shown.
    public static func canShow(settings: DesktopSettings, environment: [String: String]) -> Bool {
        if settings.pinentryProgram != nil { return true }
        return [environment["DISPLAY"], environment["WAYLAND_DISPLAY"]].contains { !($0 ?? "").isEmpty }
    }

    /// The name of the terminal on standard error, output or input, or nil when none is one.
    static func controllingTerminal() -> String? {
        for descriptor in [STDERR_FILENO, STDOUT_FILENO, STDIN_FILENO] where isatty(descriptor) == 1 {
            if let name = ttyname(descriptor) { return String(cString: name) }
        }
        return nil
    }

    /// Asks `question` and returns the answer. Throws `DCError/Code/passphraseRequired` (with
    /// `remedy`) when the pinentry is cancelled, times out, cannot be started, or ends without an
    /// answer; `DCError/Code/usage` for an empty answer.
    public func ask(_ question: Question, remedy: DCError.Remedy? = nil) throws -> SecretBytes {
        func refusal(_ message: String) -> DCError {
            DCError(.passphraseRequired, message, subject: program, remedy: remedy)
        }
        let commands = script(for: question)
        var outcome: ChildProcess.Outcome
        do {
            outcome = try ChildProcess.runSynchronously(
                program, stdin: SecretBytes(Array(commands.utf8)), environment: environment,
                limits: .init(timeout: Self.timeout + .seconds(10), stdoutLimit: 64 << 10, stderrLimit: 16 << 10),
                newSession: true)
        } catch let error as DCError {
            throw refusal("cannot start the pinentry: \(error.message)")
        }
        defer {
            outcome.stdout.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            outcome.stdout.removeAll()
        }
        if outcome.timedOut { throw refusal("the pinentry did not answer in \(Self.timeout)") }
        let getPIN = commands.split(separator: "\n").firstIndex(of: "GETPIN").map { $0 + 1 } ?? 0
        switch Self.answer(in: outcome.stdout, getPIN: getPIN, repeated: question.repeatPrompt != nil) {
        case .secret(let secret):
            return try SecretInput.nonEmpty(secret, subject: program)
        case .cancelled:
            throw refusal("the pinentry was cancelled; nothing was changed")
        case .timedOut:
            throw refusal("nobody answered the pinentry in \(Self.timeout)")
        case .failed(let reason):
            throw refusal("the pinentry failed: \(reason)")
        case .notRepeated:
            throw refusal("the pinentry cannot ask for a new secret twice (SETREPEAT); use another pinentry")
        case .noAnswer:
            let how: String
            switch outcome.termination {
            case .exited(let status): how = "exited with status \(status)"
            case .signaled(let signal): how = "was killed by signal \(signal)"
            }
            throw refusal("the pinentry \(how) without an answer")
        }
    }

    /// The commands sent to the pinentry for `question`, in order, each on its line.
    func script(for question: Question) -> String {
        var lines: [String] = []
        if let terminal {
            lines.append("OPTION ttyname=\(Self.escaped(terminal))")
            if let terminalType { lines.append("OPTION ttytype=\(Self.escaped(terminalType))") }
            if let characterType { lines.append("OPTION lc-ctype=\(Self.escaped(characterType))") }
        }
        lines.append("SETTIMEOUT \(Self.timeout.components.seconds)")
        lines.append("SETTITLE \(Self.escaped(question.title))")
        lines.append("SETDESC \(Self.escaped(question.description))")
        lines.append("SETPROMPT \(Self.escaped(question.prompt + ":"))")
        if let error = question.error { lines.append("SETERROR \(Self.escaped(error))") }
        if let again = question.repeatPrompt {
            lines.append("SETREPEAT \(Self.escaped(again + ":"))")
            if let mismatch = question.repeatError { lines.append("SETREPEATERROR \(Self.escaped(mismatch))") }
        }
        lines += ["GETPIN", "BYE"]
        return lines.map { $0 + "\n" }.joined()
    }

    /// Assuan's escaping of a parameter: `%`, CR, LF and the other control characters as `%XX`,
    /// cut to stay well inside Assuan's 1,000-byte line.
    static func escaped(_ text: String) -> String {
        var out: [UInt8] = []
        for byte in text.utf8.prefix(800) {
            if byte < 0x20 || byte == UInt8(ascii: "%") || byte == 0x7F {
                out += Array(("%" + byte.zeroPadded(width: 2, radix: 16, uppercase: true)).utf8)
            } else {
                out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// What a pinentry's answer says.
    enum Answer {
        /// The decoded secret.
        case secret(SecretBytes)
        /// The user cancelled (`ERR 83886179`).
        case cancelled
        /// Nobody answered before `SETTIMEOUT` (`ERR 83886142`).
        case timedOut
        /// `GETPIN` failed for another reason (no display, …): the pinentry's words.
        case failed(String)
        /// A new secret was asked twice, but the pinentry did not confirm it (no `PIN_REPEATED`).
        case notRepeated
        /// The output ended before `GETPIN` was answered.
        case noAnswer
    }

    /// Reads the pinentry's output: a greeting, then one `OK` or `ERR` line per command in
    /// order, each after the `D` (data), `S` (status) and `#` (comment) lines that belong to it.
    /// `getPIN` is the number of `GETPIN` among the commands (1 for the first): the answer
    /// with that number is `GETPIN`'s, and only its `D` lines are the secret (percent-decoded into
    /// one buffer, wiped once it is a `SecretBytes`). An `ERR` to an earlier command (an
    /// `OPTION` a pinentry does not know) changes nothing.
    static func answer(in output: [UInt8], getPIN: Int, repeated: Bool) -> Answer {
        var data: [UInt8] = []
        data.reserveCapacity(output.count)
        defer { data.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var responses = -1  // the greeting is response 0
        var sawRepeated = false
        var start = output.startIndex
        while start < output.endIndex {
            let end = output[start...].firstIndex(of: UInt8(ascii: "\n")) ?? output.endIndex
            let line = output[start..<end]
            start = end < output.endIndex ? end + 1 : end
            let isOK = line.elementsEqual(Array("OK".utf8)) || line.starts(with: Array("OK ".utf8))
            if isOK || line.starts(with: Array("ERR ".utf8)) {
                responses += 1
                guard responses == getPIN else { continue }
                if isOK { return repeated && !sawRepeated ? .notRepeated : .secret(SecretBytes(consuming: &data)) }
                let text = String(decoding: line.dropFirst(4), as: UTF8.self)
                if text.hasPrefix(cancelledCode) { return .cancelled }
                if text.hasPrefix(timeoutCode) { return .timedOut }
                let words = text.split(separator: " ", maxSplits: 1).dropFirst().first.map(String.init) ?? text
                return .failed(words.escapingControlCharacters)
            }
            guard responses == getPIN - 1 else { continue }
            if line.starts(with: Array("D ".utf8)) {
                percentDecode(line.dropFirst(2), into: &data)
            } else if line.starts(with: Array("S PIN_REPEATED".utf8)) {
                sawRepeated = true
            }
        }
        return .noAnswer
    }

    /// Appends the percent-decoded bytes of `encoded` to `out` (which has room for them).
    static func percentDecode(_ encoded: ArraySlice<UInt8>, into out: inout [UInt8]) {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var index = encoded.startIndex
        while index < encoded.endIndex {
            let byte = encoded[index]
            if byte == UInt8(ascii: "%"), index + 2 < encoded.endIndex, let high = hex(encoded[index + 1]),
                let low = hex(encoded[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(byte)
                index += 1
            }
        }
    }
}
