import DerivedCredentials
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Reading secrets from the places docs/CLI.md allows: a file, an inherited descriptor, an
/// environment variable the user named, a prompt. Every reader refuses an empty secret, and none
/// leaves the secret where a child process could find it.
public enum SecretInput {
    /// Secrets are short; a larger "passphrase file" is a mistake (a key file passed by accident).
    public static let maximumLength = 4096
    /// How long a pipe or FIFO given as a secret file may take to deliver its line.
    static let pipeWait: Duration = .seconds(10)

    /// The first line of `path`, without its line ending. Symbolic links are followed, so that
    /// process substitution (`--passphrase-file <(pass show x)`, a `/dev/fd/N` link) works. The file
    /// must be a regular file or a pipe that group and other can neither read nor write (as ssh
    /// asks of keys); it is opened without blocking, so a FIFO nobody writes cannot hang the tool.
    public static func read(file path: String) throws -> SecretBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let code: DCError.Code = errno == ENOENT ? .fileNotFound : .permissionDenied
            throw DCError(code, "cannot open the secret file: \(String(cString: strerror(errno)))", subject: path)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw DCError(.ioError, "cannot read the secret file: \(String(cString: strerror(errno)))", subject: path)
        }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO else {
            throw DCError(.usage, "the secret file is not a regular file or a pipe", subject: path)
        }
        guard info.st_mode & 0o066 == 0 else {
            let mode = String(info.st_mode & 0o7777, radix: 8)
            throw DCError(
                .permissionDenied, "the secret file has mode 0\(mode): group or other can read or write it",
                subject: path, hint: "chmod 600 the file")
        }
        return try nonEmpty(try read(descriptor: fd, subject: path, waitingUpTo: pipeWait), subject: path)
    }

    /// The first line of a descriptor the caller inherited (`--pin-fd N`, `--passphrase-fd N`). It
    /// is made close-on-exec before anything is read, and closed afterwards: no child sees it.
    public static func read(inheritedDescriptor fd: Int32) throws -> SecretBytes {
        let subject = "fd \(fd)"
        guard fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 else {
            throw DCError(.fileNotFound, "descriptor \(fd) is not open", subject: subject)
        }
        defer { close(fd) }
        return try nonEmpty(try read(descriptor: fd, subject: subject), subject: subject)
    }

    /// The whole value of the environment variable `name` (`--pin-env NAME`): the user chose to
    /// put it there; this toolkit never puts a secret into any environment. The first call takes
    /// the value out of the environment (``takeEnvironment(_:)``); later calls return what it took.
    public static func read(environment name: String) throws -> SecretBytes {
        takeEnvironment(name)
        guard let secret = taken.withLock({ $0[name] }) else {
            throw DCError(.passphraseRequired, "the environment variable \(name) is not set")
        }
        return try nonEmpty(secret, subject: "$" + name)
    }

    /// Takes the value of the environment variable `name` out of this process: copied into a
    /// `SecretBytes` kept for ``read(environment:)``, then **overwritten in place** and only then
    /// unset. `unsetenv` alone only unlinks the variable: its bytes stay in the environment block
    /// the kernel shows as `/proc/PID/environ`. Command-line options call this while they are
    /// validated, before any command runs, so that the secret is out of the block before any
    /// child starts, whether or not the command ends up using it. Nothing happens when the
    /// variable is not set or was taken already.
    public static func takeEnvironment(_ name: String) {
        taken.withLock { taken in
            guard taken[name] == nil, let value = getenv(name) else { return }
            let length = strlen(value)
            taken[name] = SecretBytes(
                UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: length))
            memset(value, 0, length)
            unsetenv(name)
        }
    }
    /// The values taken out of the environment, by variable name.
    private static let taken = Mutex<[String: SecretBytes]>([:])

    /// `secret`, unless it is empty: an empty PIN or passphrase is a mistake, not a choice.
    static func nonEmpty(_ secret: SecretBytes, subject: String) throws -> SecretBytes {
        guard !secret.isEmpty else { throw DCError(.usage, "the secret is empty", subject: subject) }
        return secret
    }

    /// The first line read from an open descriptor, up to end of file, at most ``maximumLength``
    /// bytes. A descriptor in non-blocking mode is waited for up to `wait` in all.
    static func read(descriptor fd: Int32, subject: String, waitingUpTo wait: Duration = .seconds(0)) throws
        -> SecretBytes
    {
        let deadline = ContinuousClock.now + wait
        var bytes: [UInt8] = []
        defer { bytes.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var chunk = [UInt8](repeating: 0, count: 512)
        defer { chunk.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        while bytes.count <= maximumLength {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN && ContinuousClock.now < deadline {
                    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    _ = poll(&entry, 1, 100)
                    continue
                }
                throw DCError(.ioError, "cannot read the secret: \(String(cString: strerror(errno)))", subject: subject)
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk.prefix(count))
            if chunk.prefix(count).contains(UInt8(ascii: "\n")) { break }
        }
        guard bytes.count <= maximumLength else {
            throw DCError(.usage, "the secret is longer than \(maximumLength) bytes", subject: subject)
        }
        var line =
            bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 1, omittingEmptySubsequences: false).first.map(
                Array.init) ?? []
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        return SecretBytes(consuming: &line)
    }

    /// The number of characters (Unicode scalars) in a UTF-8 secret, counted without making a
    /// `String` copy of it: bytes that do not continue a sequence.
    public static func characterCount(_ secret: SecretBytes) -> Int {
        secret.withUnsafeBytes { bytes in bytes.reduce(0) { $0 + ($1 & 0xC0 == 0x80 ? 0 : 1) } }
    }
}

