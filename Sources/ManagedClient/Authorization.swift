import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The policy a client applied: the provider's signed policy URL exactly as it was received, what
/// it says, and whether the app's acknowledgement of it went out. Kept in `store/policy.json`
/// (`{"url", "acknowledged"}`) and believed only once the URL verifies again, each time it is read
/// (``ManagedClient/keptPolicy()``, again whenever a file the verdict rests on changed);
/// `store/policy.sequence` keeps the highest number applied, so
/// that an older genuine policy put in its place reads as damaged too.
struct AppliedPolicy: Sendable {
    /// The `<client-scheme>:/policy?…` URL as received, with its signature.
    var url: String
    /// What the URL says.
    var policy: ClientPolicy
    /// When the provider signed it (a policy sent again, unchanged, is signed later).
    var signed: Int64
    /// Whether the app's acknowledgement of the authorization state went out.
    var acknowledged: Bool?
}

/// What `store/policy.json` holds: the URL as received and the acknowledgement flag (which grants
/// nothing: it only decides whether the same URL may be applied again).
private struct StoredPolicy: Codable {
    var url: String
    var acknowledged: Bool?
}

/// What the store holds of the provider's policy.
enum KeptPolicy: Sendable {
    /// No policy yet: the client is not ready.
    case none
    /// The provider's policy, verified now.
    case applied(AppliedPolicy)
    /// A record that does not verify: edited, replaced by another (or an older) policy, removed,
    /// or kept by a version before signed records. It grants nothing.
    case damaged
}

extension ManagedClient {
    var policyFile: String { store + "/policy.json" }
    /// The highest policy number the client applied; the record must not be older.
    var policySequenceFile: String { store + "/policy.sequence" }

    /// The policy the provider sent last, or nil before the first one (the client is not ready).
    /// A policy record that does not verify with the pinned provider key throws `notAuthorized`.
    public func currentPolicy() throws -> ClientPolicy? { try appliedPolicy()?.policy }

    func appliedPolicy() throws -> AppliedPolicy? {
        switch try keptPolicy() {
        case .none: return nil
        case .applied(let applied): return applied
        case .damaged:
            throw DCError(
                .notAuthorized,
                "the policy record is damaged (edited, replaced or not signed by the pinned provider): the app is not authorized",
                subject: policyFile,
                remedy: .askForPolicy)
        }
    }

    /// The policy record, verified as it is read: the URL parses, is addressed to this client, is
    /// signed by the pinned provider key (`store/provider.json`, never the registration) and is not
    /// older than the highest number applied. Its time is not checked again: a policy stays in
    /// force until a newer one comes.
    ///
    /// The verdict is kept for the process with the bytes of the files it rests on (the record,
    /// the sequence, the provider pin, the configuration), and given again while they are the
    /// same: a long-lived user (the PKCS#11 module) asks at every call, and reading four small
    /// files costs little next to parsing the URL and checking its signature again. The files are
    /// read before they are verified, so a change in between is seen at the next call.
    func keptPolicy() throws -> KeptPolicy {
        let files = [policyFile, policySequenceFile, providerPinFile, configFile].map {
            FileManager.default.contents(atPath: $0)
        }
        if let kept = Self.verifiedPolicies.withLock({ $0[policyFile] }), kept.files == files {
            return kept.policy
        }
        let policy = try verifyKeptPolicy()
        Self.verifiedPolicies.withLock { $0[policyFile] = (files, policy) }
        return policy
    }

    /// The verdicts of ``keptPolicy()`` in this process, by policy file, with the bytes of the
    /// files each rests on.
    private static let verifiedPolicies = Mutex<[String: (files: [Data?], policy: KeptPolicy)]>([:])

    /// ``keptPolicy()`` read and verified from the files, now.
    private func verifyKeptPolicy() throws -> KeptPolicy {
        let highest = appliedPolicySequence
        guard let data = FileManager.default.contents(atPath: policyFile) else {
            return highest == nil ? .none : .damaged
        }
        let config = try config()
        guard let stored = try? JSONDecoder().decode(StoredPolicy.self, from: data),
            let message = try? PolicyNotice.parse(stored.url, scheme: config.scheme), message.client == config.clientId,
            let pin = try? PinnedKeys.read(ProviderPin.self, at: providerPinFile), let key = pin.publicKey,
            message.isSigned(by: key, scheme: config.scheme), message.policy.sequence >= highest ?? 0
        else { return .damaged }
        return .applied(
            AppliedPolicy(
                url: stored.url, policy: message.policy, signed: message.time, acknowledged: stored.acknowledged))
    }

