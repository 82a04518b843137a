import DerivedCredentials
import Foundation

/// Where PKCS#11 calls that may wait run when async code makes them: a thread of their own.
///
/// A `C_Login` on a reader with a PIN pad returns when a person has typed the PIN, and a card
/// can take seconds over a sign or a key search. Swift's concurrency pool has one thread per
/// core; a call that holds one of them that long stalls every other task of the process (a
/// service's requests, a time limit's timer). The caller's task is suspended instead and resumed
/// when the thread is done. A cancelled task still waits for the call: PKCS#11 has no way to
/// interrupt a login.
public enum TokenThread {
    /// Runs `body` on a new thread and returns what it returned, or throws what it threw.
    ///
    /// While it runs, Ctrl-C ends the process (`CardInterruption`) and the cards in PC/SC
    /// readers are watched (`CardRemovalWatchdog`). When `distrustingRemoval` (reads), a card
    /// that left during the call makes it fail, since what was read may be partial; a command
    /// that changed the card (a new PIN) keeps its result, which the card confirmed.
    ///
    /// pcscd notices a card gone only at its next look at the reader (a few hundred
    /// milliseconds); a result that `suspicious` calls so (an empty listing: what a card pulled
    /// out mid-read leaves) is held until pcscd has had that time, as a failure is.
    public static func run<R: Sendable>(
        distrustingRemoval: Bool = true, settlingWhen suspicious: @escaping @Sendable (R) -> Bool = { _ in false },
        _ body: @escaping @Sendable () throws -> R
    ) async throws -> R {
        CardInterruption.enter()
        defer { CardInterruption.leave() }
        let watchdog = CardRemovalWatchdog.start()
        let outcome = await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: Result { try body() }) }
            thread.start()
        }
        guard let watchdog, distrustingRemoval else {
            _ = watchdog?.finish()
            return try outcome.get()
        }
        switch outcome {
        case .failure(let error as DCError) where [.wrongPIN, .pinLocked, .pinFinalTry].contains(error.code):
            // The card answered about its PIN: that is what the user must hear.
            _ = watchdog.finish()
        case .failure:
            try refuse(removedFrom: watchdog.finish(settling: true), "")
        case .success(let value):
            // A card that left its reader during the operation makes what was read untrustworthy,
            // even when the driver answered: OpenSC can then show a token with objects missing.
            try refuse(removedFrom: watchdog.finish(settling: suspicious(value)), "; nothing read from it is used")
        }
        return try outcome.get()
    }

    /// Throws `cardRemoved` naming the readers in `gone`, when there are any.
    private static func refuse(removedFrom gone: Set<String>, _ more: String) throws {
        guard !gone.isEmpty else { return }
        throw DCError(
            .cardRemoved,
            "the card was removed from \(gone.sorted().joined(separator: ", ")) during the operation\(more)",
            hint: "put it back and run the command again; nothing was written")
    }
}

/// A card pulled out while its driver is inside a call: OpenSC 0.23 can then stay in that call for
/// good (`C_Login` waiting on a lock of its own that it never releases). While a card operation
/// runs, the readers are looked at twice a second (SCardGetStatusChange, which never waits for the
/// card); when a card that was there at the start is gone and the call has not returned
/// `grace` later, the process ends with one line, exit 75 (`cardRemoved`): nothing has been
/// written, since output is written only after the card is done. A call that returns in time
/// reports the removal itself. A look that PC/SC cannot answer (the readers changed meanwhile) is
/// skipped, not taken for every card gone.
final class CardRemovalWatchdog: @unchecked Sendable {
    /// How long a call may still take after its card left the reader.
    static let grace: Duration = .seconds(3)

    // `running` is read by the watching thread and cleared by the operation's; `gone` is written by
    // the watching thread; both under `lock`, which the watching thread also holds while it ends
    // the process, so that an operation that finished first is never cut off.
    private let lock = NSLock()
    private var running = true
    private var gone: Set<String> = []
    private let present: Set<String>

    private init(present: Set<String>) { self.present = present }

    /// Starts watching the cards present now; nil when PC/SC shows none (no pcscd, no card).
    static func start() -> CardRemovalWatchdog? {
        guard let present = PIVCard.readersWithCard(), !present.isEmpty else { return nil }
        let watchdog = CardRemovalWatchdog(present: present)
        let thread = Thread { watchdog.watch() }
        thread.start()
        return watchdog
    }

    /// Stops watching and returns the readers whose card left during the operation: seen gone by
    /// the watching thread, or gone now.
    ///
    /// pcscd notices a card leaving within a few tenths of a second; a call that failed because
    /// its card left can return before that, so with `settling` the readers are looked at for up
    /// to 0.8 s.
    func finish(settling: Bool = false) -> Set<String> {
        let seen = lock.withLock {
            running = false
            return gone
        }
        var missing = seen.union(PIVCard.readersWithCard().map { present.subtracting($0) } ?? [])
        var looks = settling ? 8 : 0
        while missing.isEmpty && looks > 0 {
            Thread.sleep(forTimeInterval: 0.1)
            missing = PIVCard.readersWithCard().map { present.subtracting($0) } ?? []
            looks -= 1
        }
        return missing
    }

    private var isRunning: Bool { lock.withLock { running } }

    private func watch() {
        var goneSince: ContinuousClock.Instant?
        while isRunning {
            Thread.sleep(forTimeInterval: 0.5)
            guard let now = PIVCard.readersWithCard() else { continue }
            let missing = present.subtracting(now)
            if missing.isEmpty {
                goneSince = nil
                continue
            }
            lock.withLock { gone.formUnion(missing) }
            let since = goneSince ?? ContinuousClock.now
            goneSince = since
            guard ContinuousClock.now - since >= Self.grace else { continue }
            lock.withLock {
                guard running else { return }
                let readers = missing.sorted().map { $0.escapingControlCharacters }.joined(separator: ", ")
                let line =
                    "card: the card was removed from \(readers) and its driver did not return; put it back and run the command again; nothing was written\n"
                _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
                // The other cards this run used may still hold a verified PIN.
                PIVCard.reset(present.subtracting(missing))
                _exit(75)
            }
        }
    }
}

/// Ctrl-C while a card is in use: PKCS#11 cannot interrupt a call, so the process ends at once,
/// exit 130, with one line saying so, after resetting the cards in the readers (which ends any
/// verification; a card held in a transaction by this process is reset by pcscd as the process
/// ends). Nothing has been written yet, since output is written only after the card is done.
/// Outside a card operation, Ctrl-C does what it always does.
enum CardInterruption {
    // The number of card operations in flight; under `lock`.
    private static let lock = NSLock()
    nonisolated(unsafe) private static var inFlight = 0

    /// A card operation begins (the handler is installed on the first).
    static func enter() {
        _ = installed
        lock.withLock { inFlight += 1 }
    }

    /// A card operation ended.
    static func leave() { lock.withLock { inFlight -= 1 } }

    // Set once, by the lazy initialiser's lock; never changed after.
    nonisolated(unsafe) private static let installed: DispatchSourceSignal = {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            guard lock.withLock({ inFlight }) > 0 else {
                // Not in a card call: the default action, as if no handler had been installed.
                signal(SIGINT, SIG_DFL)
                raise(SIGINT)
                return
            }
            let line = "card: interrupted; the card is reset as this program lets go of it, and nothing was written\n"
            _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
            // Best effort, and bounded: a reader that does not answer within a second is left to
            // pcscd's clean-up.
            PIVCard.reset(PIVCard.readersWithCard() ?? [])
            _exit(130)
        }
        source.resume()
        return source
    }()
}
