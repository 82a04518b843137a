internal import CSystemShims
import DerivedCredentials
import Dispatch
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

// Why not swift-subprocess (1.0.2 is in the package mirror; evaluated for this runner): it offers a
// process group, an explicit environment, bounded capture (it throws past the limit) and closes
// the child's other descriptors, but it has no deadline of its own (a caller's timer would have to
// signal the group by hand, and its teardown signals the process, not the group), and when the
// child exits while a grandchild holds the pipe it cancels the reads at once, with no grace for
// what is already in the pipe. It would also bring swift-system and an I/O thread of its own.
// So this file keeps its own runner, cut into named steps: make the pipes, spawn, feed standard
// input, read the outputs under their caps, enforce the deadline, notice the child's exit, kill
// the group, reap.

/// Runs a program with an argv array (never a shell), feeds it standard input, and collects its
/// output under a deadline and size caps. The child gets its own process group, so a timeout or
/// a cancelled task kills whatever it started too.
public enum ChildProcess {
    /// How long a child may run and how much output it may write.
    public struct Limits: Sendable {
        /// Wall-clock time from the start; past it the child's process group is killed with SIGKILL.
        public var timeout: Duration
        /// The most standard output kept, in bytes; a child that writes more is killed.
        public var stdoutLimit: Int
        /// The most standard error kept, in bytes; the rest is dropped and the child runs on.
        public var stderrLimit: Int

        /// Defaults: 30 seconds, 4 MiB of standard output, 64 KiB of standard error.
        public init(timeout: Duration = .seconds(30), stdoutLimit: Int = 4 << 20, stderrLimit: Int = 64 << 10) {
            self.timeout = timeout
            self.stdoutLimit = stdoutLimit
            self.stderrLimit = stderrLimit
        }
    }

    /// How the child ended.
    public enum Termination: Sendable, Equatable {
        /// It exited with this status (0–255).
        case exited(Int32)
        /// A signal with this number killed it; SIGKILL (9) after a timeout or an output overflow.
        case signaled(Int32)
    }

    /// What a finished run left: how it ended, what it wrote and which limit it hit.
    public struct Outcome: Sendable {
        /// How the child ended.
        public var termination: Termination
        /// Everything the child wrote to standard output, up to ``Limits/stdoutLimit`` bytes.
        public var stdout: [UInt8]
        /// The first ``Limits/stderrLimit`` bytes the child wrote to standard error.
        public var stderr: [UInt8]
        /// The child wrote more than `stdoutLimit` bytes and was killed.
        public var stdoutOverflowed: Bool
        /// Standard error beyond `stderrLimit` was dropped (the child was not killed for it).
        public var stderrTruncated: Bool
        /// The deadline passed and the child's process group was killed.
        public var timedOut: Bool
        /// How long the child lived: from its start until it was reaped (or, for a child that
        /// outlived its killed process group's pipes, until this runner stopped waiting).
        public var lifetime: Duration
    }

