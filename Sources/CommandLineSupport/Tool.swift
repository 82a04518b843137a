import ArgumentParser
import DerivedCredentials
import Glibc
import SystemSupport

/// How both tools start, run a command and end: one place for what every command shares, so that
/// each command's `run()` says only what the command does.
public enum Tool {
    /// Parses `CommandLine.arguments` (former flag names rewritten to the new ones) as `root`'s
    /// command line, applies the command's ``OutputOptions``, runs it, and exits: 0 when it
    /// returns; for a `DCError`, one line on standard error (`NAME: where: what; what to do`) and
    /// the error's sysexits status; for anything else, as swift-argument-parser does (usage
    /// errors exit 64, `--help` and `--version` 0).
    ///
    /// With `urlHandler`, the command line the desktop runs for every URL it hands the tool,
    /// exactly `NAME URL` with `NAME` the handler's command name, goes straight to
    /// ``URLHandlingCommand/handle(url:)`` (see ``urlHandlerArgument(_:handler:)``).
    public static func main<Root: ParsableCommand>(
        _ root: Root.Type, name: String, formerNames: FormerNames, urlHandler: (any URLHandlingCommand.Type)? = nil
    ) async -> Never {
        startUp(name: name)
        assert(
            unnamedCommands(in: root).isEmpty,
            "every command names itself (CommandConfiguration.commandName): otherwise swift-argument-parser derives "
                + "the name with String(describing:), whose protocol-conformance scans cost start-up time; unnamed: "
                + unnamedCommands(in: root).map { String(describing: $0) }.joined(separator: ", "))
        do {
            let arguments = Array(CommandLine.arguments.dropFirst())
            if let urlHandler, let url = urlHandlerArgument(arguments, handler: urlHandler) {
                try await urlHandler.handle(url: url)
                root.exit()
            }
            var command: any ParsableCommand
            do {
                command = try root.parseAsRoot(formerNames.rewrite(arguments))
            } catch  where root.exitCode(for: error) == .validationFailure {
                // A value that breaks its option's rule (a scheme, a client id): one line, like
                // every other refusal, not swift-argument-parser's usage screen.
                let message = root.message(for: error)
                // The parser's message quotes the value: never one that carries a PIN.
                if carriesPIN(message) { throw pinOnCommandLine }
                Console.error("\(oneLine(message)); see '\(name) --help'")
                root.exit(withError: ExitCode.validationFailure)
            }
            if let output = (command as? any OutputCommand)?.output { Console.setQuiet(output.quiet) }
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
            root.exit()
        } catch {
            root.exit(withError: exitError(for: error))
        }
    }

    /// The URL in `arguments` when they are exactly `NAME URL`, `NAME` being `handler`'s command
    /// name and `URL` not starting with `-`: the one command line the desktop runs a scheme
    /// handler with. Anything else (a flag, `--`, a second argument) is nil, and is parsed.
    public static func urlHandlerArgument(_ arguments: [String], handler: any URLHandlingCommand.Type) -> String? {
        guard arguments.count == 2, arguments[0] == handler.configuration.commandName,
            !arguments[1].hasPrefix("-")
        else { return nil }
        return arguments[1]
    }

    /// swift-argument-parser's `message` as one line that `; see 'NAME --help'` can follow: the
    /// allowed values it lists one a line when there are six or more (`…one of the following:`,
    /// then `  - value` lines) joined with commas, and no full stop at the end.
    static func oneLine(_ message: String) -> String {
        let lines = message.split(separator: "\n").map { $0.drop { $0 == " " } }
        let values = lines.dropFirst().map { $0.hasPrefix("- ") ? $0.dropFirst(2) : $0 }
        let line = (lines.first.map(String.init) ?? "") + (values.isEmpty ? "" : " " + values.joined(separator: ", "))
        return line.hasSuffix(".") ? String(line.dropLast()) : line
    }

