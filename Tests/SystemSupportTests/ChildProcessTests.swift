import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

@Suite("Child processes: deadlines", .ownThreads, .timeLimit(.minutes(3)))
struct ChildProcessTests {
    @Test("A child past its deadline is killed: timedOut, SIGKILL, and a lifetime of the limit plus little")
    func deadline() async throws {
        let sandbox = try Sandbox("child-deadline")
        defer { sandbox.remove() }
        let pidFile = sandbox.file("pid")
        let watcher = LifetimeWatcher(pidFile: pidFile)
        let outcome = try await ChildProcess.run(
            "/bin/sh",
            arguments: ["-c", "echo $$ > '\(pidFile).tmp'; mv '\(pidFile).tmp' '\(pidFile)'; exec sleep 300"],
            environment: sandbox.environment, limits: .init(timeout: .milliseconds(500)))
        #expect(outcome.timedOut)
        #expect(outcome.termination == .signaled(SIGKILL))
        // The runner's own measure: from the spawn to the reap.
        #expect(outcome.lifetime >= .milliseconds(500))
        #expect(outcome.lifetime < .seconds(3), "lived \(outcome.lifetime) under a 500 ms limit")
        // An independent measure, from a thread that watches /proc.
        let life = await watcher.result()
        let lifetime = try #require(life.lifetime, "the child (pid \(String(describing: life.pid))) never died")
        #expect(lifetime < .seconds(3), "the watcher saw the child live \(lifetime)")
    }

    @Test("A child that ends in time is not marked timed out, and its lifetime is its own")
    func inTime() throws {
        let sandbox = try Sandbox("child-in-time")
        defer { sandbox.remove() }
        let outcome = try ChildProcess.runSynchronously(
            "/bin/sh", arguments: ["-c", "sleep 0.3; exit 3"], environment: sandbox.environment,
            limits: .init(timeout: .seconds(30)))
        #expect(!outcome.timedOut)
        #expect(outcome.termination == .exited(3))
        #expect(outcome.lifetime >= .milliseconds(300))
        #expect(outcome.lifetime < .seconds(20))
    }

    @Test("A cancelled run kills its child (SIGKILL to its process group) and throws CancellationError")
    func cancellation() async throws {
        let sandbox = try Sandbox("child-cancel")
        defer { sandbox.remove() }
        let pidFile = sandbox.file("pid")
        let run = Task {
            try await ChildProcess.run(
                "/bin/sh",
                arguments: ["-c", "echo $$ > '\(pidFile).tmp'; mv '\(pidFile).tmp' '\(pidFile)'; exec sleep 300"],
                environment: sandbox.environment, limits: .init(timeout: .seconds(60)))
        }
        while !FileManager.default.fileExists(atPath: pidFile) { try await Task.sleep(for: .milliseconds(2)) }
        let pid = try #require(
            Int32(try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .newlines)))
        #expect(Self.isAlive(pid))
        run.cancel()
        await #expect(throws: CancellationError.self) { try await run.value }
        // Killed, and reaped by the runner: gone, not even a zombie. (How soon is a benchmark's
        // business: the cancellation wakes the runner at once, see docs/BENCHMARKS.md.)
        #expect(!Self.isAlive(pid), "the child \(pid) outlived the cancellation")
        #expect(!FileManager.default.fileExists(atPath: "/proc/\(pid)"), "the child \(pid) was not reaped")
    }

    /// Whether `pid` is a live process: not gone, and not a zombie (`/proc/PID/stat`'s state).
    static func isAlive(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].split(separator: " ").first
        return state != "Z" && state != "X"
    }
}
