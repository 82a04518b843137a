import Testing

extension Trait where Self == SoftHSMTurns {
    /// The suite's tests use the SoftHSM tokens: each takes its turn with every other test that
    /// does. See ``SoftHSMTurns``.
    public static var softHSM: SoftHSMTurns { SoftHSMTurns() }
}

/// A suite trait: the tests of every suite that carries it run one at a time (in any order), while
/// the rest of the suite runs in parallel around them.
///
/// SoftHSM's file store is not safe for one process reading a token while another logs in to it:
/// every login rewrites the token's files, and a process reading the token at that moment sees
/// objects vanish (an empty listing), handles turn invalid (`CKR_OBJECT_HANDLE_INVALID`) or a
/// general error (`CKR_GENERAL_ERROR`). A smart card has no such race (the reader serialises), and
/// the tests compare listings with peer tools, so the tests that use the tokens take turns
/// instead of tolerating it. Swift Testing's own `.serialized` works only within one suite.
///
/// A turn is reentrant: a test that carries the trait in a suite that carries it too runs in the
/// one turn it has (taking a second would wait for the first forever).
public struct SoftHSMTurns: TestCaseScoping {
    /// Whether the current task runs within a turn.
    @TaskLocal static var holdsTurn = false

    /// Runs `function` when no other test with this trait runs.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard !Self.holdsTurn else { return try await function() }
        await Turns.shared.acquire()
        do {
            try await Self.$holdsTurn.withValue(true) { try await function() }
        } catch {
            await Turns.shared.release()
            throw error
        }
        await Turns.shared.release()
    }
}

/// One turn at a time, handed to the waiters in the order they came; waiting blocks no thread.
actor Turns {
    static let shared = Turns()
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty {
            busy = false
        } else {
            waiting.removeFirst().resume()
        }
    }
}