    /// Whether `text` holds a PKCS#11 URI's PIN attribute (`pin-value`, `pin-source`).
    static func carriesPIN(_ text: String) -> Bool {
        let lowercased = text.lowercased()
        return lowercased.contains("pin-value") || lowercased.contains("pin-source")
    }

    /// The refusal of a command line whose rejected value carries a PIN: it is not repeated.
    static var pinOnCommandLine: DCError {
        DCError(
            .usage,
            "a value on the command line carries a PIN (pin-value / pin-source); command lines are visible to every user",
            remedy: .givePINSafely)
    }

    /// The commands in `root`'s tree (itself included) whose configuration leaves `commandName` to
    /// be derived from the type's name. Checked in debug builds, where every test runs the tools.
    static func unnamedCommands(in root: any ParsableCommand.Type) -> [any ParsableCommand.Type] {
        (root.configuration.commandName == nil ? [root] : [])
            + root.configuration.subcommands.flatMap { unnamedCommands(in: $0) }
    }

    /// What the tool does with an error a command threw: a `DCError` is printed as one line on
    /// standard error, its remedy worded for the command line (`RemedyWording`), and becomes its
    /// category's exit status; any other error is left to swift-argument-parser.
    public static func exitError(for error: any Error) -> any Error {
        guard let error = error as? DCError else { return error }
        Console.error(error.description(wording: RemedyWording.commandLine))
        return ExitCode(error.code.category.exitStatus)
    }

    /// This executable's absolute path: what a scheme handler registration must run.
    public static var executablePath: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return CommandLine.arguments[0] }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// What the process needs before it writes anything: `name` for its messages, the tools' words
    /// for the remedies errors name (`RemedyWording`, wherever an error is described), no core
    /// dump and no reader of its memory (`ProcessSecrecy.forbidDumpsAndReaders()`), and output that
    /// cannot hurt it. A closed standard output or error is opened on /dev/null (so a file the
    /// command opens can never become fd 1 or 2 and receive its messages), a reader that goes away
    /// makes writes fail with EPIPE instead of killing the process with SIGPIPE, and a file-size
    /// limit (RLIMIT_FSIZE) surfaces as EFBIG and a clean error instead of SIGXFSZ. SIGCHLD gets its
    /// default back: a parent that ignores it passes that on through exec, and the kernel would
    /// then reap every child itself and take its exit status (a failing plug-in's or scheme
    /// handler's) with it.
    public static func startUp(name: String) {
        Console.setTool(name)
        DCError.Remedy.useWording(RemedyWording.commandLine)
        // Every tool may hold a secret (a PIN, a passphrase, a store or signing key): none is
        // dumped to disk or read from its memory or environment by another process of the user.
        ProcessSecrecy.forbidDumpsAndReaders()
        signal(SIGPIPE, SIG_IGN)
        signal(SIGXFSZ, SIG_IGN)
        signal(SIGCHLD, SIG_DFL)
        for descriptor: Int32 in [1, 2] where fcntl(descriptor, F_GETFD) == -1 && errno == EBADF {
            let null = open("/dev/null", O_WRONLY)
            guard null >= 0 else { continue }
            if null != descriptor {
                dup2(null, descriptor)
                close(null)
            }
        }
    }
}

/// The command a tool's scheme handler registration runs (`TOOL handle-url %u`), once for every
/// URL another program opens: launched far more often than any other, and by whoever opens a URL.
///
/// ``Tool/main(_:name:formerNames:urlHandler:)`` runs ``handle(url:)`` itself for the exact
/// command line the desktop uses, so each message does not pay swift-argument-parser's
/// reflection (about 1.5 ms of a process's start). The URL is judged by the same code either
/// way; a command line with anything more (`--help`, a flag, `--`) is parsed as usual.
public protocol URLHandlingCommand: AsyncParsableCommand {
    /// Handles `url` as the command does when it is given no flag.
    static func handle(url: String) async throws
}
