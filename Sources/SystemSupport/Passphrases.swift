import DerivedCredentials
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A secret from an environment variable the user named (`--pin-env NAME`): the user chose to
/// put it there; this toolkit never puts a secret into any environment.
public struct EnvironmentSecret: PassphraseSource {
    /// The name of the environment variable the user chose; never its value.
    public let name: String
    /// A source that reads the variable `name` when asked, not now.
    public init(name: String) { self.name = name }
    /// The variable's whole value, as bytes. Throws ``DCError/Code/passphraseRequired`` if it is not set.
    public func passphrase(for subject: String) throws -> SecretBytes? {
        guard let value = getenv(name) else {
            throw DCError(.passphraseRequired, "the environment variable \(name) is not set", subject: subject)
        }
        return SecretBytes(
            UnsafeBufferPointer(
                start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: strlen(value)))
    }
}

/// Reading secrets from the places docs/CLI.md allows: a file, an inherited descriptor, a prompt.
public enum SecretInput {
    /// Secrets are short; a larger "passphrase file" is a mistake (a key file passed by accident).
    public static let maximumLength = 4096

    /// The first line of `path`, without its line ending. Symbolic links are followed, so that
    /// process substitution (`--passphrase-file <(pass show x)`, a `/dev/fd/N` link) works.
    public static func read(file path: String) throws -> SecretBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code: DCError.Code = errno == ENOENT ? .fileNotFound : .permissionDenied
            throw DCError(code, "cannot open the secret file: \(String(cString: strerror(errno)))", subject: path)
        }
        defer { close(fd) }
        return try read(descriptor: fd, subject: path)
    }

    /// The first line read from an open descriptor (for `--passphrase-fd`), up to end of file.
    public static func read(descriptor fd: Int32, subject: String) throws -> SecretBytes {
        var bytes: [UInt8] = []
        defer { bytes.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var chunk = [UInt8](repeating: 0, count: 512)
        defer { chunk.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        while bytes.count <= maximumLength {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
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
}

/// Asks on the controlling terminal with echo off, once, and only if there is a terminal.
/// Used only when the user asked for a prompt (`--passphrase-prompt`).
public final class TerminalPassphrase: PassphraseSource, @unchecked Sendable {
    // The cached answer is guarded by `lock`; the class is otherwise immutable.
    private let lock = NSLock()
    private var answer: SecretBytes?
    private let prompt: String

    /// A source that asks with `prompt`, followed by ` for <subject>: `.
    public init(prompt: String = "Passphrase") {
        self.prompt = prompt
    }

    /// Asks once on `/dev/tty` with echo off and caches the answer for later subjects. Throws
    /// ``DCError/Code/passphraseRequired`` when standard input is not a terminal or the terminal cannot be opened.
    public func passphrase(for subject: String) throws -> SecretBytes? {
        lock.lock()
        defer { lock.unlock() }
        if let answer { return answer }
        guard isatty(STDIN_FILENO) == 1 else {
            throw DCError(
                .passphraseRequired, "a passphrase prompt needs a terminal on standard input", subject: subject,
                hint: "use --passphrase-file or --passphrase-fd instead")
        }
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
        let question = Array("\(prompt) for \(subject.escapingControlCharacters): ".utf8)
        _ = question.withUnsafeBytes { write(tty, $0.baseAddress, $0.count) }
        let secret = try SecretInput.read(descriptor: tty, subject: subject)
        _ = write(tty, "\n", 1)
        answer = secret
        return secret
    }
}
