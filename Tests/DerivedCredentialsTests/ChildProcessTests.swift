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
}
