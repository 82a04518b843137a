internal import CSystemShims
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// A secret held for a bounded time: gone when its lifetime ends, whether or not any process runs.
///
/// The lifetime is bounded where the secret is stored, not by a process that remembers to delete
/// it. The first choice is the kernel's key-retention service (keyrings(7)): a `user` key named
/// `derived-credentials:<name>` in the session keyring, with a kernel timeout, so the kernel
/// itself makes it unreadable when the lifetime ends, and it also goes when the login session
/// ends. When the kernel refuses (no keyring support, a seccomp filter, the per-user key quota
/// used up, or no session keyring of the login's own), the fallback is a 0600 file in a private
/// runtime directory, which carries its deadline. The file is written only where the runtime
/// directory's file system keeps its files in memory (a tmpfs or ramfs, as systemd-logind's
/// `/run/user/UID` is): on any other the secret is not stored at all, and a file found there (left
/// by an older version) is removed on sight, never read. At its deadline the file is removed by a
/// small detached process started with it (`/bin/sh`, sleeping until then; it never sees the
/// secret), whether or not any process of ours runs again; a reader removes it too if it comes
/// first.
///
/// Both holders store the same payload: the deadline (8 bytes, big-endian Unix seconds) followed
/// by the secret, so ``expiry()`` reads the same way from either, and a reader enforces the
/// deadline even if the holder has not yet acted on it. Every buffer that held the secret on the
/// way in or out is zeroed.
public struct ExpiringSecret: Sendable {
    /// Where a secret can be held, in the order ``init(name:runtimeDirectory:holders:)`` tries them.
    public enum Holder: String, Sendable {
        /// A `user` key in the session keyring, with a kernel timeout.
        case kernelKeyring = "kernel keyring"
        /// `<runtimeDirectory>/<name>.key`, mode 0600, carrying its own deadline; only on a tmpfs
        /// or ramfs, and removed at its deadline by a detached process.
        case runtimeFile = "runtime file"
    }

    /// The secret's name: `[a-z0-9-]{1,64}`.
    public let name: String
    /// The private directory that holds the runtime file.
    public let runtimeDirectory: String
    /// The holders, in the order ``store(_:lifetime:)`` tries them and ``read()`` looks.
    public let holders: [Holder]
    /// Tests only: the kernel refuses to take the secret (`add_key` fails) with this `errno`, as
    /// with the key quota used up or under a seccomp filter; reading and removing still work.
    let simulatedKernelRefusal: Int32?

    /// The secret called `name`. `runtimeDirectory` is a private (0700) directory, the runtime
    /// file's home; it is created (0700) when a secret is first stored there. `holders` is the
    /// order to try; a holder not listed is never touched. `name` must match `[a-z0-9-]{1,64}`
    /// (a programming error otherwise).
    public init(name: String, runtimeDirectory: String, holders: [Holder] = [.kernelKeyring, .runtimeFile]) {
        self.init(name: name, runtimeDirectory: runtimeDirectory, holders: holders, simulatedKernelRefusal: nil)
    }

