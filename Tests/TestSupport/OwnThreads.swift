import Foundation
import Testing

extension Trait where Self == OwnThreads {
    /// Runs every test of a suite on threads of the suite run's own, never on Swift's concurrency
    /// pool. See ``OwnThreads``.
    public static var ownThreads: OwnThreads { OwnThreads() }
}

/// A suite trait: each test runs with a task executor preference for ``BlockingThreads``, so its
/// body, its child tasks and the default actors it calls run on threads that may block.
///
/// Swift's concurrency pool has one thread per core. Many tests block the thread they run on for
/// seconds: they wait for a child process, sleep between the writes of a killed writer, hold a
/// PKCS#11 session. Run in parallel on a two-core machine, two such tests take the whole pool, and
/// every other task waits: an app's event loop started by another test, Swift Testing's own time
/// limits. Tests then time out in bulk for no fault of their own. With this trait a blocked test
/// holds only a thread of its own, and the concurrency pool stays free for the tasks that need it.
/// Unstructured tasks a test starts (`Task { … }`) still run on the concurrency pool, as an app's
/// would.
public struct OwnThreads: TestCaseScoping {
    /// Runs `function` with ``BlockingThreads/shared`` as its task executor preference.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(BlockingThreads.shared) { try await function() }
    }
}

/// A suite trait that wraps each test case of its suite and of the suites nested in it, never a
/// suite as a whole: what ``OwnThreads`` and ``SoftHSMTurns`` share.
public protocol TestCaseScoping: SuiteTrait, TestTrait, TestScoping {}

extension TestCaseScoping {
    /// Applies to the tests of nested suites too.
    public var isRecursive: Bool { true }

    /// Scopes each test case; a suite itself needs nothing.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }
}

/// A task executor that never makes a job wait for a blocked thread: a job goes to an idle thread
/// when there is one, and to a new thread when there is not. A thread idle for ten seconds ends.
///
/// This is what the tests need and an app should not use: a job that blocks costs a thread rather
/// than a slot of the bounded concurrency pool, so the number of threads follows the number of
/// blocked tests.
public final class BlockingThreads: TaskExecutor, @unchecked Sendable {
    /// The one instance the suites share.
    public static let shared = BlockingThreads()

    // Guards every property below.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var idle = 0
    // Idle threads already told to take a job, which have not woken yet.
    private var wakeups = 0

    /// Hands `job` to an idle thread, or to a new one when every thread is busy.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        defer { condition.unlock() }
        jobs.append(job)
        if idle > wakeups {
            wakeups += 1
            condition.signal()
        } else {
            let thread = Thread { [self] in work() }
            thread.name = "test-blocking"
            thread.start()
        }
    }

    // A thread's life: run jobs while there are any, wait for more, end after ten idle seconds.
    private func work() {
        condition.lock()
        while true {
            if !jobs.isEmpty {
                let job = jobs.removeFirst()
                condition.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
                condition.lock()
                continue
            }
            idle += 1
            let signaled = condition.wait(until: Date(timeIntervalSinceNow: 10))
            idle -= 1
            if wakeups > 0 {
                wakeups -= 1
            } else if !signaled && jobs.isEmpty {
                condition.unlock()
                return
            }
        }
    }
}