/// Where a prompt, a message and a progress line meet on one terminal: while a prompt asks
/// (``isAsking``), no progress is drawn, and a line drawn before the question or a message
/// (``makeRoom()``) is cleared first (the progress line registers how, ``clearing(for:_:)``), so the
/// question or message starts a clean line and is never drawn over.
public enum TerminalLine {
    private static let state = Mutex<(asking: Int, clear: (@Sendable () -> Void)?, owner: ObjectIdentifier?)>(
        (0, nil, nil))

    /// Whether a prompt is asking now: progress waits until it has its answer.
    public static var isAsking: Bool { state.withLock { $0.asking > 0 } }

    /// Sets how the progress line `owner` now on the terminal is cleared.
    public static func clearing(for owner: ObjectIdentifier, _ clear: @escaping @Sendable () -> Void) {
        state.withLock { $0 = ($0.asking, clear, owner) }
    }

    /// Forgets how `owner` is cleared (it has finished), unless another line has taken its place.
    public static func stopClearing(for owner: ObjectIdentifier) {
        state.withLock { state in
            if state.owner == owner { state = (state.asking, nil, nil) }
        }
    }

    /// Clears the progress line before a message is written to standard error (a warning, a card's
    /// PIN tries left), so the message starts a line of its own; the progress line is drawn again at
    /// its next update, below it.
    public static func makeRoom() {
        // The clearing runs outside this lock: it takes the progress line's own.
        state.withLock { $0.clear }?()
    }

    /// A prompt begins: drawing stops, and the line already drawn is cleared.
    static func beginAsking() {
        // The clearing runs outside this lock: it takes the progress line's own.
        let clear = state.withLock { state in
            state.asking += 1
            return state.clear
        }
        clear?()
    }

    /// The prompt has its answer: progress may be drawn again.
    static func endAsking() { state.withLock { $0.asking -= 1 } }
}

/// The terminal prompt behind ``InteractivePassphrase``: a question on `/dev/tty`, read with echo off.
enum TerminalPrompt {
    /// The refusal when a prompt was asked for and standard input is not a terminal.
    static func noTerminal(_ subject: String) -> DCError {
        DCError(
            .passphraseRequired, "a passphrase prompt needs a terminal on standard input", subject: subject,
            remedy: .givePassphraseWithoutTerminal)
    }

    /// Writes `note` (when there is one) and `question` to `/dev/tty` and reads the answer with
    /// echo off. Throws `DCError/Code/passphraseRequired` when standard input is not a terminal or
    /// the terminal cannot be opened, `DCError/Code/usage` for an empty answer.
    static func ask(_ question: String, note: String? = nil, subject: String) throws -> SecretBytes {
        guard isatty(STDIN_FILENO) == 1 else { throw noTerminal(subject) }
        // A progress line drawn on this terminal is cleared and stays away while the person answers.
        TerminalLine.beginAsking()
        defer { TerminalLine.endAsking() }
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else {
            throw DCError(.passphraseRequired, "cannot open the terminal for a passphrase prompt", subject: subject)
        }
        defer { close(tty) }
        var saved = termios()
        tcgetattr(tty, &saved)
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(tty, TCSANOW, &silent)
        defer { tcsetattr(tty, TCSANOW, &saved) }
        let text = Array(((note.map { $0.escapingControlCharacters + "\n" } ?? "") + question).utf8)
        _ = text.withUnsafeBytes { write(tty, $0.baseAddress, $0.count) }
        let secret = try SecretInput.nonEmpty(SecretInput.read(descriptor: tty, subject: subject), subject: subject)
        _ = write(tty, "\n", 1)
        return secret
    }
}

