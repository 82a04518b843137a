import Glibc
import Synchronization

/// The one progress reporter of both tools: a single line on standard error, rewritten in place
/// with a carriage return, for work that takes longer than a person waits without wondering
/// (issuing a batch of keys, moving a large secure file, deriving on a slow card, listing a slow
/// token).
///
/// Nothing is printed unless ``Console/showsProgress(standardErrorIsTerminal:quiet:)`` says so
/// (standard error is a terminal and `--quiet` was not given), and nothing before ``delay`` has
/// passed: work that ends within it stays silent, so a fast command prints the same on a terminal
/// as in a pipe. Updates are drawn at most every ``interval``; ``finish()`` clears the line, so
/// what the command prints next starts on a clean line. Safe to call from any thread.
public final class ProgressLine: Sendable {
    /// How the amounts are shown.
    public enum Unit: Sendable {
        /// Counted things: `12/24`.
        case items
        /// Bytes: `12.0 MiB/2.0 GiB`.
        case bytes
    }

    /// How long work runs before its line appears.
    public static let delay: Duration = .seconds(1)
    /// The shortest time between two redraws.
    public static let interval: Duration = .milliseconds(100)

    private struct State {
        var done: Int64 = 0
        var total: Int64?
        var lastDrawn: ContinuousClock.Instant?
        var width = 0
        var finished = false
    }

    private let label: String
    private let unit: Unit
    private let started = ContinuousClock.now
    private let enabled: Bool
    private let state: Mutex<State>

    /// A reporter of `label` (`issuing`, `writing secure file`), counting up to `total` when it is
    /// known, in `unit`. It shows nothing until ``delay`` has passed.
    public convenience init(_ label: String, total: Int? = nil, unit: Unit = .items) {
        self.init(
            label, total: total, unit: unit,
            enabled: Console.showsProgress(
                standardErrorIsTerminal: StandardStream.error.isTerminal, quiet: Console.isQuiet))
    }

    /// A reporter that draws only when `enabled`.
    init(_ label: String, total: Int?, unit: Unit, enabled: Bool) {
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self.state = Mutex(State(total: total.map(Int64.init)))
    }

    /// Counts `amount` more done, and redraws when it is time.
    public func advance(by amount: Int = 1) { update { $0.done += Int64(amount) } }

    /// Sets how much is done (and of how much, when that became known), and redraws when it is time.
    public func set(done: Int, of total: Int? = nil) {
        update {
            $0.done = Int64(done)
            if let total { $0.total = Int64(total) }
        }
    }

    /// Ends the reporter: clears its line if it was drawn. Later calls do nothing.
    public func finish() {
        guard enabled else { return }
        state.withLock { state in
            guard !state.finished else { return }
            state.finished = true
            if state.lastDrawn != nil {
                StandardStream.error.write("\r" + String(repeating: " ", count: state.width) + "\r")
            }
        }
    }

    private func update(_ change: (inout State) -> Void) {
        guard enabled else { return }
        state.withLock { state in
            guard !state.finished else { return }
            change(&state)
            let now = ContinuousClock.now
            guard now - started >= Self.delay else { return }
            if let last = state.lastDrawn, now - last < Self.interval { return }
            state.lastDrawn = now
            let text = "\(Console.toolName): \(Self.line(label, done: state.done, total: state.total, unit: unit))"
            // Spaces cover what a longer line before left on the terminal.
            let padding = max(0, state.width - text.count)
            state.width = text.count
            StandardStream.error.write("\r" + text + String(repeating: " ", count: padding))
        }
    }

    /// The text of the line, without the tool's name: `issuing 12/24` or `writing 1.0 MiB`.
    static func line(_ label: String, done: Int64, total: Int64?, unit: Unit) -> String {
        let amount = total.map { "\(Self.format(done, unit))/\(Self.format($0, unit))" } ?? Self.format(done, unit)
        return "\(label.escapingControlCharacters) \(amount)"
    }

    /// `count` as `unit` shows it: a number, or bytes in B, KiB, MiB or GiB with one decimal.
    static func format(_ count: Int64, _ unit: Unit) -> String {
        guard unit == .bytes else { return String(count) }
        if count < 1024 { return "\(count) B" }
        var value = Double(count) / 1024
        for suffix in ["KiB", "MiB", "GiB"] {
            if value < 1024 || suffix == "GiB" {
                let tenths = Int((value * 10).rounded())
                return "\(tenths / 10).\(tenths % 10) \(suffix)"
            }
            value /= 1024
        }
        return String(count)
    }
}