    /// The highest policy number applied (`store/policy.sequence`), or nil before the first.
    var appliedPolicySequence: UInt64? {
        FileManager.default.contents(atPath: policySequenceFile).flatMap {
            UInt64(String(decoding: $0, as: UTF8.self).trimmingWhitespaceAndNewlines())
        }
    }

    /// Whether the client has its provider's policy, so that ``authState`` and the other
    /// policy-dependent properties have answers (AppConnect's `ready`).
    public var ready: Bool { (try? currentPolicy()) != nil }

    /// The authorization state; throws `policyNotReady` before the client is ``ready``.
    public var authState: AuthState {
        get throws { try readyPolicy().state }
    }

    /// Why the authorization state is what it is, to show the user (it may be empty); throws
    /// `policyNotReady` before the client is ``ready``. Escape it before showing it on a terminal.
    public var authMessage: String {
        get throws { try readyPolicy().message }
    }

    /// The secure file I/O policy: always `SecureFileIOPolicy.required` once the client is
    /// ``ready``; throws `policyNotReady` before.
    public var secureFileIOPolicy: SecureFileIOPolicy {
        get throws {
            _ = try readyPolicy()
            return .required
        }
    }

    /// Available exactly when the client is ready, authorized and unlocked.
    public var secureServicesAvailability: SecureServicesAvailability {
        (try? requireSecureServices()) != nil ? .available : .unavailable
    }

    func readyPolicy() throws -> ClientPolicy {
        guard let policy = try currentPolicy() else {
            throw DCError(.policyNotReady, "the client has no policy from its provider yet", subject: base)
        }
        return policy
    }

    /// Throws unless secure services are available: ready (`policyNotReady`), authorized
    /// (`notAuthorized`, exit 77, with the provider's message) and unlocked (`serviceUnavailable`).
    public func requireSecureServices() throws {
        let policy = try readyPolicy()
        guard policy.state == .authorized else {
            if policy.state == .retired { finishRetiring() }
            let why = policy.message.isEmpty ? "" : ": \(policy.message.escapingControlCharacters)"
            throw DCError(.notAuthorized, "the app is \(policy.state)\(why)", subject: base)
        }
        guard isUnlocked else {
            throw DCError(.serviceUnavailable, "the client is locked", remedy: .unlockClient)
        }
    }

    /// The store key for reading or writing the app's data: only while secure services are available.
    func secureServicesKey() throws -> SecretBytes {
        try requireSecureServices()
        return try storeKey()
    }

    // MARK: - Receiving a policy

    /// What handling a policy URL did.
    public struct PolicyUpdate: Sendable {
        /// The policy now in force.
        public var policy: ClientPolicy
        /// The policy before, or nil when this one made the client ready.
        public var previous: ClientPolicy?
        /// True when the provider sent the policy in force again (it had no acknowledgement yet):
        /// nothing changed, and the app acknowledges it again.
        public var repeated: Bool

        /// Whether this policy made the client ready.
        public var becameReady: Bool { previous == nil && !repeated }
        /// Whether the state or only its message changed (the app is told either way).
        public var authChanged: Bool {
            !repeated && (previous?.state != policy.state || previous?.message != policy.message)
        }
    }

    /// Handles `<scheme>:/policy…`: checks the URL, its signature by the pinned provider, its
    /// time and its number (only a newer policy is applied; the one in force may come again,
    /// signed later, while the provider waits for its acknowledgement), then keeps it. A policy
    /// that is not `authorized` takes effect at once: from now on no credential or secure file can
    /// be read. The app then acknowledges it (``authStateApplied(_:message:now:send:)``), which for
    /// `retired` erases everything.
    public func handlePolicy(_ url: String, now: Date = Date()) throws -> PolicyUpdate {
        let config = try config()
        return try handlePolicy(try PolicyNotice.parse(url, scheme: config.scheme), url: url, config: config, now: now)
    }