/// Asks the user for a secret that no file, descriptor or variable gave, the way a Linux desktop
/// asks: on the terminal when standard input is one (with echo off); else through a pinentry
/// (``Pinentry``) when one can show something (a display, or a pinentry the user configured);
/// else nobody is asked, and the caller's own error for a missing secret stands (or, for a prompt
/// the user asked for, the error that there is no terminal).
///
/// The answer is kept (in `SecretBytes`, wiped on release) for the rest of the command, so that
/// a token logged in to twice asks once; ``retry(_:)`` forgets it after a wrong one.
public final class InteractivePassphrase: PassphraseSource, @unchecked Sendable {
    /// What happens when nobody can be asked.
    public enum Unanswerable: Sendable {
        /// The source has no secret (nil): the caller's error for a missing secret stands.
        case noSecret
        /// A prompt the user asked for (`--passphrase-prompt`) cannot be shown: an error says so.
        case refuse
    }

    // The answer given and the error to show with the next question, behind a `Mutex`; the rest
    // is immutable.
    private let asked = Mutex<(answer: SecretBytes?, error: String?)>((nil, nil))
    private let name: String
    private let title: String
    private let description: @Sendable (String) -> String
    private let confirming: Bool
    private let unanswerable: Unanswerable
    private let remedy: DCError.Remedy
    private let environment: [String: String]

    /// A source that asks for `name` (`passphrase`, `PIN`, `new PIN`). `title` and `description`
    /// (given the subject) are what a pinentry shows; the terminal shows `Name for <subject>: `.
    /// `confirming` asks for a new secret twice. `remedy` goes with every refusal. `environment`
    /// is this process's: it says whether there is a display, where the desktop settings are, and
    /// what reaches the pinentry (only what ``Pinentry/init(program:from:)`` keeps).
    public init(
        name: String = "passphrase", title: String, description: @escaping @Sendable (String) -> String,
        confirming: Bool = false, whenNobodyCanAnswer unanswerable: Unanswerable = .noSecret,
        remedy: DCError.Remedy = .givePassphraseWithoutTerminal,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        self.name = name
        self.title = title
        self.description = description
        self.confirming = confirming
        self.unanswerable = unanswerable
        self.remedy = remedy
        self.environment = environment
    }

    /// Asks for the secret for `subject` (see ``passphrase(for:detail:)``).
    public func passphrase(for subject: String) throws -> SecretBytes? {
        try passphrase(for: subject, detail: "")
    }

    /// The answer given already, or the user's answer now, with `detail` (a card's PIN tries left)
    /// in a pinentry's description; nil when nobody can be asked and the source was made with
    /// ``Unanswerable/noSecret``.
    public func passphrase(for subject: String, detail: String) throws -> SecretBytes? {
        try asked.withLock { asked in
            if let answer = asked.answer { return answer }
            guard let secret = try ask(for: subject, detail: detail, error: asked.error) else { return nil }
            asked = (secret, nil)
            return secret
        }
    }

    /// Forgets the answer, which was wrong: the next ``passphrase(for:detail:)`` asks again, showing
    /// `error` (a pinentry's `SETERROR`, a line before the terminal's prompt).
    public func retry(_ error: String) {
        asked.withLock { $0 = (nil, error) }
    }

    /// Whether anyone can be asked: standard input is a terminal, or a pinentry can show
    /// something (``Pinentry/canShow(settings:environment:)``). Throws when the desktop settings
    /// cannot be read.
    public func canAsk() throws -> Bool {
        if isatty(STDIN_FILENO) == 1 { return true }
        return Pinentry.canShow(settings: try settings(), environment: environment)
    }

    private var capitalized: String { name.prefix(1).uppercased() + name.dropFirst() }

    private func settings() throws -> DesktopSettings {
        try DesktopSettings.load(from: XDGDirectories(environment: environment))
    }

    private func ask(for subject: String, detail: String, error: String?) throws -> SecretBytes? {
        if isatty(STDIN_FILENO) == 1 {
            let first = try TerminalPrompt.ask(
                "\(capitalized) for \(subject.escapingControlCharacters): ", note: error, subject: subject)
            guard confirming else { return first }
            let again = try TerminalPrompt.ask(
                "The \(name) again for \(subject.escapingControlCharacters): ", subject: subject)
            guard again == first else {
                throw DCError(.usage, "the two \(name)s differ; nothing was changed", subject: subject)
            }
            return first
        }
        let settings = try settings()
        guard Pinentry.canShow(settings: settings, environment: environment),
            let pinentry = Pinentry.find(settings: settings, environment: environment)
        else {
            guard unanswerable == .refuse else { return nil }
            throw TerminalPrompt.noTerminal(subject)
        }
        let text = description(subject) + (detail.isEmpty ? "" : "\n\n" + detail)
        // pinentry-tty and -curses draw on the same terminal: no progress over their question.
        TerminalLine.beginAsking()
        defer { TerminalLine.endAsking() }
        return try pinentry.ask(
            Pinentry.Question(
                title: title, description: text, prompt: capitalized, error: error,
                repeatPrompt: confirming ? "Repeat" : nil,
                repeatError: confirming ? "The two \(name)s differ; enter them again" : nil),
            remedy: remedy)
    }
}
