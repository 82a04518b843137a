internal import CSystemShims
import DerivedCredentials
import Foundation
import ManagedClient
import SystemSupport

/// The result of running a process to completion.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: [UInt8]
    public var stderr: [UInt8]
    /// The child was killed because it ran past its deadline.
    public var timedOut: Bool = false
    /// How long the child lived, measured by the runner thread (not by the test's executor).
    public var lifetime: Duration = .zero
    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
}

public struct ProcessFailure: Error, CustomStringConvertible {
    public var command: [String]
    public var result: ProcessResult
    public init(command: [String], result: ProcessResult) {
        self.command = command
        self.result = result
    }
    public var description: String {
        "\(command.joined(separator: " ")) exited \(result.status)\(result.timedOut ? " (killed: timed out)" : ""): "
            + result.stderrText
    }
}

/// Runs `executable` with `arguments` (an argv array, never a shell) and waits at most `timeout`
/// seconds: then its whole process group is killed and the result says `timedOut` (status 137).
///
/// It runs through the product's own runner, `ChildProcess`: pipes close-on-exec from birth, the
/// child inherits no descriptor but 0, 1 and 2, it gets a process group of its own, and reading
/// stops shortly after the kill even if a grandchild escaped the group with a pipe end. A test
/// that starts a process therefore cannot wait longer than its timeout plus a few seconds.
///
/// Without an `environment`, the child gets the process-wide ``Sandbox/shared()`` environment,
/// never the test process's own: no program a test starts sees the real `HOME` or `XDG_*`.
///
/// `closing` starts the child with its standard output (1), error (2) or both closed, as `>&-`
/// and `2>&-` in a shell: what it then writes there is lost, and the result's streams are empty.
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, environment: [String: String]? = nil,
    currentDirectory: String? = nil, timeout: TimeInterval = 60, closing: Set<Int32> = []
) throws -> ProcessResult {
    let path = executable.hasPrefix("/") ? executable : try which(executable)
    let outcome = try ChildProcess.runSynchronously(
        path, arguments: arguments, stdin: SecretBytes(stdin ?? []),
        environment: try environment ?? Sandbox.shared().environment,
        currentDirectory: currentDirectory,
        limits: .init(timeout: .milliseconds(Int(timeout * 1000)), stdoutLimit: 256 << 20, stderrLimit: 16 << 20),
        closingStandardStreams: closing)
    let status: Int32
    switch outcome.termination {
    case .exited(let code): status = code
    case .signaled(let signal): status = 128 + signal
    }
    // Every document the tools print for --json is checked against its schema (docs/schema).
    if status == 0, !outcome.stdout.isEmpty, JSONSchemas.printsDocument(path, arguments) {
        try JSONSchemas.validate(outcome.stdout)
    }
    return ProcessResult(
        status: status, stdout: outcome.stdout, stderr: outcome.stderr, timedOut: outcome.timedOut,
        lifetime: outcome.lifetime)
}

/// Runs and throws unless the exit status is 0.
@discardableResult
public func runChecked(_ executable: String, _ arguments: [String], stdin: [UInt8]? = nil) throws -> ProcessResult {
    let result = try run(executable, arguments, stdin: stdin)
    guard result.status == 0 else { throw ProcessFailure(command: [executable] + arguments, result: result) }
    return result
}

/// The Debian package of each tool the tests run, for the error when one is missing.
public let debianPackages: [String: String] = [
    "openssl": "openssl", "softhsm2-util": "softhsm2", "pkcs11-tool": "opensc", "p11tool": "gnutls-bin",
    "p11-kit": "p11-kit", "python3": "python3", "xdg-mime": "xdg-utils", "gio": "libglib2.0-bin",
    "desktop-file-validate": "desktop-file-utils", "strace": "strace", "prlimit": "util-linux",
    "script": "bsdutils", "keyctl": "keyutils", "dbus-daemon": "dbus-daemon", "dbus-monitor": "dbus-bin",
    "dbus-send": "dbus-bin", "Xvfb": "xvfb", "dunst": "dunst", "dunstctl": "dunst", "xdotool": "xdotool",
    "import": "imagemagick", "identify": "imagemagick", "nginx": "nginx", "curl": "curl",
    "gnutls-cli": "gnutls-bin", "certutil": "libnss3-tools", "modutil": "libnss3-tools", "firefox-esr": "firefox-esr",
    "chromium": "chromium",
]