    /// ``handlePolicy(_:now:)`` for a parsed `message`; `url` is kept as it came (it is what the
    /// kept policy is verified from).
    func handlePolicy(_ message: PolicyNotice, url: String, config: Config, now: Date) throws -> PolicyUpdate {
        let (policy, time) = (message.policy, message.time)
        try checkAddressee(message.client, of: "policy", config: config)
        try verifyProviderSignature(message, config: config, subject: "policy \(policy.sequence)")
        guard abs(now.timeIntervalSince1970 - Double(time)) <= Self.requestTimeLimit else {
            throw DCError(
                .refusedMessage, "the policy is older than \(Int(Self.requestTimeLimit)) s (or from the future)",
                subject: "policy \(policy.sequence)", hint: "nothing was changed; the provider sends it again")
        }
        return try FileLock.withExclusiveLock(at: store + "/.lock") { _ in
            // A damaged record is replaced by a genuine policy not older than the highest applied.
            let kept = try keptPolicy()
            let applied: AppliedPolicy? = if case .applied(let applied) = kept { applied } else { nil }
            let floor = applied?.policy.sequence ?? appliedPolicySequence ?? 0
            let replay = DCError(
                .refusedMessage,
                "policy \(policy.sequence) is not newer than the one in force (\(floor)): replayed or late",
                subject: "policy \(policy.sequence)", hint: "nothing was changed")
            guard policy.sequence >= floor else { throw replay }
            if let applied, policy.sequence == applied.policy.sequence {
                // The policy in force again: the provider had no acknowledgement of it. Once
                // acknowledged, only a later signature is taken (the same URL is a replay).
                guard policy == applied.policy, time > applied.signed || applied.acknowledged != true else {
                    throw replay
                }
                if time > applied.signed {
                    try keep(AppliedPolicy(url: url, policy: policy, signed: time))
                } else {
                    try keep(AppliedPolicy(url: applied.url, policy: policy, signed: applied.signed))
                }
                return PolicyUpdate(policy: policy, previous: applied.policy, repeated: true)
            }
            try keep(AppliedPolicy(url: url, policy: policy, signed: time))
            try shortenAutoLock(to: policy.autoLock)
            return PolicyUpdate(policy: policy, previous: applied?.policy, repeated: false)
        }
    }

    /// Brings the unlocked key's auto-lock forward when a new policy allows less time than is
    /// left; a longer one takes effect at the next unlock.
    private func shortenAutoLock(to seconds: Int) throws {
        guard let key = try? unlockedKey, let expiry = key.expiry(), Date() + TimeInterval(seconds) < expiry,
            let secret = try key.read()
        else { return }
        _ = try key.store(secret, lifetime: .seconds(seconds))
        try publishStatus(available: true, until: key.expiry())
    }

    /// Keeps `applied`: first the highest number applied, then the URL as received, so that a
    /// crash between the two leaves a record that reads as damaged until the provider sends again.
    private func keep(_ applied: AppliedPolicy) throws {
        let stored = StoredPolicy(url: applied.url, acknowledged: applied.acknowledged)
        var files = AtomicFileSet(directory: store)
        let highest = max(applied.policy.sequence, appliedPolicySequence ?? 0)
        try files.add("policy.sequence", .bytes(Array("\(highest)\n".utf8)), mode: 0o600)
        try files.add("policy.json", .bytes(Array(try JSONEncoder().encode(stored))), mode: 0o600)
        try files.commit(replacingExisting: true)
    }

    /// Refuses a message of the provider's (`what`: a delivery, a policy, a delegation) addressed
    /// to another client than this one.
    func checkAddressee(_ client: ClientID, of what: String, config: Config) throws {
        guard client == config.clientId else {
            throw DCError(
                .refusedMessage, "a \(what) for another client (\(client))",
                hint: "this client is '\(config.clientId)'; check which program handles the scheme \(config.scheme):")
        }
    }

    /// Checks that `message` is signed by the pinned provider (or, when none is pinned yet, by the
    /// one the provider's registration shows, which is then pinned).
    func verifyProviderSignature(_ message: some SignedURLMessage, config: Config, subject: String) throws {
        let pinned = try PinnedKeys.read(ProviderPin.self, at: providerPinFile)
        guard let pin = try pinned ?? registeredProvider(config), let providerKey = pin.publicKey else {
            throw DCError(
                .refusedMessage, "no provider is registered for this client, so no message can be authenticated",
                subject: subject, remedy: .registerProvider)
        }
        guard message.isSigned(by: providerKey, scheme: config.scheme) else {
            throw DCError(
                .refusedMessage,
                "the \(type(of: message).path) message is not signed by the pinned provider (forged or altered)",
                subject: subject, hint: "nothing was changed")
        }
        if pinned == nil { try PinnedKeys.write(pin, to: providerPinFile) }
    }

