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
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.start()
        }
    }
}
