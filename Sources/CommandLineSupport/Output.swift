import ArgumentParser

/// `--quiet`, on every command of both tools: confirmations and progress are not printed; data
/// (tables, listings, JSON, the files written) and errors still are.
public struct OutputOptions: ParsableArguments {
    /// Print only data and errors.
    @Flag(name: [.customShort("q"), .long], help: "Print only data and errors: no confirmations or progress.")
    public var quiet = false

    /// The options as parsed.
    public init() {}

    /// Makes ``Console`` follow these options; each command calls it first thing in `run()`.
    public func apply() { Console.setQuiet(quiet) }
}

/// Where a command's messages to a person go (as opposed to its data).
public enum Console {
    // Written once, by `OutputOptions.apply()` at the start of a command's `run()`, before any
    // task or thread the command starts reads it; read-only afterwards.
    nonisolated(unsafe) private static var quiet = false

    /// Whether `--quiet` was given: a command passes it on to what prints for it (a handler's
    /// output it forwards).
    public static var isQuiet: Bool { quiet }

    /// Sets whether ``say(_:)`` prints.
    static func setQuiet(_ value: Bool) { quiet = value }

    /// Prints a confirmation or a progress line on standard output, unless `--quiet`.
    public static func say(_ line: String) {
        if !quiet { print(line) }
    }
}