    // MARK: - Acknowledging

    /// Tells the provider how the app handled its authorization state (AppConnect's
    /// `authStateApplied`): opens the signed acknowledgement with `send`. `.unsupported` is refused:
    /// every app must handle its authorization state. Once a `retired` state is acknowledged (or
    /// the acknowledgement could not be made or sent), everything is erased
    /// (``eraseEverything()``); once another state than `authorized` is, the store is locked.
    public func authStateApplied(
        _ state: PolicyState, message: String = "", now: Date = Date(), send: (String) async throws -> Void
    ) async throws {
        guard state != .unsupported else {
            throw DCError(
                .usage, "an app must handle its authorization state: .unsupported is not an answer",
                hint: "acknowledge with .applied, or .error and a message that says what failed")
        }
        try PolicyText.check(message)
        let policy = try readyPolicy()
        do {
            try await send(try acknowledgementURL(.authState, state, message, policy: policy, now: now))
            try FileLock.withExclusiveLock(at: store + "/.lock") { _ in
                if var applied = try appliedPolicy(), applied.policy == policy {
                    applied.acknowledged = true
                    try keep(applied)
                }
            }
        } catch {
            if policy.state == .retired { try eraseEverything() }
            throw error
        }
        switch policy.state {
        case .retired: try eraseEverything()
        case .unauthorized: try lock()
        case .authorized: break
        }
    }

    /// Tells the provider how the app handled the secure file I/O policy (AppConnect's
    /// `secureFileIOPolicyApplied`). An app that never calls it is taken to answer `.unsupported`.
    public func secureFileIOPolicyApplied(
        _ state: PolicyState, message: String = "", now: Date = Date(), send: (String) async throws -> Void
    ) async throws {
        try PolicyText.check(message)
        try await send(try acknowledgementURL(.secureFileIO, state, message, policy: try readyPolicy(), now: now))
    }

    func acknowledgementURL(
        _ subject: PolicySubject, _ state: PolicyState, _ message: String, policy: ClientPolicy, now: Date
    ) throws -> String {
        let config = try config()
        return try Acknowledgement(
            client: config.clientId, sequence: policy.sequence, subject: subject, state: state, message: message,
            time: Int64(now.timeIntervalSince1970)
        ).signed(with: try signingKey(), scheme: config.providerScheme).url(scheme: config.providerScheme)
    }

    // MARK: - Retire

    /// Crypto-erases the app's sensitive data: the unlocked store key is destroyed, the sealed
    /// store key is overwritten and synced before it is removed (so nothing sealed under it can
    /// be opened again, even with the passphrase), then every key, the credential, the secure
    /// files, the pasteboard, the spool and the registration are removed. What stays is the
    /// client's configuration, its `retired` policy (with its number, and the provider key it
    /// verifies with), so that the app can still say why; a retired client is set up afresh with
    /// `dcclient init`.
    public func eraseEverything() throws {
        let config = try config()
        try? lock()
        let wrapped = store + "/wrapped-key.json"
        let fd = open(wrapped, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        if fd >= 0 {
            var info = stat()
            if fstat(fd, &info) == 0, info.st_size > 0 {
                let zeros = [UInt8](repeating: 0, count: Int(info.st_size))
                _ = zeros.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                _ = fsync(fd)
            }
            close(fd)
        }
        unlink(wrapped)
        Registrations.remove(at: locations.clientRegistration(config.scheme))
        // The retired policy stays, with its number and the provider key it verifies with (public).
        let keep: Set = ["client.json", "policy.json", "policy.sequence", "provider.json", ".lock"]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: store)) ?? [] where !keep.contains(name) {
            try? FileManager.default.removeItem(atPath: store + "/" + name)
        }
        try? FileManager.default.removeItem(atPath: spool.directory)
        unlink(statusFile)
        // The directory's entries are gone for good only once it is synced.
        try? AtomicFileSet.syncDirectory(store)
    }

    /// Erases what a retire left behind, if anything: a handler that acknowledged a retire and
    /// died before it erased (killed, or crashed) leaves the sealed store, and the next use of the
    /// retired client finishes the job.
    func finishRetiring() {
        guard FileManager.default.fileExists(atPath: store + "/wrapped-key.json") || isUnlocked else { return }
        try? eraseEverything()
    }

    /// Whether the client was retired: its data is erased, and it is set up afresh before use.
    public var isRetired: Bool { (try? currentPolicy())?.state == .retired }
}
