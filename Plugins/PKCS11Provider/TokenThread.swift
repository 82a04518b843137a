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
        return try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.start()
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