/// The absolute path of `name` on `PATH`, or an error that names the Debian package to install.
public func which(_ name: String) throws -> String {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let path = "\(directory)/\(name)"
        if access(path, X_OK) == 0 { return path }
    }
    let package = debianPackages[name].map { "install the Debian package \($0)" } ?? "install it"
    throw ProcessFailure(
        command: [name],
        result: ProcessResult(
            status: 127, stdout: [],
            stderr: Array("not found on PATH: \(package) (scripts/test installs every tool the suite needs)".utf8)))
}

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "dctest") throws {
        var template = Array("\(NSTemporaryDirectory())/\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        path = String(cString: made)
    }

    public func file(_ name: String) -> String { path + "/" + name }

    /// Writes a file, mode 0600 (secret files must be), with O_CLOEXEC. (Foundation's Data.write does not set it: a process another
    /// test forks meanwhile would keep the descriptor for its whole life, and a script written this
    /// way could not be executed — ETXTBSY — until that process ends.)
    public func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let target = file(name)
        let fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            guard count > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            offset += count
        }
        return target
    }

    public func write(_ name: String, _ text: String) throws -> String { try write(name, Array(text.utf8)) }

    public func read(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: file(name))))
    }

    public func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    /// Removes the directory, after taking out of the kernel keyring the unlocked key of every
    /// managed client whose store is in it: the key outlives the files, and a user's keys are few
    /// (200 for a user other than root, in every keyring together), so a run's unlocked clients
    /// would use them up long before their auto-lock.
    public func remove() {
        let enumerator = FileManager.default.enumerator(atPath: path)
        while let name = enumerator?.nextObject() as? String {
            guard name.hasSuffix("store/wrapped-key.json") else { continue }
            let store = (path + "/" + name as NSString).deletingLastPathComponent
            ManagedClient.forgetUnlockedKey(base: (store as NSString).deletingLastPathComponent)
        }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Removes the directory when the test process exits: for fixtures that live as long as the
    /// process (the SoftHSM tokens, the openssl-made certificates, the shared sandbox).
    public func removeAtExit() { ExitCleanup.shared.add(path) }
}

/// Directories removed when the process exits.
private final class ExitCleanup: @unchecked Sendable {
    // `paths` is guarded by `lock`.
    private let lock = NSLock()
    private var paths: [String] = []
    static let shared: ExitCleanup = {
        let cleanup = ExitCleanup()
        atexit { ExitCleanup.shared.removeAll() }
        return cleanup
    }()

    func add(_ path: String) { lock.withLock { paths.append(path) } }

    func removeAll() {
        for path in lock.withLock({ paths }) { try? FileManager.default.removeItem(atPath: path) }
    }
}

/// The code of the DCError `body` throws, or nil if it throws nothing (or something else).
public func thrownCode(_ body: () async throws -> Void) async -> DCError.Code? {
    await thrownError(body)?.code
}

/// The DCError `body` throws, or nil if it throws nothing (or something else).
public func thrownError(_ body: () async throws -> Void) async -> DCError? {
    do {
        try await body()
        return nil
    } catch let error as DCError {
        return error
    } catch {
        return nil
    }
}

/// A process started with its output discarded, for tests that need its pid: to kill it at a
/// chosen moment, or to know a pid that has exited. Started like every other child here (argv
/// array, no inherited descriptors but 0–2, its own process group); ``wait(timeout:)`` is bounded.
public struct SpawnedProcess: Sendable {
    /// The child's process id (also its process group's).
    public let pid: Int32

    /// Starts `executable` with `/dev/null` as stdin, and stdout and stderr appended to `output`
    /// (a file, created 0600 if missing) or else discarded.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, output: String? = nil
    ) throws {
        let environment = try environment ?? Sandbox.shared().environment
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        for fd in Int32(1)...2 {
            posix_spawn_file_actions_addopen(
                &actions, fd, output ?? "/dev/null", output == nil ? O_WRONLY : O_WRONLY | O_CREAT | O_APPEND, 0o600)
        }
        dc_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO) }
        self.pid = pid
    }

    /// Sends `signal` to the process.
    public func kill(_ signal: Int32 = SIGKILL) { _ = Glibc.kill(pid, signal) }

    /// Waits for the process to end, killing its process group at the deadline. Returns the
    /// raw wait status (`WIFSIGNALED` etc. apply), or nil when it had to be killed.
    @discardableResult
    public func wait(timeout: Duration = .seconds(60)) -> Int32? {
        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { return status }
            if result < 0 && errno != EINTR { return nil }
            if ContinuousClock.now >= deadline {
                Glibc.kill(-pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return nil
            }
            usleep(2000)
        }
    }

    /// Whether a raw wait status says the process was killed by a signal.
    public static func wasSignaled(_ status: Int32) -> Bool { (status & 0x7F) != 0 && (status & 0x7F) != 0x7F }
}

/// What a `--json` document (docs/JSON.md) holds under `kind`, after checking that it is a JSON
/// object with exactly `version` (the current schema's) and `kind` at the top.
public func jsonPayload(_ output: [UInt8], _ kind: String) throws -> Any {
    struct NotADocument: Error, CustomStringConvertible {
        var description: String
    }
    let object = try JSONSerialization.jsonObject(with: Data(output), options: [.fragmentsAllowed])
    guard let document = object as? [String: Any] else {
        throw NotADocument(description: "not a JSON object: \(String(decoding: output.prefix(200), as: UTF8.self))")
    }
    guard document["version"] as? Int == 1, Set(document.keys) == ["version", kind], let payload = document[kind]
    else {
        throw NotADocument(description: "expected {\"version\": 1, \"\(kind)\": …}, got keys \(document.keys.sorted())")
    }
    return payload
}
