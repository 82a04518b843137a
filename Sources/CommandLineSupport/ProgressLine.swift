import DerivedCredentials
import Dispatch
import Glibc
import Synchronization
import SystemSupport

/// The one progress reporter of both tools: a single line on standard error, rewritten in place
/// with a carriage return, for work that takes longer than a person waits without wondering
/// (issuing a batch of keys, moving a large secure file, deriving on a slow card, listing a slow
/// token).
///
/// Nothing is printed unless ``Console/showsProgress(standardErrorIsTerminal:quiet:)`` says so
/// (standard error is a terminal and `--quiet` was not given), and nothing before ``delay`` has
/// passed: work that ends within it stays silent, so a fast command prints the same on a terminal
/// as in a pipe. Updates are drawn at most every ``interval``, and a step that blocks (a card
/// thinking over one signature) is drawn anyway once ``delay`` has passed, with the seconds it has
/// taken so far; ``finish()`` clears the line, so what the command prints next starts on a clean
/// line. Safe to call from any thread.
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
        var label: String
        /// How much is done; nil for a step that cannot count (its seconds are shown instead).
        var done: Int64?
        var total: Int64?
        /// When the step now shown began: its seconds count from there.
        var stepStarted = ContinuousClock.now
        var lastDrawn: ContinuousClock.Instant?
        var width = 0
        var finished = false
    }

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
    init(_ label: String, total: Int?, unit: Unit, enabled: Bool, counting: Bool = true) {
        self.unit = unit
        self.enabled = enabled
        self.state = Mutex(State(label: label, done: counting ? 0 : nil, total: total.map(Int64.init)))
        guard enabled else { return }
        // A passphrase prompt clears the line before it asks (and nothing is drawn while it does).
        TerminalLine.clearing(for: ObjectIdentifier(self)) { [weak self] in self?.clear() }
        // Nothing may come for a while (one slow call to a card): the line still appears on time.
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(1)) { [self] in tick() }
    }

    /// A reporter of a provider's steps (``report(_:)``), which names each step as it comes: a
    /// card's login and signature, the keys a CA issues. It shows nothing until ``delay`` has
    /// passed.
    public static func steps(_ label: String) -> ProgressLine {
        ProgressLine(
            label, total: nil, unit: .items,
            enabled: Console.showsProgress(
                standardErrorIsTerminal: StandardStream.error.isTerminal, quiet: Console.isQuiet),
            counting: false)
    }

    /// Counts `amount` more done, and redraws when it is time.
    public func advance(by amount: Int = 1) { update { $0.done = ($0.done ?? 0) + Int64(amount) } }

    /// Sets how much is done (and of how much, when that became known), and redraws when it is time.
    public func set(done: Int, of total: Int? = nil) {
        update {
            $0.done = Int64(done)
            if let total { $0.total = Int64(total) }
        }
    }

    /// Shows the step a provider reports, with its count when it has one, and redraws when it is
    /// time. A provider's request takes this as its progress: `{ line.report($0) }`.
    public func report(_ progress: ProviderProgress) {
        update {
            if $0.label != progress.step {
                $0.stepStarted = .now
                // A new step is drawn at once: it may be short, and the next tick a second away.
                $0.lastDrawn = nil
            }
            $0.label = progress.step
            $0.done = progress.done.map(Int64.init)
            $0.total = progress.total.map(Int64.init)
        }
    }

    /// Ends the reporter: clears its line if it was drawn. Later calls do nothing.
    public func finish() {
        guard enabled else { return }
        state.withLock { state in
            guard !state.finished else { return }
            state.finished = true
            Self.clear(&state)
        }
        TerminalLine.stopClearing(for: ObjectIdentifier(self))
    }

    /// Clears the line for a prompt; the next update draws it again.
    private func clear() { state.withLock { Self.clear(&$0) } }

    private static func clear(_ state: inout State) {
        guard state.width > 0 else { return }
        StandardStream.error.write("\r" + String(repeating: " ", count: state.width) + "\r")
        state.width = 0
    }

    private func update(_ change: (inout State) -> Void) {
        guard enabled else { return }
        state.withLock { state in
            guard !state.finished else { return }
            change(&state)
            draw(&state, now: ContinuousClock.now)
        }
    }

    /// Redraws once a second while the work goes on, for the steps that report nothing while they
    /// wait (their seconds count up).
    private func tick() {
        let going = state.withLock { state in
            guard !state.finished else { return false }
            draw(&state, now: ContinuousClock.now)
            return true
        }
        if going { DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(1)) { [self] in tick() } }
    }

    private func draw(_ state: inout State, now: ContinuousClock.Instant) {
        guard now - started >= Self.delay, !TerminalLine.isAsking else { return }
        if let last = state.lastDrawn, now - last < Self.interval { return }
        state.lastDrawn = now
        let seconds = Int((now - state.stepStarted).components.seconds)
        let text =
            "\(Console.toolName): \(Self.line(state.label, done: state.done, total: state.total, unit: unit, seconds: seconds))"
        // Spaces cover what a longer line before left on the terminal.
        let padding = max(0, state.width - text.count)
        state.width = text.count
        StandardStream.error.write("\r" + text + String(repeating: " ", count: padding))
    }

    /// The text of the line, without the tool's name: `issuing 12/24`, `writing 1.0 MiB`, or for a
    /// step that cannot count, the seconds so far: `signing on the card… 3 s`.
    static func line(_ label: String, done: Int64?, total: Int64?, unit: Unit, seconds: Int = 0) -> String {
        guard let done else { return "\(label.escapingControlCharacters)…" + (seconds > 0 ? " \(seconds) s" : "") }
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
