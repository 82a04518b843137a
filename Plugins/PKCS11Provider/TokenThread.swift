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
    public static func run<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
        CardInterruption.arm()
        let watchdog = CardRemovalWatchdog.start()
        let outcome = await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: Result { try body() }) }
            thread.start()
        }
        // A card that left its reader during the operation makes what was read untrustworthy, even
        // when the driver answered: OpenSC can then show a token with some of its objects missing.
        if case .failure = outcome, let gone = watchdog?.finish(settling: true), !gone.isEmpty {
            throw DCError(
                .cardRemoved, "the card was removed from \(gone.sorted().joined(separator: ", ")) during the operation",
                hint: "put it back and run the command again; nothing was written")
        }
        if let gone = watchdog?.finish(), !gone.isEmpty {
            throw DCError(
                .cardRemoved,
                "the card was removed from \(gone.sorted().joined(separator: ", ")) during the operation; nothing read from it is used",
                hint: "put it back and run the command again; nothing was written")
        }
        return try outcome.get()
    }
}

/// A card pulled out while its driver is inside a call: OpenSC 0.23 can then stay in that call for
/// good (`C_Login` waiting on a lock of its own that it never releases). While a card operation
/// runs, the readers are looked at twice a second (SCardGetStatusChange, which never waits for the
/// card); when a card that was there at the start is gone and the call has not returned
/// ``grace`` later, the process ends with one line, exit 75 (`cardRemoved`): nothing has been
/// written, since output is written only after the card is done. A call that returns in time
/// reports the removal itself.
final class CardRemovalWatchdog: @unchecked Sendable {
    /// How long a call may still take after its card left the reader.
    static let grace: Duration = .seconds(3)

    // `running` is read by the watching thread and cleared by the operation's; `gone` is written by
    // the watching thread; both under `lock`.
    private let lock = NSLock()
    private var running = true
    private var gone: Set<String> = []
    private var present: Set<String> = []

    /// Starts watching the cards present now; nil when PC/SC shows none (no pcscd, no card).
    static func start() -> CardRemovalWatchdog? {
        let present = PIVCard.readersWithCard()
        guard !present.isEmpty else { return nil }
        let watchdog = CardRemovalWatchdog()
        watchdog.present = present
        let thread = Thread { watchdog.watch(present) }
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
        let (seen, present) = lock.withLock {
            running = false
            return (gone, self.present)
        }
        var missing = seen.union(present.subtracting(PIVCard.readersWithCard()))
        var looks = settling ? 8 : 0
        while missing.isEmpty && looks > 0 {
            Thread.sleep(forTimeInterval: 0.1)
            missing = present.subtracting(PIVCard.readersWithCard())
            looks -= 1
        }
        return missing
    }

    private var isRunning: Bool { lock.withLock { running } }

    private func watch(_ present: Set<String>) {
        var goneSince: ContinuousClock.Instant?
        while isRunning {
            Thread.sleep(forTimeInterval: 0.5)
            let missing = present.subtracting(PIVCard.readersWithCard())
            if missing.isEmpty {
                goneSince = nil
                continue
            }
            lock.withLock { gone.formUnion(missing) }
            let since = goneSince ?? ContinuousClock.now
            goneSince = since
            if ContinuousClock.now - since >= Self.grace, isRunning {
                let readers = missing.sorted().map { $0.escapingControlCharacters }.joined(separator: ", ")
                let line =
                    "card: the card was removed from \(readers) and its driver did not return; put it back and run the command again; nothing was written\n"
                _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
                _exit(75)
            }
        }
    }
}

/// Ctrl-C while a card is in use: PKCS#11 cannot interrupt a call, so the process ends at once,
/// exit 130, with one line saying so. Ending is what logs out: pcscd resets a card whose program
/// went away holding it, which clears the PIN's verification (the tests check the card afterwards),
/// and nothing has been written yet, since output is written only after the card is done.
enum CardInterruption {
    /// Installs the handler, once per process.
    static func arm() { _ = installed }

    // Set once, by the lazy initialiser's lock; never changed after.
    nonisolated(unsafe) private static let installed: DispatchSourceSignal = {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            let line = "card: interrupted; the card is reset as this program lets go of it, and nothing was written\n"
            _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
            _exit(130)
        }
        source.resume()
        return source
    }()
}
