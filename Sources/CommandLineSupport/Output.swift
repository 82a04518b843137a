import ArgumentParser
import DerivedCredentials
import Glibc
import SystemSupport

/// `--quiet`, on every command of both tools: confirmations and progress are not printed; data
/// (tables, listings, JSON, the files written) and errors still are.
public struct OutputOptions: ParsableArguments {
    /// Print only data and errors.
    @Flag(name: [.customShort("q"), .long], help: "Print only data and errors: no confirmations or progress.")
    public var quiet = false

    /// The options as parsed.
    public init() {}
}

/// `--json`, on every command that prints data: one versioned JSON document on standard output
/// instead of a table (docs/JSON.md).
public struct JSONOutputOptions: ParsableArguments {
    /// Print JSON instead of a table.
    @Flag(help: "Print one JSON document (\(Toolkit.documentation)/docs/JSON.md) instead of a table.")
    public var json = false

    /// The options as parsed.
    public init() {}
}

/// A command whose output follows ``OutputOptions``: ``Tool/main(_:name:formerNames:urlHandler:)`` applies
/// them before the command's `run()`, so `run()` says only what the command does.
public protocol OutputCommand: ParsableCommand {
    /// The command's `--quiet`.
    var output: OutputOptions { get }
}

/// The one place where the tools write: standard output and standard error through write(2).
///
/// A closed or broken stream never changes what a command does or its exit status: `EBADF` and
/// `EPIPE` end the write silently (SIGPIPE is ignored from start-up, ``Tool/startUp(name:)``), an
/// interrupted write goes on. Text for a person is escaped first (``Console``), so nothing from a
/// certificate, a token or a file reaches a terminal as a control sequence.
public enum StandardStream: Int32, Sendable {
    /// Standard output: data, and the confirmations ``Console/say(_:)`` prints.
    case output = 1
    /// Standard error: errors, warnings and progress.
    case error = 2

    /// Writes `text` as it is, in full, unless the stream is closed or broken.
    public func write(_ text: String) {
        Array(text.utf8).withUnsafeBytes { _ = write(bytes: $0) }
    }

    /// Writes `bytes` as they are (data, not text: nothing is escaped), in full unless the stream
    /// is closed or broken. Returns whether everything was written.
    @discardableResult
    public func write(bytes: UnsafeRawBufferPointer) -> Bool {
        // EBADF (closed), EPIPE (reader gone) or any other failure: there is no one to tell.
        Descriptors.writeAll(bytes, to: rawValue)
    }

    /// Whether the stream is a terminal.
    public var isTerminal: Bool { isatty(rawValue) == 1 }
}

/// Where a command's output goes: data and confirmations on standard output, errors, warnings and
/// progress on standard error, each through ``StandardStream`` with control characters escaped.
public enum Console {
    // Written once, by `Tool.main` before the command runs (before any task or thread the command
    // starts reads them); read-only afterwards.
    nonisolated(unsafe) private static var quiet = false
    nonisolated(unsafe) private static var tool = "dcprovision"

    /// Whether `--quiet` was given: a command passes it on to what prints for it (a handler's
    /// output it forwards).
    public static var isQuiet: Bool { quiet }

    /// Sets whether ``say(_:)``, ``notice(_:)`` and ``ProgressLine`` print.
    static func setQuiet(_ value: Bool) { quiet = value }

    /// Sets the program name that starts error and warning lines.
    static func setTool(_ name: String) { tool = name }

    /// The program's name, as error lines start with it (a pinentry's window title).
    public static var toolName: String { tool }

    /// `text` as it may reach a terminal: every line's control characters escaped (the line
    /// breaks between lines stay).
    public static func escaped(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.escapingControlCharacters }
            .joined(separator: "\n")
    }

    /// Prints data (a table, a listing, a path written) on standard output, escaped; `--quiet`
    /// does not silence it.
    public static func print(_ text: String) { StandardStream.output.write(escaped(text) + "\n") }

    /// Prints a confirmation on standard output, escaped, unless `--quiet`.
    public static func say(_ text: String) {
        if !quiet { print(text) }
    }

    /// Prints `message` as one line on standard error, `TOOL: message`, every control character
    /// (line breaks too) escaped.
    public static func error(_ message: String) {
        TerminalLine.makeRoom()
        StandardStream.error.write("\(tool): \(message.escapingControlCharacters)\n")
    }

    /// Prints `TOOL: message` on standard error unless `--quiet`: what a person should know before
    /// the command goes on, such as a card's PIN tries left.
    public static func notice(_ message: String) {
        if !quiet { error(message) }
    }

    /// Prints `TOOL: warning: message` on standard error.
    public static func warning(_ message: String) { error("warning: \(message)") }

    /// Whether progress (``ProgressLine``) is drawn: only for a person watching a terminal, and
    /// not with `--quiet`. A pipe or a file gets none, so logs and scripts see the same output every run.
    public static func showsProgress(standardErrorIsTerminal: Bool, quiet: Bool) -> Bool {
        standardErrorIsTerminal && !quiet
    }
}
