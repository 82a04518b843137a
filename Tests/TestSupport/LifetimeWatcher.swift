import Foundation

/// Measures how long a child process lives, from a thread of its own: not from the test's task,
/// which on a busy runner can wait many seconds for a cooperative thread, so that a bound on the
/// child's life is a bound on the child and not on the test executor.
///
/// The child writes its PID to `pidFile` (atomically: `echo $$ > F.tmp; mv F.tmp F`) and then
/// `exec`s whatever it runs, so the PID stays the same. The watcher polls for the file, then polls
/// `/proc/PID/stat` every few milliseconds; the process counts as dead once it is gone, a zombie
/// (`Z`, killed and not yet reaped, or reparented to an init that does not reap) or `X`, or when
/// the PID belongs to a process with another start time (reused).
public final class LifetimeWatcher: @unchecked Sendable {
    /// What the watcher saw.
    public struct Observation: Sendable {
        /// The child's pid, as read from its PID file; nil if the file never appeared.
        public var pid: pid_t?
        /// When the PID file was first read: the child was alive then.
        public var firstSeen: ContinuousClock.Instant?
        /// When the child was first seen dead; nil if it was still alive when the watcher gave up.
        public var died: ContinuousClock.Instant?

        /// From first sight to death; nil if it never died (or was never seen).
        public var lifetime: Duration? {
            guard let firstSeen, let died else { return nil }
            return died - firstSeen
        }
    }

    // Guarded by `lock`.
    private let lock = NSLock()
    private var observation = Observation()
    private var finished = false

    /// Starts watching on a new thread; it gives up `giveUpAfter` after it started.
    public init(pidFile: String, giveUpAfter: Duration = .seconds(120)) {
        let thread = Thread { [self] in watch(pidFile: pidFile, giveUpAfter: giveUpAfter) }
        thread.start()
    }

    /// What was seen so far (complete once ``isFinished``).
    public var seen: Observation { lock.withLock { observation } }

    /// The child died, or the watcher gave up.
    public var isFinished: Bool { lock.withLock { finished } }

    /// Waits (without blocking a cooperative thread) until the watcher is finished, and returns
    /// what it saw. The times in it were taken by the watcher's thread, not by this task.
    public func result() async -> Observation {
        while !isFinished { try? await Task.sleep(for: .milliseconds(20)) }
        return seen
    }

    /// Blocks the calling thread until the watcher is finished (for synchronous tests).
    public func resultSynchronously() -> Observation {
        while !isFinished { usleep(20_000) }
        return seen
    }

    private func watch(pidFile: String, giveUpAfter: Duration) {
        defer { lock.withLock { finished = true } }
        let deadline = ContinuousClock.now + giveUpAfter
        var pid: pid_t?
        while pid == nil && ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
                let value = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                pid = value
            } else {
                usleep(2_000)
            }
        }
        guard let pid, let start = Self.stat(pid)?.start else { return }
        lock.withLock {
            observation.pid = pid
            observation.firstSeen = ContinuousClock.now
        }
        while ContinuousClock.now < deadline {
            let now = ContinuousClock.now
            let current = Self.stat(pid)
            if current == nil || current?.start != start || current?.state == "Z" || current?.state == "X" {
                lock.withLock { observation.died = now }
                return
            }
            usleep(5_000)
        }
    }

    /// The state letter and start time (field 22, clock ticks since boot) from `/proc/PID/stat`.
    static func stat(_ pid: pid_t) -> (state: Character, start: Substring)? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm) ": state is field 3, starttime field 22.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let state = fields[0].first else { return nil }
        return (state, fields[19])
    }
}
