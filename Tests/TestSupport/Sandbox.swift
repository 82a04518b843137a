import Foundation

/// A test's own corner of the file system, and the environment that points a program into it.
///
/// Every test that runs one of our programs, or calls library code that finds its files through
/// `HOME` and the XDG base directories, takes one of these: `HOME`, `XDG_CONFIG_HOME`,
/// `XDG_DATA_HOME`, `XDG_STATE_HOME`, `XDG_CACHE_HOME`, a 0700 `XDG_RUNTIME_DIR`, `XDG_CONFIG_DIRS`
/// and `XDG_DATA_DIRS` all lie inside one temporary directory, so nothing a test does can reach
/// the user's desktop configuration, keyring or data. (`scripts/test` also points the test
/// process's own `XDG_*` at sentinel directories and fails if anything appears in them.)
///
/// The environment is minimal: the sandbox's directories, `PATH`, `LANG`, `TMPDIR`, and
/// `SOFTHSM2_CONF` when the SoftHSM fixture has set it, the sanitizers' settings when set, plus
/// what the test adds. Nothing else of the test process's environment reaches the child.
public struct Sandbox: Sendable {
    /// The temporary directory that holds everything.
    public let directory: TemporaryDirectory
    /// The temporary directory's path.
    public var root: String { directory.path }
    /// `HOME` (0700).
    public var home: String { root + "/home" }
    /// `XDG_CONFIG_HOME`.
    public var configHome: String { home + "/.config" }
    /// `XDG_DATA_HOME`.
    public var dataHome: String { home + "/.local/share" }
    /// `XDG_STATE_HOME`.
    public var stateHome: String { home + "/.local/state" }
    /// `XDG_CACHE_HOME`.
    public var cacheHome: String { home + "/.cache" }
    /// `XDG_RUNTIME_DIR` (0700, as a login session has it).
    public var runtimeDirectory: String { root + "/run" }
    /// `XDG_CONFIG_DIRS`: the system configuration, here inside the sandbox.
    public var configDirectories: String { root + "/etc/xdg" }
    /// `XDG_DATA_DIRS`: the system data directories, here inside the sandbox.
    public var dataDirectories: String { root + "/usr/share" }
    /// Variables the test adds or overrides (a provider path, `XDG_CURRENT_DESKTOP`, …).
    public var extra: [String: String]

    /// Makes the directories (`HOME` and the runtime directory 0700, as a login session has them).
    public init(_ label: String = "sandbox", extra: [String: String] = [:]) throws {
        directory = try TemporaryDirectory(label)
        self.extra = extra
        for path in [home, configHome, dataHome, stateHome, cacheHome, configDirectories, dataDirectories] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try FileManager.default.createDirectory(
            atPath: runtimeDirectory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        chmod(home, 0o700)
    }

    /// The XDG variables alone, for library code that takes an environment dictionary.
    public var xdg: [String: String] {
        [
            "HOME": home, "XDG_CONFIG_HOME": configHome, "XDG_DATA_HOME": dataHome, "XDG_STATE_HOME": stateHome,
            "XDG_CACHE_HOME": cacheHome, "XDG_RUNTIME_DIR": runtimeDirectory, "XDG_CONFIG_DIRS": configDirectories,
            "XDG_DATA_DIRS": dataDirectories,
        ]
    }

    /// The whole environment a child gets. Read when asked, so `SOFTHSM2_CONF` is seen once the
    /// SoftHSM fixture has set it.
    public var environment: [String: String] {
        let inherited = ProcessInfo.processInfo.environment
        var environment = xdg
        environment["PATH"] = inherited["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        environment["LANG"] = "C.UTF-8"
        environment["TMPDIR"] = inherited["TMPDIR"] ?? "/tmp"
        if let softHSM = inherited["SOFTHSM2_CONF"] { environment["SOFTHSM2_CONF"] = softHSM }
        // A sanitizer run (ASan, LSan, UBSan builds) configures the programs the tests start alike.
        for key in ["ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"] {
            if let value = inherited[key] { environment[key] = value }
        }
        return environment.merging(extra) { $1 }
    }

    /// A path inside the sandbox.
    public func file(_ name: String) -> String { directory.file(name) }

    /// Writes a file inside the sandbox (close-on-exec) and returns its path.
    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String { try directory.write(name, text) }

    /// Runs `executable` inside the sandbox: its environment, the sandbox as working directory
    /// unless `currentDirectory` says otherwise.
    @discardableResult
    public func run(
        _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, environment more: [String: String] = [:],
        currentDirectory: String? = nil, timeout: TimeInterval = 60, closing: Set<Int32> = []
    ) throws -> ProcessResult {
        try TestSupport.run(
            executable, arguments, stdin: stdin, environment: environment.merging(more) { $1 },
            currentDirectory: currentDirectory ?? root, timeout: timeout, closing: closing)
    }

    /// Removes the whole sandbox.
    public func remove() { directory.remove() }

    /// One sandbox for the whole test process: the environment of every child started without
    /// an explicit one (``run(_:_:stdin:environment:currentDirectory:timeout:)`` with
    /// `environment: nil`), so that not even a test that forgot its own sandbox lets a program see
    /// the real `HOME` or `XDG_*`. Tests that keep state between commands take a sandbox of their own.
    public static func shared() throws -> Sandbox {
        try SharedSandbox.instance.get()
    }
}

/// Holds the process-wide sandbox, made on first use.
private final class SharedSandbox: @unchecked Sendable {
    // `made` is guarded by `lock`.
    private let lock = NSLock()
    private var made: Sandbox?
    static let instance = SharedSandbox()

    func get() throws -> Sandbox {
        try lock.withLock {
            if let made { return made }
            let sandbox = try Sandbox("shared-sandbox")
            sandbox.directory.removeAtExit()
            made = sandbox
            return sandbox
        }
    }
}