    /// Runs `executable` and waits for it on a thread of its own; cancelling the task kills the child.
    /// With `confinement`, the child starts confined to it (see ``Confinement``): on a kernel
    /// without Landlock it still gets no new privileges and the seccomp filter, and the caller
    /// decides beforehand (``Confinement/unavailableReason``) whether that will do.
    /// `currentDirectory` is where the child starts (the parent's when nil).
    public static func run(
        _ executable: String, arguments: [String] = [], stdin: SecretBytes = SecretBytes([]),
        environment: [String: String]? = nil, currentDirectory: String? = nil, limits: Limits = Limits(),
        confinement: Confinement? = nil
    ) async throws -> Outcome {
        let cancellation = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let failed = DetachedThread.start {
                    // A plug-in that exits without reading its input makes our write raise SIGPIPE,
                    // which would kill the whole process. The signal goes to the writing thread:
                    // blocked here, the write fails with EPIPE instead. This thread ends with the run.
                    var pipeSignal = sigset_t()
                    sigemptyset(&pipeSignal)
                    sigaddset(&pipeSignal, SIGPIPE)
                    pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
                    continuation.resume(
                        with: Result {
                            try runBlocking(
                                executable, arguments: arguments, stdin: stdin, environment: environment,
                                currentDirectory: currentDirectory, limits: limits, confinement: confinement,
                                cancellation: cancellation)
                        })
                }
                if let failed {
                    continuation.resume(
                        throwing: DCError(
                            .providerFailed,
                            "cannot start a thread for the program: \(String(cString: strerror(failed)))",
                            subject: executable))
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
    }

    /// A flag set from the cancellation handler and read by the runner thread, whose poll also
    /// waits on ``wakeDescriptor``: the child is killed at the cancellation, not at the poll's next
    /// timeout.
    final class CancellationFlag: @unchecked Sendable {
        private let cancelled = Atomic(false)
        /// An eventfd that turns readable at the cancellation; -1 if none could be made, and the
        /// cancellation is then seen at the poll's next timeout.
        let wakeDescriptor: Int32

        /// `wakeable`: whether anyone can cancel (a synchronous run cannot, and needs no eventfd).
        init(wakeable: Bool = true) { wakeDescriptor = wakeable ? dc_eventfd_cloexec() : -1 }

        deinit { if wakeDescriptor >= 0 { close(wakeDescriptor) } }

        func cancel() {
            cancelled.store(true, ordering: .sequentiallyConsistent)
            var one: UInt64 = 1
            if wakeDescriptor >= 0 { _ = write(wakeDescriptor, &one, MemoryLayout<UInt64>.size) }
        }
        var isCancelled: Bool { cancelled.load(ordering: .sequentiallyConsistent) }
    }

    /// Runs `executable` on the calling thread and blocks until it ends or its deadline passes.
    /// For callers that are not async (test harnesses, tools); async code uses
    /// ``run(_:arguments:stdin:environment:currentDirectory:limits:confinement:)``, which keeps the blocking off the caller's
    /// executor. `currentDirectory` is where the child starts (the parent's when nil).
    /// `closingStandardStreams` (1, 2 or both) starts the child with that standard output or
    /// error closed, as `2>&-` in a shell would: for tests of a program that must not mind.
    /// `newSession` starts it in a session of its own (setsid; also a process group of its own),
    /// without a controlling terminal: a program that opens this process's terminal by name (a
    /// pinentry-tty) then reads it as any file, not as a background job the kernel stops (SIGTTIN).
    public static func runSynchronously(
        _ executable: String, arguments: [String] = [], stdin: SecretBytes = SecretBytes([]),
        environment: [String: String]? = nil, currentDirectory: String? = nil, limits: Limits = Limits(),
        closingStandardStreams: Set<Int32> = [], newSession: Bool = false
    ) throws -> Outcome {
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        var previous = sigset_t()
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        return try runBlocking(
            executable, arguments: arguments, stdin: stdin, environment: environment,
            currentDirectory: currentDirectory, limits: limits, cancellation: CancellationFlag(wakeable: false),
            closingStandardStreams: closingStandardStreams, newSession: newSession)
    }

    /// How long output is still read after the child's process group was killed.
    static let drainGrace: Duration = .seconds(2)
    /// How long output is still read after the child itself exited: what it wrote is already in
    /// the pipes, so a short grace collects it; then its group is killed and reading stops, even
    /// when a grandchild that left the group still holds a pipe end.
    static let exitGrace: Duration = .milliseconds(200)

    static func runBlocking(
        _ executable: String, arguments: [String], stdin: SecretBytes, environment: [String: String]?,
        currentDirectory: String? = nil, limits: Limits, confinement: Confinement? = nil,
        cancellation: CancellationFlag, closingStandardStreams: Set<Int32> = [], newSession: Bool = false
    ) throws -> Outcome {
        let pipes = try ChildPipes()
        let started = ContinuousClock.now
        let pid: pid_t
        do {
            pid = try spawn(
                executable, arguments: arguments, environment: environment, currentDirectory: currentDirectory,
                pipes: pipes, closingStandardStreams: closingStandardStreams, confinement: confinement,
                newSession: newSession)
        } catch {
            pipes.closeParentEnds()
            throw error
        }
        let run = RunningChild(pid: pid, pipes: pipes, stdin: stdin, limits: limits, cancellation: cancellation)
        run.collectOutput()
        let reaped = run.reap()
        if cancellation.isCancelled { throw CancellationError() }
        guard let status = reaped else {
            throw DCError(
                .ioError, "the program's exit status was lost (was SIGCHLD ignored?)", subject: executable,
                hint: "run it from a process that does not ignore SIGCHLD")
        }
        let termination: Termination =
            (status & 0x7F) == 0 ? .exited((status >> 8) & 0xFF) : .signaled(status & 0x7F)
        return Outcome(
            termination: termination, stdout: run.stdoutBytes, stderr: run.stderrBytes,
            stdoutOverflowed: run.overflowed, stderrTruncated: run.truncated, timedOut: run.timedOut,
            lifetime: ContinuousClock.now - started)
    }

    /// Starts the child in a process group of its own, with the pipes on 0, 1 and 2, nothing else
    /// open, default signal handling and an empty signal mask. Closes the child's pipe ends here.
    /// With `newSession`, the group is a session of its own too (no controlling terminal).
    private static func spawn(
        _ executable: String, arguments: [String], environment: [String: String]?, currentDirectory: String?,
        pipes: ChildPipes, closingStandardStreams: Set<Int32>, confinement: Confinement?, newSession: Bool = false
    ) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipes.input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, pipes.output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipes.error[1], 2)
        // Whatever else this process has open (another library's descriptor that is not
        // close-on-exec, a PIN file) stays here: the child gets 0, 1 and 2 only.
        dc_spawn_close_from(&actions, 3)
        for descriptor in closingStandardStreams.sorted() where descriptor == 1 || descriptor == 2 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
        if let currentDirectory { dc_spawn_chdir(&actions, currentDirectory) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaultSignals = sigset_t()
        sigemptyset(&defaultSignals)
        sigaddset(&defaultSignals, SIGPIPE)
        sigaddset(&defaultSignals, SIGXFSZ)
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setpgroup(&attributes, 0)
        // setsid makes the child the leader of a new process group as well (its id is the pid).
        let grouping = newSession ? DC_POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP
        posix_spawnattr_setflags(&attributes, Int16(grouping | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environmentStrings =
            (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { environmentStrings.forEach { free($0) } }
        var pid: pid_t = 0
        var spawned: Int32 = 0
        let start = {
            // ETXTBSY: an executable written a moment ago can still be held open by a child another
            // thread forked before exec closed it (even with O_CLOEXEC); the window is microseconds.
            for attempt in 0..<20 {
                spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environmentStrings)
                guard spawned == ETXTBSY else { break }
                usleep(useconds_t(1000 * (attempt + 1)))
            }
        }
        do {
            if let confinement { try onConfinedThread(confinement, start) } else { start() }
        } catch {
            pipes.closeChildEnds()
            throw error
        }
        pipes.closeChildEnds()
        guard spawned == 0 else {
            let reason = String(cString: strerror(spawned))
            throw DCError(
                spawned == ENOENT ? .fileNotFound : .providerFailed, "cannot start the program: \(reason)",
                subject: executable)
        }
        return pid
    }
}

extension ChildProcess {
    /// Runs `body` on a thread made for it and confined for good to `confinement` (no new
    /// privileges, the seccomp filter, the Landlock ruleset when the kernel has Landlock), and waits
    /// for it: a child that `body` starts with posix_spawn inherits the thread's confinement, while
    /// the caller's threads stay as they were. Throws, and runs nothing, when the thread cannot be
    /// confined.
    static func onConfinedThread(_ confinement: Confinement, _ body: @escaping () -> Void) throws {
        let ruleset = try confinement.makeRuleset()
        defer { if let ruleset { close(ruleset) } }
        let run = ConfinedRun(ruleset: ruleset ?? -1, body: body)
        if let failed = DetachedThread.start({ run.main() }) {
            throw DCError(.sandboxUnavailable, "cannot confine the program: \(String(cString: strerror(failed)))")
        }
        run.done.wait()
        if let failure = run.failure {
            throw DCError(.sandboxUnavailable, "cannot confine the program: \(String(cString: strerror(failure)))")
        }
    }

    /// One confined thread's work and its outcome, handed between the caller and that thread.
    private final class ConfinedRun: @unchecked Sendable {
        // `body` and `ruleset` are set before the thread starts and `failure` is written by it
        // before it signals `done`, after which the caller alone reads it: no two threads touch
        // a field at once.
        let ruleset: Int32
        let body: () -> Void
        var failure: Int32?
        let done = DispatchSemaphore(value: 0)

        init(ruleset: Int32, body: @escaping () -> Void) {
            self.ruleset = ruleset
            self.body = body
        }

        func main() {
            if dc_confine_calling_thread(ruleset) == 0 { body() } else { failure = errno }
            done.signal()
        }
    }
}

/// The three pipes between this process and a child, close-on-exec from creation: a child another
/// thread starts meanwhile inherits none of them.
private struct ChildPipes {
    var input: [Int32] = [-1, -1]
    var output: [Int32] = [-1, -1]
    var error: [Int32] = [-1, -1]

    init() throws {
        guard dc_pipe_cloexec(&input) == 0, dc_pipe_cloexec(&output) == 0, dc_pipe_cloexec(&error) == 0 else {
            let reason = String(cString: strerror(errno))
            for fd in input + output + error where fd >= 0 { close(fd) }
            throw DCError(.ioError, "cannot create pipes: \(reason)")
        }
    }

    func closeChildEnds() { for fd in [input[0], output[1], error[1]] { close(fd) } }
    func closeParentEnds() { for fd in [input[1], output[0], error[0]] { close(fd) } }
}

/// One started child, from its start until it is reaped: feeds its standard input, collects its
/// output under the caps, and enforces the deadline on its whole process group.
private final class RunningChild {
    let pid: pid_t
    let limits: Limits
    let cancellation: ChildProcess.CancellationFlag
    let deadline: ContinuousClock.Instant
    let stdoutFD: Int32
    /// A pidfd for the child (readable once it has exited), or -1 when `pidfd_open` failed.
    let exitFD: Int32
    /// The pidfd reported the exit while `waitpid` could not reap the child yet (a tracer holds
    /// it): from then on the pidfd, readable for good, is not polled again.
    var exitReported = false
    var stdinFD: Int32
    var input: [UInt8]
    var written = 0
    var openOutputs: Set<Int32>
    var stdoutBytes: [UInt8] = []
    var stderrBytes: [UInt8] = []
    var overflowed = false
    var truncated = false
    var timedOut = false
    var killedAt: ContinuousClock.Instant?
    var exitedAt: ContinuousClock.Instant?

    typealias Limits = ChildProcess.Limits

    init(
        pid: pid_t, pipes: ChildPipes, stdin: SecretBytes, limits: Limits, cancellation: ChildProcess.CancellationFlag
    ) {
        self.pid = pid
        self.limits = limits
        self.cancellation = cancellation
        deadline = ContinuousClock.now + limits.timeout
        stdoutFD = pipes.output[0]
        exitFD = dc_pidfd_open(pid)
        openOutputs = [pipes.output[0], pipes.error[0]]
        input = stdin.withUnsafeBytes { Array($0) }
        stdinFD = pipes.input[1]
        _ = fcntl(stdinFD, F_SETFL, fcntl(stdinFD, F_GETFL) | O_NONBLOCK)
        if input.isEmpty { closeStdin() }
    }

    deinit {
        if exitFD >= 0 { close(exitFD) }
        input.withUnsafeMutableBytes { SecretBytes.wipe($0) }
        closeStdin()
        stopReading()
    }

    /// Kills the child's process group once; every later call is a no-op.
    func killGroup() {
        guard killedAt == nil else { return }
        kill(-pid, SIGKILL)
        killedAt = ContinuousClock.now
    }

    /// Kills the group at the deadline or on cancellation.
    func enforceDeadline() {
        if cancellation.isCancelled { killGroup() }
        if ContinuousClock.now >= deadline && killedAt == nil {
            timedOut = true
            killGroup()
        }
    }

    /// Whether the direct child has exited, without reaping it: its zombie keeps its PID, and so
    /// its process group's id, from being reused until ``reap()``, so killing the group is safe.
    func childHasExited() -> Bool {
        var info = siginfo_t()
        let result = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT)
        return result == 0 && info.si_signo == SIGCHLD
    }

    /// Whether reading should stop with pipes still open: after the kill, the pipes should close at
    /// once, and after the child's own exit what it wrote is already in them. A process outside the
    /// group can still hold a write end (a grandchild that left the group with setsid, or a child
    /// that a library in this process forked without closing descriptors): stop waiting for it.
    func graceIsOver() -> Bool {
        let now = ContinuousClock.now
        if let killedAt, now - killedAt > ChildProcess.drainGrace { return true }
        if exitedAt == nil && childHasExited() { exitedAt = now }
        if let exitedAt, now - exitedAt > ChildProcess.exitGrace {
            killGroup()
            return true
        }
        return false
    }

    /// Polls the pipes until both outputs are closed or a grace is over, feeding standard input as
    /// the child takes it.
    func collectOutput() {
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { chunk.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        while !openOutputs.isEmpty {
            enforceDeadline()
            if graceIsOver() { break }
            var fds = openOutputs.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if stdinFD >= 0 { fds.append(pollfd(fd: stdinFD, events: Int16(POLLOUT), revents: 0)) }
            // Until the child has exited, its exit wakes the poll too (a grandchild may hold the
            // pipes open): the exit grace starts at the exit, not at the next 50 ms tick.
            if exitFD >= 0 && exitedAt == nil { fds.append(pollfd(fd: exitFD, events: Int16(POLLIN), revents: 0)) }
            // So does a cancellation, until the kill it brings (the eventfd stays readable).
            let wakeFD = cancellation.wakeDescriptor
            if wakeFD >= 0 && killedAt == nil { fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
            let ready = poll(&fds, nfds_t(fds.count), 50)
            if ready < 0 && errno != EINTR { break }
            for entry in fds where entry.revents != 0 {
                if entry.fd == exitFD {
                    // Readable for good from now on: the exit grace starts, and the pidfd leaves
                    // the poll set (also when the kernel reaped the child itself, which waitid
                    // would never report).
                    if exitedAt == nil { exitedAt = ContinuousClock.now }
                } else if entry.fd == wakeFD {
                    continue  // the next turn's enforceDeadline() kills the group
                } else if entry.fd == stdinFD {
                    feedStdin()
                } else {
                    read(from: entry.fd, into: &chunk)
                }
            }
        }
        stopReading()
        closeStdin()
    }

    /// Writes what the pipe takes of the remaining input; closes it when all is written or the
    /// child closed its end.
    func feedStdin() {
        let count = input.withUnsafeBytes { write(stdinFD, $0.baseAddress?.advanced(by: written), $0.count - written) }
        if count > 0 { written += count }
        if count < 0 && errno != EAGAIN && errno != EINTR || written == input.count { closeStdin() }
    }

    /// Reads one chunk from an output pipe and keeps it within its cap: too much standard output
    /// kills the group, too much standard error is dropped.
    func read(from fd: Int32, into chunk: inout [UInt8]) {
        let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if count <= 0 {
            if count == 0 || (errno != EAGAIN && errno != EINTR) { closeOutput(fd) }
            return
        }
        if fd == stdoutFD {
            if stdoutBytes.count + count > limits.stdoutLimit {
                overflowed = true
                killGroup()
                closeOutput(fd)
            } else {
                Self.append(chunk.prefix(count), to: &stdoutBytes)
            }
        } else {
            let room = max(0, limits.stderrLimit - stderrBytes.count)
            if count > room { truncated = true }
            stderrBytes += chunk.prefix(min(count, room))
        }
    }

    /// Appends `bytes` to `buffer` without leaving a copy behind: a buffer too small for them is
    /// copied into a larger one and wiped, not just freed, since a child's output can be a secret
    /// (a pinentry's answer).
    static func append(_ bytes: ArraySlice<UInt8>, to buffer: inout [UInt8]) {
        if buffer.count + bytes.count > buffer.capacity {
            var larger: [UInt8] = []
            larger.reserveCapacity(max(2 * buffer.capacity, buffer.count + bytes.count, 4096))
            larger += buffer
            buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            buffer = larger
        }
        buffer += bytes
    }

    /// Waits for the child itself, within the deadline: it may still run after closing its
    /// outputs, and even when it is exiting, its pipes close a moment before it can be reaped.
    /// The wait wakes at its exit (the pidfd; the deadline and cancellation are looked at every
    /// 10 ms meanwhile), or every 5 ms without a pidfd or once the pidfd has reported an exit that
    /// cannot be reaped yet. Nil when the exit status is lost: the child was reaped by someone
    /// else (the kernel does that when this process ignores SIGCHLD).
    func reap() -> Int32? {
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { return status }
            if result < 0 && errno != EINTR { return nil }
            enforceDeadline()
            if exitFD >= 0 && !exitReported {
                var exit = pollfd(fd: exitFD, events: Int16(POLLIN), revents: 0)
                if poll(&exit, 1, 10) > 0 { exitReported = true }
            } else {
                usleep(5000)
            }
        }
    }

    func closeOutput(_ fd: Int32) {
        close(fd)
        openOutputs.remove(fd)
    }

    func stopReading() { for fd in openOutputs { closeOutput(fd) } }

    func closeStdin() {
        if stdinFD >= 0 { close(stdinFD) }
        stdinFD = -1
    }
}

extension ChildProcess {
    /// Starts `executable` detached and does not wait for it: a session of its own (setsid, so
    /// neither a terminal's hangup nor a kill of this process's group reaches it), `/dev/null` on
    /// its standard input, output and error, no other descriptor, default signal handling. For a
    /// helper that outlives the command that starts it (`dcclient`'s notification waiter). Its
    /// exit status is collected by a thread of this process while this process lives, and by
    /// the system afterwards. Returns its process id.
    @discardableResult
    public static func startDetached(
        _ executable: String, arguments: [String] = [], environment: [String: String]
    ) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor in Int32(0)...2 {
            posix_spawn_file_actions_addopen(
                &actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        dc_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaultSignals = sigset_t()
        sigemptyset(&defaultSignals)
        for signal in [SIGPIPE, SIGXFSZ, SIGHUP, SIGINT, SIGTERM] { sigaddset(&defaultSignals, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        // POSIX_SPAWN_SETSID (glibc 2.26) is 0x80; Swift's Glibc module does not import it (it is
        // declared only under _GNU_SOURCE).
        let setSession: Int32 = 0x80
        posix_spawnattr_setflags(&attributes, Int16(setSession | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environmentStrings = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { environmentStrings.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environmentStrings)
        guard spawned == 0 else {
            throw DCError(
                spawned == ENOENT ? .fileNotFound : .providerFailed,
                "cannot start the program: \(String(cString: strerror(spawned)))", subject: executable)
        }
        let child = pid
        DetachedThread.start {
            var status: Int32 = 0
            while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        }
        return pid
    }
}