    init(name: String, runtimeDirectory: String, holders: [Holder], simulatedKernelRefusal: Int32?) {
        precondition(
            (1...64).contains(name.utf8.count)
                && name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D },
            "an ExpiringSecret name is [a-z0-9-]{1,64}")
        precondition(!holders.isEmpty, "an ExpiringSecret needs at least one holder")
        self.name = name
        self.runtimeDirectory = runtimeDirectory
        self.holders = holders
        self.simulatedKernelRefusal = simulatedKernelRefusal
    }

    /// The kernel key's description (its name in the keyring; not secret).
    public var keyDescription: String { "derived-credentials:" + name }
    /// The runtime file's path.
    public var runtimeFile: String { runtimeDirectory + "/" + name + ".key" }

    /// Stores (replacing) the secret for `lifetime`, rounded up to whole seconds; returns the holder
    /// that took it. The holders are tried in order; the secret is then removed from every other
    /// holder, so no stale copy is left behind. Throws when `lifetime` is not positive, or when no
    /// holder took the secret (the last holder's error).
    @discardableResult
    public func store(_ secret: SecretBytes, lifetime: Duration) throws -> Holder {
        let (whole, fraction) = lifetime.components
        guard whole > 0 || (whole == 0 && fraction > 0) else {
            throw DCError(.usage, "a secret's lifetime must be positive", subject: keyDescription)
        }
        let seconds = whole + (fraction > 0 ? 1 : 0)
        guard seconds <= Int64(UInt32.max) else {
            throw DCError(.usage, "a secret's lifetime is too long", subject: keyDescription)
        }
        // The precise clock, as `expiry()` and every reader compare with: time(2) reads the
        // kernel's coarse clock, which may still say the last second for a few milliseconds.
        let deadline = Int64(Date().timeIntervalSince1970) + seconds
        var payload = Self.payload(deadline: deadline, secret: secret)
        defer { payload.withUnsafeMutableBytes { SecretBytes.wipe($0) } }

        var refusals: [DCError] = []
        for holder in holders {
            do {
                switch holder {
                case .kernelKeyring: try storeInKernel(payload, seconds: UInt32(seconds))
                case .runtimeFile: try storeInFile(payload, deadline: deadline)
                }
            } catch {
                refusals.append(
                    error as? DCError
                        ?? DCError(
                            .serviceUnavailable, "the \(holder.rawValue) refused: \(error)", subject: keyDescription))
                continue
            }
            for other in holders where other != holder { remove(from: other) }
            return holder
        }
        // The last holder's refusal, and the one before it as its cause: both are worth reading.
        guard var refusal = refusals.last else {
            throw DCError(.serviceUnavailable, "no holder took the secret", subject: keyDescription)
        }
        if refusals.count > 1, refusal.underlying == nil { refusal.underlying = refusals[refusals.count - 2] }
        throw refusal
    }

    /// The secret, or nil when it is absent, expired (an expired runtime file is removed on sight)
    /// or removed. The holders are looked at in order. Throws when a runtime file is there but
    /// cannot be read, or is not a payload this type wrote.
    public func read() throws -> SecretBytes? {
        for holder in holders {
            if let secret = try payload(in: holder).map({ $0.secret }) { return secret }
        }
        return nil
    }

    /// When the secret stops being readable; nil when there is none (absent, expired, removed, or
    /// unreadable).
    public func expiry() -> Date? {
        for holder in holders {
            if let deadline = (try? payload(in: holder))??.deadline { return deadline }
        }
        return nil
    }

    /// Removes the secret from every holder (idempotent): the kernel key is invalidated
    /// (`KEYCTL_INVALIDATE`, gone at once for every process), the runtime file unlinked.
    public func remove() {
        for holder in holders { remove(from: holder) }
    }

    // MARK: - The payload

    /// The deadline, 8 bytes big-endian, then the secret.
    private static func payload(deadline: Int64, secret: SecretBytes) -> [UInt8] {
        var payload = [UInt8](repeating: 0, count: 8 + secret.count)
        for index in 0..<8 { payload[index] = UInt8(truncatingIfNeeded: deadline >> (56 - 8 * index)) }
        secret.withUnsafeBytes { bytes in
            payload.withUnsafeMutableBytes { out in
                UnsafeMutableRawBufferPointer(rebasing: out[8...]).copyMemory(from: bytes)
            }
        }
        return payload
    }

    /// The deadline and secret in `bytes`, or nil when it is too short to hold a deadline.
    private static func parse(_ bytes: UnsafeRawBufferPointer) -> (deadline: Date, secret: SecretBytes)? {
        guard bytes.count >= 8 else { return nil }
        let deadline = bytes.prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return (Date(timeIntervalSince1970: TimeInterval(deadline)), SecretBytes(bytes[8...]))
    }

    /// What `holder` holds, if it is there and not past its deadline; one past it is removed.
    /// The deadline, for a caller that asks again and again: `kernelKey` remembers the kernel
    /// key found last time, which is read directly by its serial (one system call) while it is
    /// there; when it is gone (removed, expired, replaced), the secret is looked up as
    /// ``expiry()`` does, and `kernelKey` is set to what is found. The answer is the same as
    /// ``expiry()``'s.
    public func expiry(rememberingKernelKey kernelKey: inout Int32?) -> Date? {
        if let key = kernelKey, holders.first == .kernelKeyring {
            if let deadline = readKernelKey(key)?.deadline, Date() < deadline { return deadline }
            kernelKey = nil
        }
        if holders.contains(.kernelKeyring), case .success(let session) = kernelSession() {
            let key = dc_keyctl_search(session, "user", keyDescription)
            if key >= 0 { kernelKey = key }
        }
        return expiry()
    }

    private func payload(in holder: Holder) throws -> (deadline: Date, secret: SecretBytes)? {
        let found: (deadline: Date, secret: SecretBytes)?
        switch holder {
        case .kernelKeyring: found = readFromKernel()
        case .runtimeFile: found = try readFromFile()
        }
        guard let found else { return nil }
        guard Date() < found.deadline else {
            remove(from: holder)
            return nil
        }
        return found
    }

    private func remove(from holder: Holder) {
        switch holder {
        case .kernelKeyring: removeFromKernel()
        case .runtimeFile: unlink(runtimeFile)
        }
    }

    // MARK: - The kernel keyring

    /// KEY_SPEC_SESSION_KEYRING and KEY_SPEC_USER_SESSION_KEYRING (linux/keyctl.h).
    private static let sessionKeyring: Int32 = -3
    private static let userSessionKeyring: Int32 = -5

    /// The session keyring's serial number when the process has a session keyring of its own
    /// (a login's, or `keyctl session`'s); otherwise the `errno` that stops the kernel holder.
    ///
    /// A process without one (a shell outside a PAM login, a container) shares the user-session
    /// keyring, and `add_key` to the session keyring there does not use it: the kernel makes a new
    /// anonymous session keyring for the calling thread, which dies with the process, so the next
    /// process would find nothing. The kernel holder is refused there, and the next holder used.
    private func kernelSession() -> Result<Int32, DCError> {
        let session = dc_keyctl_get_keyring_id(Self.sessionKeyring, 0)
        guard session >= 0 else { return .failure(Self.kernelError(errno)) }
        let userSession = dc_keyctl_get_keyring_id(Self.userSessionKeyring, 0)
        guard userSession >= 0 else { return .failure(Self.kernelError(errno)) }
        guard session != userSession else {
            return .failure(
                DCError(
                    .serviceUnavailable, "the process has no session keyring of its own",
                    subject: "kernel keyring", hint: "log in through PAM (pam_keyinit), or run under keyctl session -"))
        }
        return .success(session)
    }

    private static func kernelError(_ code: Int32) -> DCError {
        let quota = code == EDQUOT
        return DCError(
            .serviceUnavailable, "the kernel keyring refused: \(String(cString: strerror(code)))",
            subject: "kernel keyring",
            hint: quota ? "the per-user key quota is used up (/proc/sys/kernel/keys/maxkeys, maxbytes)" : nil)
    }

    private func storeInKernel(_ payload: [UInt8], seconds: UInt32) throws {
        if let refusal = simulatedKernelRefusal { throw Self.kernelError(refusal) }
        let session = try kernelSession().get()
        let key = payload.withUnsafeBytes { dc_add_key("user", keyDescription, $0.baseAddress, $0.count, session) }
        guard key >= 0 else { throw Self.kernelError(errno) }
        // Between add_key and the timeout the key has none; a reader still enforces the deadline in
        // the payload, and a key whose timeout cannot be set is not left behind.
        guard dc_keyctl_set_timeout(key, seconds) == 0 else {
            let error = errno
            _ = dc_keyctl_invalidate(key)
            throw Self.kernelError(error)
        }
    }

    private func readFromKernel() -> (deadline: Date, secret: SecretBytes)? {
        guard case .success(let session) = kernelSession() else { return nil }
        let key = dc_keyctl_search(session, "user", keyDescription)
        guard key >= 0 else { return nil }  // ENOKEY, EKEYEXPIRED, EKEYREVOKED: not there
        return readKernelKey(key)
    }

    /// The payload of the kernel key `key`; nil when it cannot be read (gone, expired, revoked).
    private func readKernelKey(_ key: Int32) -> (deadline: Date, secret: SecretBytes)? {
        var capacity = 256
        while true {
            var buffer = [UInt8](repeating: 0, count: capacity)
            defer { buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
            let length = buffer.withUnsafeMutableBytes { dc_keyctl_read(key, $0.baseAddress, $0.count) }
            guard length >= 0 else { return nil }
            guard length <= capacity else {
                capacity = length
                continue
            }
            return buffer.withUnsafeBytes { Self.parse(UnsafeRawBufferPointer(rebasing: $0.prefix(length))) }
        }
    }

    private func removeFromKernel() {
        guard case .success(let session) = kernelSession() else { return }
        // One key per description in a keyring; a few rounds also clear copies in nested keyrings.
        for _ in 0..<8 {
            let key = dc_keyctl_search(session, "user", keyDescription)
            guard key >= 0, dc_keyctl_invalidate(key) == 0 else { return }
        }
    }

    // MARK: - The runtime file

    /// Writes the runtime file, only on a file system that keeps it in memory, and starts the
    /// process that removes it at `deadline`; a file whose removal cannot be arranged is not kept.
    private func storeInFile(_ payload: [UInt8], deadline: Int64) throws {
        try AtomicFileSet.ensureDirectory(runtimeDirectory)
        try Self.requireInMemory(runtimeDirectory)
        var files = AtomicFileSet(directory: runtimeDirectory)
        var copy = payload
        try files.add(name + ".key", .secret(SecretBytes(consuming: &copy)), mode: 0o600)
        try files.commit(replacingExisting: true)
        do {
            try Self.startRemover(of: runtimeFile, at: deadline)
        } catch {
            unlink(runtimeFile)
            throw error
        }
    }

    /// Whether `directory` is on a tmpfs or ramfs (statfs's `f_type`): a place where the runtime
    /// file may be written. False when it cannot be opened.
    public static func isInMemory(_ directory: String) -> Bool {
        (try? requireInMemory(directory)) != nil
    }

    /// Throws unless `directory` is on a tmpfs or ramfs (statfs's `f_type`): the runtime file is
    /// never written where it could outlive the login on persistent storage.
    static func requireInMemory(_ directory: String) throws {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw DCError(
                .serviceUnavailable, "cannot open the runtime directory: \(String(cString: strerror(errno)))",
                subject: directory)
        }
        defer { close(fd) }
        guard dc_fd_in_memory(fd) == 1 else {
            throw DCError(
                .serviceUnavailable,
                "the runtime directory is not on a tmpfs or ramfs: the secret is not written to persistent storage",
                subject: directory,
                hint:
                    "use a runtime directory in memory (systemd-logind's /run/user/UID), or a login whose session keyring takes keys (pam_keyinit; keyctl session -)"
            )
        }
    }

    /// What the remover runs, as `sh -c SCRIPT NAME PATH DEADLINE`: it puts a subshell in the
    /// background and exits at once (so its parent reaps it at once, and the subshell belongs to
    /// no process of ours). The subshell reads the file's first 8 bytes (the deadline; never the
    /// secret) and, while the file is the one it was started for (the same deadline), sleeps
    /// towards the deadline a minute at a time (a suspended machine wakes at most a minute late),
    /// then removes it. A file that is gone, or was replaced (its own remover watches it), ends
    /// the subshell at its next look.
    static let removerScript = """
        (
          deadline() {
            set -- $(od -An -tu1 -N8 -- "$1" 2>/dev/null)
            [ $# -eq 8 ] || return 1
            found=0
            for byte do found=$((found * 256 + byte)); done
          }
          while deadline "$1" && [ "$found" -eq "$2" ]; do
            now=$(date +%s) || exit 1
            if [ "$now" -ge "$2" ]; then
              rm -f -- "$1"
              exit 0
            fi
            left=$(($2 - now))
            sleep $((left < 60 ? left : 60))
          done
        ) &
        """

    /// Starts the remover of `path` at `deadline` (Unix seconds): `/bin/sh` in a session of its
    /// own, in `/`, with `/dev/null` on 0, 1 and 2 and no other descriptor, a two-variable
    /// environment, and the path and deadline (no secret) as its arguments. Waits for the
    /// short-lived parent shell. Throws when it cannot be started.
    static func startRemover(of path: String, at deadline: Int64) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        dc_spawn_close_from(&actions, 3)
        dc_spawn_chdir(&actions, "/")
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaultSignals = sigset_t()
        sigemptyset(&defaultSignals)
        for number in [SIGPIPE, SIGXFSZ, SIGHUP, SIGINT, SIGTERM] { sigaddset(&defaultSignals, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | DC_POSIX_SPAWN_SETSID))

        let shell = "/bin/sh"
        let arguments: [String] = [shell, "-c", removerScript, "dc-secret-remover", path, String(deadline)]
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let variables: [String] = ["PATH=/usr/bin:/bin", "LC_ALL=C"]
        let environment = variables.map { strdup($0) } + [nil]
        defer { environment.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, shell, &actions, &attributes, argv, environment)
        guard spawned == 0 else {
            throw DCError(
                .serviceUnavailable,
                "cannot start the process that removes the secret at its deadline: \(String(cString: strerror(spawned)))",
                subject: path)
        }
        var status: Int32 = 0
        var waited: pid_t
        repeat { waited = waitpid(pid, &status, 0) } while waited < 0 && errno == EINTR
        // Not waited for (ECHILD): this process ignores SIGCHLD and the status is lost; it started.
        guard waited < 0 || status == 0 else {
            throw DCError(
                .serviceUnavailable,
                "the process that removes the secret at its deadline did not start (status \(status))",
                subject: path)
        }
    }

    private func readFromFile() throws -> (deadline: Date, secret: SecretBytes)? {
        // O_NONBLOCK: a FIFO planted at the path does not make the reader wait (it is no regular file).
        let fd = open(runtimeFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw DCError(
                .permissionDenied, "cannot open the secret: \(String(cString: strerror(errno)))", subject: runtimeFile)
        }
        defer { close(fd) }
        // A file on persistent storage (left by a version before this rule, or planted) is never
        // taken for the secret: it goes.
        guard dc_fd_in_memory(fd) == 1 else {
            unlink(runtimeFile)
            return nil
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 1 << 20 else {
            throw DCError(.malformedInput, "the secret is not a regular file of a sensible size", subject: runtimeFile)
        }
        var buffer = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        defer { buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var length = 0
        while length < buffer.count {
            let count = buffer.withUnsafeMutableBytes {
                Glibc.read(fd, $0.baseAddress?.advanced(by: length), $0.count - length)
            }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw DCError(
                    .ioError, "cannot read the secret: \(String(cString: strerror(errno)))", subject: runtimeFile)
            }
            if count == 0 { break }
            length += count
        }
        guard let found = buffer.withUnsafeBytes({ Self.parse(UnsafeRawBufferPointer(rebasing: $0.prefix(length))) })
        else {
            throw DCError(.malformedInput, "the secret file has no deadline", subject: runtimeFile)
        }
        return found
    }
}
