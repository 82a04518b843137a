internal import CSystemShims
import DerivedCredentials
import Foundation

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
/// runtime directory (a tmpfs that goes with the login), which carries its deadline and is
/// removed by the first reader that finds it past it.
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
        /// `<runtimeDirectory>/<name>.key`, mode 0600, carrying its own deadline.
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
        var payload = Self.payload(deadline: Int64(time(nil)) + seconds, secret: secret)
        defer { payload.withUnsafeMutableBytes { SecretBytes.wipe($0) } }

        var lastError: any Error = DCError(.serviceUnavailable, "no holder took the secret", subject: keyDescription)
        for holder in holders {
            do {
                switch holder {
                case .kernelKeyring: try storeInKernel(payload, seconds: UInt32(seconds))
                case .runtimeFile: try storeInFile(payload)
                }
            } catch {
                lastError = error
                continue
            }
            for other in holders where other != holder { remove(from: other) }
            return holder
        }
        throw lastError
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
                if let base = bytes.baseAddress {
                    (out.baseAddress! + 8).copyMemory(from: base, byteCount: bytes.count)
                }
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

    private func storeInFile(_ payload: [UInt8]) throws {
        try AtomicFileSet.ensureDirectory(runtimeDirectory)
        var files = AtomicFileSet(directory: runtimeDirectory)
        var copy = payload
        try files.add(name + ".key", .secret(SecretBytes(consuming: &copy)), mode: 0o600)
        try files.commit(replacingExisting: true)
    }

    private func readFromFile() throws -> (deadline: Date, secret: SecretBytes)? {
        let fd = open(runtimeFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw DCError(
                .permissionDenied, "cannot open the secret: \(String(cString: strerror(errno)))", subject: runtimeFile)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 1 << 20 else {
            throw DCError(.malformedInput, "the secret is not a regular file of a sensible size", subject: runtimeFile)
        }
        var buffer = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        defer { buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var length = 0
        while length < buffer.count {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + length, $0.count - length) }
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
