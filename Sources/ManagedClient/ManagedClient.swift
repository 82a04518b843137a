import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The reference managed client: it registers a scheme, asks a provider for a credential,
/// receives, opens, validates and installs it all-or-nothing, and calls back.
///
/// Each managed app is a container of its own, served by its own `ManagedClient`
/// (``ManagedApps`` lists them and picks one):
///
/// ```
/// $XDG_DATA_HOME/dcclient/apps/<id>/   0700, one per app (its id is its client id)
///   store/wrapped-key.json        the store key, sealed under a key derived from the passphrase
///   store/client-key              the client's private key, sealed under the store key
///   store/client.pem              its certificate (deliveries are sealed to it)
///   store/signing-key             the client's Ed25519 message-signing key, sealed under the store key
///   store/token-key               the client's P-256 auth-token key, sealed under the store key
///   store/provider.json           the provider's signing key, pinned when the user first asked it
///   store/credential              the installed credential, sealed under the store key
///   store/credential.sequence     the delivery number of the installed credential (no rollback)
///   store/processed/<request>     the outcome of each request handled (idempotency, replays)
///   store/files/<hmac of name>    an app's encrypted files (`SecureFiles`), 0700 and 0600
///   store/pasteboard              the secure pasteboard's text, sealed under the store key
///   store/policy.json             the provider's policy in force, its signed URL as received (verified at each read)
///   store/policy.sequence         the highest policy number applied (an older policy file reads as damaged)
///   spool/                        sealed deliveries from providers; `<request>.stale`: one kept out as stale
///   status.json                   {"servicesAvailable": …}, read by providers
/// the session keyring, derived-credentials:<id>   the store key, only while unlocked, with the
///                                policy's auto-lock lifetime (else $XDG_RUNTIME_DIR/dcclient/<id>.key)
/// ```
public struct ManagedClient: Sendable {
    /// The app's container, `$XDG_DATA_HOME/dcclient/apps/<id>`; everything it keeps is under it.
    public let base: String
    /// The app this client serves: its container's name and its client id.
    public let app: ClientID
    /// The XDG directories the client lives in and publishes its registration to.
    public let locations: XDGDirectories
    static let iterations = 200_000
    /// How long a delivery stays acceptable after the provider issued it.
    public static let requestTimeLimit: TimeInterval = 600

    /// The client of the app `app` kept under `locations`; nothing is read or created until it
    /// is used. A command picks the app with ``ManagedApps/choose(_:environment:)``.
    public init(locations: XDGDirectories = XDGDirectories(), app: ClientID = ManagedApps.defaultApp) {
        self.locations = locations
        self.app = app
        base = ManagedApps(locations: locations).containers + "/" + app.description
    }

    /// The single client of a version before containers, kept directly in `legacyBase`: only
    /// for moving it into its container.
    init(legacyBase: String, locations: XDGDirectories) {
        self.locations = locations
        self.app = ManagedApps.defaultApp
        base = legacyBase
    }

    var store: String { base + "/store" }
    var spool: Spool { Spool(directory: base + "/spool") }
    var statusFile: String { base + "/status.json" }
    /// Where the unlocked store key lives, for the policy's auto-lock time at most: the kernel
    /// keyring of the login session, with a timeout the kernel enforces whether or not any
    /// process runs (else a 0600 file in the user's runtime directory carrying its deadline),
    /// never persistent storage. One per store, named by a hash of the store's path.
    ///
    /// Without `XDG_RUNTIME_DIR` (an SSH login without systemd-logind, a container, a CI job),
    /// the kernel keyring is the only holder: there is no private in-memory place for the file.
    /// Unlocking then works where the process has a session keyring (`pam_keyinit` gives an SSH
    /// login one; `keyctl session` starts one) and is refused with that fix named otherwise.
    /// A runtime directory that is set but unsafe is refused as before.
    var unlockedKey: ExpiringSecret {
        get throws {
            let name = Self.unlockedKeyName(base: base)
            guard locations.runtimeDirectory != nil else {
                return ExpiringSecret(name: name, runtimeDirectory: "/nonexistent", holders: [.kernelKeyring])
            }
            let runtime = try locations.privateRuntimeDirectory()
            return ExpiringSecret(name: name, runtimeDirectory: runtime + "/dcclient")
        }
    }
    /// The name of the unlocked key of the client whose files are under `base`: the same store
    /// always gets the same name, however its path was spelled.
    static func unlockedKeyName(base: String) -> String {
        let path = URL(fileURLWithPath: base).standardizedFileURL.resolvingSymlinksInPath().path
        return Digests.hex(Array(Digests.sha256(Array(path.utf8)).prefix(16)))
    }

    /// Takes the unlocked key of the client whose files are under `base` out of the kernel
    /// keyring, where it outlives the files: for a caller that is about to remove the directory
    /// (a test's sandbox), so that the key no longer counts against the user's key quota. A key
    /// in a runtime file goes with that file.
    public static func forgetUnlockedKey(base: String) {
        ExpiringSecret(name: unlockedKeyName(base: base), runtimeDirectory: "/nonexistent", holders: [.kernelKeyring])
            .remove()
    }

    /// Where versions before the runtime directory kept the unlocked key; removed on sight.
    var legacyRunKey: String { base + "/run/store.key" }
    var providerPinFile: String { store + "/provider.json" }
    /// `store/client.json`: the client id and the two schemes; its presence means the client is set up.
    public var configFile: String { store + "/client.json" }

    /// `store/wrapped-key.json`: the store key sealed under the key derived from the passphrase,
    /// and that derivation's salt (both base64) and iterations. A field that is missing or of
    /// another type reads as nil.
    struct WrappedKey: Codable {
        var salt: String?
        var iterations: Int?
        var sealed: String?

        init(salt: String, iterations: Int, sealed: String) {
            self.salt = salt
            self.iterations = iterations
            self.sealed = sealed
        }

        init(from decoder: any Decoder) throws {
            let fields = try decoder.container(keyedBy: CodingKeys.self)
            salt = try? fields.decode(String.self, forKey: .salt)
            iterations = try? fields.decode(Int.self, forKey: .iterations)
            sealed = try? fields.decode(String.self, forKey: .sealed)
        }

        /// The file's fields; nil when `data` is JSON but not an object. Throws when it is not JSON.
        static func read(_ data: Data) throws -> WrappedKey? {
            do {
                return try JSONDecoder().decode(WrappedKey.self, from: data)
            } catch DecodingError.typeMismatch {
                return nil
            }
        }
    }

    struct Config: Codable {
        var clientId: ClientID
        var scheme: URLScheme
        var providerScheme: URLScheme
        /// The public half of the client's message-signing key, base64 (published in the registration).
        var signingKey: String?
        /// The public half of the client's auth-token key, base64 of the P-256 point (published in
        /// the registration); nil for a client set up before auth tokens.
        var tokenKey: String?
    }

    // MARK: - Setup

    /// Creates the app's container and its client (its client id is the app's id): a store key
    /// sealed under the passphrase, a P-256 key and certificate for
    /// sealing, the registration; then unlocks.
    /// With `trustAnchors`, a delivered credential must chain to one of them (``trust(anchors:)``).
    public func initialize(
        scheme: URLScheme, providerScheme: URLScheme, executable: String, passphrase: SecretBytes,
        trustAnchors: [Certificate] = []
    ) throws {
        if isRetired || isHalfSetUp {
            // A retired client is set up afresh: what is left of it (its configuration and the
            // policy that retired it) goes first; so does what a set-up cut short (killed) left.
            try FileManager.default.removeItem(atPath: base)
        }
        try checkNotSetUp()
        // All or nothing: a step that fails takes back what the steps before it made (the
        // container, or what it added to one that existed, the registration, the unlocked key), so
        // that the same command can simply be run again; the marker covers a process that dies.
        try Rollback.allOrNothing { rollback in
            rollback.keepTree(base)
            rollback.keep(locations.clientRegistration(scheme))
            if let key = try? unlockedKey { rollback.keep(key.runtimeDirectory) }
            rollback.onFailure { (try? unlockedKey)?.remove() }
            try AtomicFileSet.ensureDirectory(base)
            chmod(ManagedApps(locations: locations).root, 0o700)
            chmod(base, 0o700)
            var marker = AtomicFileSet(directory: base)
            try marker.add(Self.settingUpMarker, .bytes([]), mode: 0o600)
            try marker.commit(replacingExisting: true)
            try AtomicFileSet.ensureDirectory(store)
            let storeKey = try writeStore(
                scheme: scheme, providerScheme: providerScheme, passphrase: passphrase)
            try publishRegistration(executable: executable)
            try AtomicFileSet.ensureDirectory(spool.directory)
            try trust(anchors: trustAnchors)
            // Unlocked with the store key in hand: stretching the passphrase again would only prove
            // what was sealed a moment ago, at the cost of a second PBKDF2.
            try unlock(storeKey: storeKey)
            guard unlink(base + "/" + Self.settingUpMarker) == 0 else {
                throw DCError(.ioError, "cannot finish setting up: \(String(cString: strerror(errno)))", subject: base)
            }
        }
    }

    /// The file that says a set-up is under way in ``base``: while it is there, the app is not set
    /// up, and the next set-up starts afresh.
    static let settingUpMarker = "setting-up"

    /// Whether a set-up began here and never finished (the process died before taking back what it made).
    var isHalfSetUp: Bool { FileManager.default.fileExists(atPath: base + "/" + Self.settingUpMarker) }

    /// Makes the store of a new client: its store key wrapped under `passphrase`, its keys sealed
    /// under the store key, its certificate and configuration; returns the store key.
    private func writeStore(scheme: URLScheme, providerScheme: URLScheme, passphrase: SecretBytes) throws
        -> SecretBytes
    {
        let storeKey = try Digests.random(32)
        let salt = try Digests.random(16).withUnsafeBytes { Array($0) }
        let kek = try AtRest.deriveKey(passphrase: passphrase, salt: salt, iterations: Self.iterations)
        let wrapped = try AtRest.seal(storeKey, key: kek, context: "store-key")
        let clientKey = try KeyGeneration.generate(.p256)
        let certificate = try CertificateSigner(selfSigningWith: clientKey).issue(
            CertificateProfile(
                subject: DistinguishedName([.init("CN", "dcclient \(app)")]),
                notBefore: Date().addingTimeInterval(-60),
                notAfter: Date().addingTimeInterval(5 * 365 * 86400), keyUsage: .keyAgreement), for: clientKey)
        let signingKey = try MessageSigningKey.generate()
        let tokenKey = try TokenSigningKey.generate()
        let config = Config(
            clientId: app, scheme: scheme, providerScheme: providerScheme,
            signingKey: PinnedKeys.encode(signingKey.publicKey),
            tokenKey: Data(tokenKey.publicKey.uncompressedPoint).base64EncodedString())
        let wrappedJSON = try JSONEncoder().encode(
            WrappedKey(
                salt: Data(salt).base64EncodedString(), iterations: Self.iterations,
                sealed: Data(wrapped).base64EncodedString()))
        var files = AtomicFileSet(directory: store)
        try files.add("wrapped-key.json", .bytes(Array(wrappedJSON)), mode: 0o600)
        // Each private key sealed under the store key, in the file of its name (also its context).
        for (name, key) in [
            ("client-key", clientKey), ("signing-key", signingKey.privateKey), ("token-key", tokenKey.privateKey),
        ] {
            try files.add(
                name, .bytes(try AtRest.seal(key.withPKCS8DER { SecretBytes($0) }, key: storeKey, context: name)),
                mode: 0o600)
        }
        try files.add("client.pem", .bytes(PEM.certificate(certificate)), mode: 0o644)
        try files.add("client.json", .bytes(Array(try JSONEncoder().encode(config))), mode: 0o600)
        try files.commit()
        return storeKey
    }

    /// Throws `outputExists` when the app is set up already (a retired one may be set up
    /// afresh): what ``initialize(scheme:providerScheme:executable:passphrase:trustAnchors:)``
    /// refuses, asked before anyone is asked to choose a passphrase.
    public func checkNotSetUp() throws {
        guard isRetired || isHalfSetUp || !FileManager.default.fileExists(atPath: configFile) else {
            throw DCError(
                .outputExists, "the client is already set up", subject: base,
                remedy: .useExistingClient)
        }
    }

    /// The files ``publishRegistration(executable:)`` and ``forgetProvider()`` change: the published
    /// registration and the pinned provider key. A command keeps them (`Rollback`) to put them back
    /// as they were if a later step fails.
    public var registrationFiles: [String] {
        get throws { [locations.clientRegistration(try config().scheme), providerPinFile] }
    }

    /// Publishes (again) what providers read: the client's id, scheme, certificate, spool, status
    /// and the executable that must handle its scheme. `dcclient init` and `dcclient register` do it.
    public func publishRegistration(executable: String) throws {
        try publishRegistration(executable: executable, servedFrom: self)
        _ = try pinnedProvider(pinning: true)
    }

    /// Publishes the registration of the client whose files are under ``base``, naming the spool
    /// and status file of `container`: where they are about to be, for a client being moved.
    func publishRegistration(executable: String, servedFrom container: ManagedClient) throws {
        let config = try config()
        let certificate = try CredentialReader().read(file: store + "/client.pem").certificates[0]
        guard let signingKey = config.signingKey.flatMap(PinnedKeys.decode) else {
            throw DCError(
                .oldClient, "this client was set up by an older version and has no message-signing key", subject: base,
                remedy: .setUpOldClientAfresh)
        }
        try Registrations.publish(
            ClientRegistration(
                clientId: config.clientId, scheme: config.scheme, executable: executable,
                certificate: certificate,
                signingKey: signingKey,
                tokenKey: try config.tokenKey.flatMap { Data(base64Encoded: $0) }.map {
                    try TokenPublicKey(uncompressedPoint: Array($0))
                }, spool: container.spool.directory, status: container.statusFile),
            at: locations.clientRegistration(config.scheme))
    }

    // MARK: - The provider's key

    /// The provider's pinned signing key. With `pinning`, a provider registration seen for the
    /// first time is pinned (the user ran a command that asks this provider). A registration that
    /// shows another key than the pinned one is refused: the provider cannot be swapped behind
    /// the user's back. Returns nil when nothing is pinned (and, with `pinning`, no provider is
    /// registered yet).
    @discardableResult
    public func pinnedProvider(pinning: Bool = false) throws -> ProviderPin? {
        let config = try config()
        let pinned = try PinnedKeys.read(ProviderPin.self, at: providerPinFile)
        guard pinning, let registered = try registeredProvider(config) else { return pinned }
        if let pinned {
            guard pinned.signingKey == registered.signingKey else {
                throw DCError(
                    .refusedMessage, "the provider's signing key is not the one this client pinned",
                    subject: locations.providerRegistration(config.providerScheme),
                    remedy: .repinProvider)
            }
            return pinned
        }
        try PinnedKeys.write(registered, to: providerPinFile)
        return registered
    }

    /// The key the provider's registration shows, as a pin not yet written; nil when no provider
    /// is registered for the client's provider scheme.
    func registeredProvider(_ config: Config) throws -> ProviderPin? {
        guard
            let registration = try Registrations.read(
                ProviderRegistration.self, at: locations.providerRegistration(config.providerScheme))
        else { return nil }
        guard let key = registration.signingKey, PinnedKeys.decode(key) != nil else {
            throw DCError(
                .oldClient,
                "the provider registered for \(config.providerScheme): has no signing key (an older version)",
                hint: "update the provider and register it again")
        }
        return ProviderPin(scheme: config.providerScheme, signingKey: key)
    }

    /// Forgets the pinned provider key, so that the next `register` or `request` pins the key the
    /// provider's registration shows then. For a provider that was set up afresh.
    public func forgetProvider() throws {
        _ = try config()
        unlink(providerPinFile)
    }

    /// Withdraws the registration: providers then see `missingClient` and send nothing. The store
    /// and the installed credential stay; `publishRegistration(executable:)` brings it back.
    public func withdrawRegistration() throws {
        Registrations.remove(at: locations.clientRegistration(try config().scheme))
    }

    func config() throws -> Config {
        guard let data = FileManager.default.contents(atPath: configFile) else {
            throw DCError(
                .fileNotFound, "the client is not set up", subject: base,
                remedy: .setUpClient)
        }
        return try JSONDecoder().decode(Config.self, from: data)
    }

    // MARK: - Lock

    /// Unlocks the store: the store key is unsealed into the runtime directory (0600). Secure
    /// services are then available if the client is also ready and authorized. A retired client
    /// has nothing left to unlock.
    public func unlock(passphrase: SecretBytes) throws {
        // A damaged policy record does not stop an unlock: the provider's next policy, which
        // repairs it, is acknowledged with the signing key sealed under the store key.
        if let policy = try? currentPolicy(), policy.state == .retired {
            finishRetiring()
            throw DCError(
                .notAuthorized, "the client was retired: its data is erased", subject: base,
                remedy: .setUpRetiredClientAgain)
        }
        guard let data = FileManager.default.contents(atPath: store + "/wrapped-key.json"),
            let object = try WrappedKey.read(data),
            let salt = object.salt.flatMap({ Data(base64Encoded: $0) }),
            let sealed = object.sealed.flatMap({ Data(base64Encoded: $0) }),
            let iterations = object.iterations
        else {
            throw DCError(
                .fileNotFound, "the client is not set up", subject: base,
                remedy: .setUpClient)
        }
        let kek = try AtRest.deriveKey(passphrase: passphrase, salt: Array(salt), iterations: iterations)
        let storeKey: SecretBytes
        do {
            storeKey = try AtRest.open(Array(sealed), key: kek, context: "store-key")
        } catch {
            throw DCError(
                .wrongPassphrase, "the passphrase does not unlock the client",
                remedy: .giveSetUpPassphrase)
        }
        try unlock(storeKey: storeKey)
    }

    /// Keeps `storeKey` as the unlocked store key for the policy's auto-lock lifetime and
    /// publishes that secure services are available: what unlocking does once the key is known.
    func unlock(storeKey: SecretBytes) throws {
        let key = try unlockedKey
        if key.holders.contains(.runtimeFile) {
            try AtomicFileSet.ensureDirectory(key.runtimeDirectory)
            chmod(key.runtimeDirectory, 0o700)
        }
        let autoLock = (try? currentPolicy())?.autoLock ?? ClientPolicy.defaultAutoLock
        // All or nothing: an unlock whose status cannot be published takes its key back (or puts
        // back the key of an unlock before it, for the rest of that one's lifetime).
        let previous = (try? key.read()).flatMap { $0 }.map { ($0, key.expiry()) }
        try Rollback.allOrNothing { rollback in
            rollback.keep(statusFile)
            do {
                try key.store(storeKey, lifetime: .seconds(autoLock))
            } catch let error as DCError where !key.holders.contains(.runtimeFile) {
                var refusal = DCError(
                    .serviceUnavailable,
                    "XDG_RUNTIME_DIR is not set and the kernel keyring refused the unlocked key: there is no private place for it",
                    hint: "log in through a session that sets XDG_RUNTIME_DIR (systemd does: /run/user/$UID), "
                        + "or start a session keyring with keyctl session")
                refusal.underlying = error
                throw refusal
            }
            rollback.onFailure {
                key.remove()
                if let (secret, expiry) = previous, let left = expiry?.timeIntervalSinceNow, left > 0 {
                    _ = try? key.store(secret, lifetime: .milliseconds(Int64(left * 1000)))
                }
            }
            try publishStatus(available: true, until: key.expiry())
        }
        unlink(legacyRunKey)
    }

    /// Makes secure services unavailable: the store key is destroyed; the store cannot be read.
    /// A lock errs toward locked: the key goes first, so a status that cannot be published (the
    /// error thrown) leaves the client locked all the same, and the next lock publishes it.
    public func lock() throws {
        (try? unlockedKey)?.remove()
        unlink(legacyRunKey)
        // No identity JWT stays readable in the spool once secure services are gone.
        removeIdentityAnswers(olderThan: 0)
        try publishStatus(available: false)
    }

    /// Whether the store key is unlocked (and its lifetime has not ended), so deliveries can be
    /// installed and acknowledgements signed. Secure services need more: ``secureServicesAvailability``.
    public var isUnlocked: Bool { (try? unlockedKey)?.expiry() != nil }

    /// When the unlocked store key's lifetime ends (auto-lock); nil when locked.
    public var autoLockDate: Date? { (try? unlockedKey)?.expiry() }

    func publishStatus(available: Bool, until: Date? = nil) throws {
        var files = AtomicFileSet(directory: base)
        let deadline = until.map { ",\"until\":\(Int($0.timeIntervalSince1970))" } ?? ""
        try files.add(
            "status.json", .bytes(Array("{\"servicesAvailable\":\(available)\(deadline)}\n".utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
    }

    func storeKey() throws -> SecretBytes { try storeKey(from: try unlockedKey) }

    /// The store key from `key`, the ``unlockedKey`` resolved earlier: a caller that checks the
    /// lock before every chunk of a long stream resolves it once (it does not change while the
    /// process runs) and still sees a lock, or the end of the key's lifetime, at once.
    func storeKey(from key: ExpiringSecret) throws -> SecretBytes {
        guard let secret = try key.read(), secret.count == 32 else {
            throw DCError(.serviceUnavailable, "the client is locked", remedy: .unlockClient)
        }
        return secret
    }

    // MARK: - Requesting and receiving

    /// The URL that asks the provider for a credential.
    /// It is signed with the client's key (so the store must be unlocked), and the provider's key
    /// is pinned now if it was not yet.
    /// `request` is the request id to use, 32 lowercase hex digits; by default a fresh random one.
    public func requestURL(request: RequestID? = nil, now: Date = Date()) throws -> (
        url: String, providerScheme: URLScheme
    ) {
        let config = try config()
        try pinnedProvider(pinning: true)
        let message = try CredentialRequest(
            client: config.clientId, request: request ?? RequestID.random(), time: Int64(now.timeIntervalSince1970)
        ).signed(with: try signingKey(), scheme: config.providerScheme)
        return (message.url(scheme: config.providerScheme), config.providerScheme)
    }

    /// The availability notification for the provider, signed with the client's key.
    public func availabilityURL(now: Date = Date()) throws -> String? {
        let config = try config()
        // Each notice newer than the last, even two within one second (the provider takes only a
        // newer one).
        let time = try FileLock.updateNumber(at: store + "/available.time") { text in
            max(UInt64(now.timeIntervalSince1970), (UInt64(text) ?? 0) + 1)
        }
        return try AvailabilityNotice(client: config.clientId, time: Int64(time))
            .signed(with: try signingKey(), scheme: config.providerScheme).url(scheme: config.providerScheme)
    }

    /// The client's auth-token key (sealed under the store key: only while unlocked).
    func tokenKey() throws -> TokenSigningKey {
        try TokenSigningKey(pkcs8DER: try sealedPrivateKey("token-key"))
    }

    func signingKey() throws -> MessageSigningKey {
        try MessageSigningKey(pkcs8DER: try sealedPrivateKey("signing-key"))
    }

    /// The PKCS#8 of the private key sealed under the store key in `store/<name>` (`initialize`).
    private func sealedPrivateKey(_ name: String) throws -> SecretBytes {
        try AtRest.open(try bytes(store + "/" + name), key: try storeKey(), context: name)
    }

    /// The outcome of handling a delivery URL, and the result URL to send back (if any).
    public struct Handled: Sendable {
        /// The request id of the delivery.
        public var request: RequestID
        /// `ok` when the credential was installed, `invalid` when it failed validation and was not.
        public var status: ResultStatus
        /// The MAC-authenticated `<provider-scheme>:/result?…` URL to open; for a replay, the one
        /// recorded the first time.
        public var resultURL: String?
        /// True when the request was handled before and its recorded result is returned; nothing was installed now.
        public var replay: Bool
        /// The delivered credential's name; nil for a replay.
        public var credentialName: String?
        /// The delivery number of the credential installed before this one, if any (what a
        /// `stale` delivery was compared with).
        public var installedSequence: UInt64?
        /// The delivery number this delivery carried; nil for a replay of a delivery that was not
        /// kept out as stale.
        public var sequence: UInt64?

        /// For a `stale` delivery, the refusal ``ManagedClient/handle(url:allowOlder:now:forwardingOutput:send:whenHandled:)``
        /// throws once it has answered the provider (`refusedMessage`, exit 77): the same each time
        /// the same URL comes, since the numbers are those recorded when it first arrived. Nil for
        /// any other status.
        public var staleRefusal: DCError? {
            guard status == .stale else { return nil }
            let numbers = sequence.map { " (number \($0))" } ?? ""
            let installed = installedSequence.map { " (number \($0))" } ?? ""
            return DCError(
                .refusedMessage,
                "the delivery\(numbers) is older than the installed credential\(installed); kept the installed one",
                subject: request.text,
                remedy: .installStaleDelivery)
        }
    }

    /// What the client recorded of a request it handled (`store/processed/<request>`): the status,
    /// the result URL it answered with, and for a `stale` delivery the two numbers compared, so
    /// that the same URL gets the same answer every time. One line:
    /// `STATUS RESULT-URL [SEQUENCE INSTALLED-SEQUENCE]`.
    private struct HandledRecord {
        var status: ResultStatus
        var resultURL: String?
        var sequence: UInt64?
        var installedSequence: UInt64?

        init(status: ResultStatus, resultURL: String?, sequence: UInt64? = nil, installedSequence: UInt64? = nil) {
            self.status = status
            self.resultURL = resultURL
            self.sequence = sequence
            self.installedSequence = installedSequence
        }

        init?(path: String) {
            guard let data = FileManager.default.contents(atPath: path),
                let parts = String(data: data, encoding: .utf8)?.split(separator: " ").map(String.init),
                let status = parts.first.flatMap(ResultStatus.init(validating:))
            else { return nil }
            self.init(
                status: status, resultURL: parts.count > 1 ? parts[1] : nil,
                sequence: parts.count > 3 ? UInt64(parts[2]) : nil,
                installedSequence: parts.count > 3 ? UInt64(parts[3]) : nil)
        }

        var line: String {
            var fields = [status.text] + (resultURL.map { [$0] } ?? [])
            if resultURL != nil, let sequence, let installedSequence {
                fields += ["\(sequence)", "\(installedSequence)"]
            }
            return fields.joined(separator: " ")
        }
    }

    /// Handles `<scheme>:/deliver…`: checks the URL, its signature by the pinned provider and the
    /// spool file, opens the payload, validates the credential and installs it atomically, then
    /// returns the authenticated result. A request already handled is not installed again; its
    /// recorded result is returned (idempotent). A delivery whose number is not above the installed
    /// credential's is kept out (status `stale`) unless `allowOlder`: no rollback.
    public func handleDelivery(
        _ url: String, validator: CredentialValidator? = nil, allowOlder: Bool = false,
        now: Date = Date()
    ) throws -> Handled {
        let config = try config()
        return try handleDelivery(
            try DeliveryNotice.parse(url, scheme: config.scheme), config: config, validator: validator,
            allowOlder: allowOlder, now: now)
    }

    func handleDelivery(
        _ message: DeliveryNotice, config: Config, validator: CredentialValidator?, allowOlder: Bool, now: Date
    ) throws -> Handled {
        let (request, digest, sequence) = (message.request, message.digest.text, message.sequence)
        try checkAddressee(message.client, of: "delivery", config: config)
        // The provider's key is the pinned one; if no command pinned it yet, the one its registration
        // shows (a file of this user that no one else can write, never the URL), pinned only once a
        // delivery it signed has verified: a forged URL changes nothing.
        try verifyProviderSignature(message, config: config, subject: request.text)
        // An app that is not authorized takes nothing (its provider sends nothing either).
        if let policy = try currentPolicy(), policy.state != .authorized {
            throw DCError(
                .notAuthorized, "the app is \(policy.state); the delivery was not installed", subject: request.text)
        }
        // One handler at a time from here: two deliveries handled at once must not both pass the
        // number check and then install in the wrong order.
        return try FileLock.withExclusiveLock(at: store + "/.lock") { _ in
            try install(
                request: request, digest: digest, sequence: sequence, config: config, validator: validator,
                allowOlder: allowOlder, now: now)
        }
    }

    private func install(
        request: RequestID, digest: String, sequence: UInt64, config: Config, validator: CredentialValidator?,
        allowOlder: Bool, now: Date
    ) throws -> Handled {
        // A crash mid-install leaves at most staging files; they are never read, only removed.
        AtomicFileSet.removeStaleStagingFiles(in: store)
        AtomicFileSet.removeStaleStagingFiles(in: store + "/processed")
        prune(now: now)
        let processed = store + "/processed/\(request)"
        // A delivery kept out as stale that the user now chooses by hand: its kept spool file.
        var chosenStale: HandledRecord?
        if let recorded = HandledRecord(path: processed) {
            guard allowOlder, recorded.status == .stale else {
                return Handled(
                    request: request, status: recorded.status, resultURL: recorded.resultURL, replay: true,
                    installedSequence: recorded.installedSequence, sequence: recorded.sequence)
            }
            chosenStale = recorded
        }
        let key = try storeKey()
        let sealed = try chosenStale == nil ? spool.read(request: request, digest: digest) : keptStale(request, digest)
        let clientKey = PrivateKey(
            pkcs8DER: try AtRest.open(try bytes(store + "/client-key"), key: key, context: "client-key"))
        let certificate = try CredentialReader().read(file: store + "/client.pem").certificates[0]
        let opened = try Sealing.open(sealed, with: clientKey, certificate: certificate)
        let payload = try DeliveryPayload.decode(opened)
        guard payload.requestId == request, payload.clientId == config.clientId else {
            throw DCError(
                .refusedMessage, "the payload is bound to another request or client (a replayed or swapped spool file)",
                subject: request.text, remedy: .requestAgain)
        }
        // Request ids are good for a limited time (as the provider's ledger is). A stale delivery
        // the user chooses was on time when it arrived: its record says so.
        guard chosenStale != nil || abs(payload.issuedAt.timeIntervalSince(now)) <= Self.requestTimeLimit else {
            spool.remove(request: request)
            throw DCError(
                .refusedMessage, "the delivery is older than \(Int(Self.requestTimeLimit)) s", subject: request.text,
                remedy: .requestAgain)
        }
        let installedSequence = self.installedSequence
        // All or nothing: a step that fails (recording the outcome, setting a stale delivery
        // aside) takes the installed credential back with it, so the same URL can be handled again.
        let (status, result) = try Rollback.allOrNothing { rollback -> (ResultStatus, String) in
            for path in installation.files + [
                processed, spool.path(request: request), spool.path(request: request, kind: .staleDelivery),
            ] {
                rollback.keep(path)
            }
            var status = ResultStatus.ok
            if let installedSequence, sequence == installedSequence, try installation.payload(key: key) == opened {
                // This very delivery was installed before a crash cut the handler short: finish it.
            } else if let installedSequence, sequence <= installedSequence, !allowOlder {
                status = .stale
            } else if !(try validator ?? self.validator(now: now)).validate(payload.credential).passes() {
                status = .invalid
            } else {
                // All or nothing: the new credential, its number and the key history replace the old
                // ones together. The old encryption pairs join the history; its other keys are gone.
                let history = KeyContinuity.history(
                    replacing: try installation.credential(key: key), kept: try installation.keyHistory(key: key) ?? [],
                    with: payload.credential)
                try installation.replace(with: opened, sequence: sequence, keyHistory: history, key: key)
            }
            // The provider accepts one result per request: a stale delivery chosen later keeps the
            // result it was answered with, and nothing new is sent.
            let result =
                try chosenStale?.resultURL
                ?? DeliveryResult(
                    request: request, status: status,
                    mac: try SHA256Hex(
                        DeliveryPayload.resultMAC(key: payload.resultKey, request: request, status: status))
                ).url(scheme: config.providerScheme)
            let record =
                status == .stale
                ? HandledRecord(
                    status: status, resultURL: result, sequence: sequence, installedSequence: installedSequence ?? 0)
                : HandledRecord(status: status, resultURL: result)
            try AtomicFileSet.ensureDirectory(store + "/processed")
            var files = AtomicFileSet(directory: store + "/processed")
            try files.add(request.text, .bytes(Array(record.line.utf8)), mode: 0o600)
            try files.commit(replacingExisting: true)
            if status == .stale {
                // Kept, within the bound (``prune(now:)``), so that the user can still choose it by hand.
                try spool.setAside(request: request)
            }
            return (status, result)
        }
        if status == .stale {
            prune(now: now)
        } else {
            spool.remove(request: request)
            spool.remove(request: request, kind: .staleDelivery)
        }
        return Handled(
            request: request, status: status, resultURL: chosenStale == nil ? result : nil, replay: false,
            credentialName: payload.credential.name, installedSequence: installedSequence, sequence: sequence)
    }

    /// The spool file of a delivery kept out as stale, checked against the URL's digest again.
    private func keptStale(_ request: RequestID, _ digest: String) throws -> [UInt8] {
        do {
            return try spool.read(request: request, digest: digest, kind: .staleDelivery)
        } catch let error as DCError where error.code == .notReady {
            throw DCError(
                .notReady,
                "the stale delivery is no longer kept (at most \(Self.staleCapacity) are kept, each for \(Int(Self.staleRetention / 3600)) hours)",
                subject: request.text, remedy: .requestResend)
        }
    }

    var installation: InstalledCredential { InstalledCredential(store: store) }

    var trustAnchorsFile: String { store + "/trust-anchors.pem" }

    /// Gives the client its own trust anchors: from now on a delivered credential is installed only
    /// if its certificates chain to one of them (otherwise the result is `invalid` and nothing is
    /// installed). An empty list removes them, and any chain is accepted again.
    public func trust(anchors: [Certificate]) throws {
        _ = try config()
        guard !anchors.isEmpty else {
            unlink(trustAnchorsFile)
            return
        }
        var files = AtomicFileSet(directory: store)
        try files.add("trust-anchors.pem", .bytes(anchors.flatMap { PEM.certificate($0) }), mode: 0o644)
        try files.commit(replacingExisting: true)
    }

    /// The client's trust anchors (``trust(anchors:)``); empty when it has none.
    public func trustAnchors() throws -> [Certificate] {
        guard FileManager.default.fileExists(atPath: trustAnchorsFile) else { return [] }
        return try CredentialReader().read(file: trustAnchorsFile).certificates
    }

    /// How the client validates a delivered credential at `now`: the derived-PIV profiles (an
    /// authentication or signing certificate that is expired or not valid yet is an error), and
    /// a chain to its own trust anchors when it has any (given both as anchors and as intermediates, so that
    /// a file holding a root and its issuing CA works).
    public func validator(now: Date = Date()) throws -> CredentialValidator {
        let anchors = try trustAnchors()
        return CredentialValidator(trustAnchors: anchors, intermediates: anchors, now: now)
    }

    /// The delivery number of the installed credential, or nil when none is installed (or it came
    /// before delivery numbers did).
    public var installedSequence: UInt64? { installation.sequence }

    /// How long the record of a handled request is kept, and the most records kept.
    public static let processedRetention: TimeInterval = 7 * 86400
    static let processedCapacity = 1000
    /// How long the spool file of a delivery kept out as stale is kept (so that the user can still
    /// choose it with `dcclient handle-url --allow-older`): a day.
    public static let staleRetention: TimeInterval = 86400
    /// The most stale deliveries kept; those kept out longest go first.
    public static let staleCapacity = 10

    /// Keeps the spool and the records of handled requests bounded: spool files older than the
    /// request time limit can no longer be installed and are removed, except those of deliveries
    /// kept out as stale (`<request>.stale`), which go after ``staleRetention`` or beyond the newest
    /// ``staleCapacity``; records of handled requests older than ``processedRetention``, or beyond
    /// the newest 1000, are removed (a delivery that old is refused as late anyway).
    public func prune(now: Date = Date()) {
        func entries(_ directory: String) -> [(path: String, modified: Date)] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            return names.compactMap { name in
                let path = directory + "/" + name
                var info = stat()
                guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
                let seconds = TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9
                return (path, Date(timeIntervalSince1970: seconds))
            }.sorted { $0.modified > $1.modified }
        }
        let staleSuffix = "." + Spool.Kind.staleDelivery.fileExtension
        let spooled = entries(spool.directory)
        for file in spooled where !file.path.hasSuffix(staleSuffix) {
            if now.timeIntervalSince(file.modified) > Self.requestTimeLimit { unlink(file.path) }
        }
        for (index, file) in spooled.filter({ $0.path.hasSuffix(staleSuffix) }).enumerated()
        where now.timeIntervalSince(file.modified) > Self.staleRetention || index >= Self.staleCapacity {
            unlink(file.path)
        }
        for (index, file) in entries(store + "/processed").enumerated()
        where now.timeIntervalSince(file.modified) > Self.requestTimeLimit
            && (now.timeIntervalSince(file.modified) > Self.processedRetention || index >= Self.processedCapacity)
        {
            unlink(file.path)
        }
    }

    /// The installed credential; only while secure services are available
    /// (``requireSecureServices()``: ready, authorized, unlocked). Its escrow entry carries the
    /// key history the client keeps (``keyHistory()``): the encryption pairs of the credentials it
    /// replaced, and the history the provider sent.
    public func installed() throws -> Credential? {
        _ = try config()
        let key = try secureServicesKey()
        guard FileManager.default.fileExists(atPath: store + "/credential"),
            let credential = try installation.credential(key: key)
        else { return nil }
        guard let history = try installation.keyHistory(key: key) else { return credential }
        return try KeyContinuity.credential(credential, carrying: history)
    }

    /// The retired encryption pairs the client keeps, newest first, at most
    /// `CredentialEntry.maximumKeyHistory`: the encryption and escrow pairs of every credential a
    /// renewal replaced, and the escrow history the provider sent (see ``installed()``). Only
    /// while secure services are available.
    public func keyHistory() throws -> [CertifiedKey] {
        _ = try config()
        let key = try secureServicesKey()
        return try installation.keyHistory(key: key) ?? installation.credential(key: key)?[.escrow]?.keyHistory ?? []
    }

    /// ``installed()`` and ``keyHistory()`` in one reading, for a long-lived user that shows them
    /// (the PKCS#11 module): secure services are checked once and each sealed file is opened
    /// once. With `reading` `PairReading.asSealed` the pairs are the bytes the client sealed
    /// after checking them, unparsed; whoever uses a key then checks it against its certificate.
    /// Nil when nothing is installed.
    public func installedWithKeyHistory(reading: PairReading = .strict) throws
        -> (credential: Credential, keyHistory: [CertifiedKey])?
    {
        _ = try config()
        let key = try secureServicesKey()
        guard FileManager.default.fileExists(atPath: store + "/credential"),
            let credential = try installation.credential(key: key, reading: reading)
        else { return nil }
        guard let history = try installation.keyHistory(key: key, reading: reading) else {
            return (credential, credential[.escrow]?.keyHistory ?? [])
        }
        return (try KeyContinuity.credential(credential, carrying: history), history)
    }

    /// Opens a message encrypted to this client's credential (CMS EnvelopedData or
    /// AuthEnvelopedData, as DER, PEM or S/MIME, such as `openssl cms -encrypt` and mail clients
    /// make): with the installed encryption pair, then the escrow pair, then the key history,
    /// newest first, so that a message to a certificate a renewal replaced still opens. Only
    /// while secure services are available. Throws `DCError/Code/noMatchingKey` when none opens
    /// it.
    public func decrypt(_ message: [UInt8]) throws -> SecretBytes {
        let current =
            try installed().map { credential in
                [CredentialTag.encryption, .escrow].compactMap { credential[$0]?.certifiedKey }
            } ?? []
        return try EnvelopedMessage.open(message, with: current + keyHistory()).plaintext
    }

    /// The directory that holds what the client is: its configuration, its policy, the installed
    /// credential and its delivery number. The client writes there only by renaming files into
    /// place (and retiring removes it), so the directory's own `stat` changes with every change:
    /// a long-lived user of the client (the PKCS#11 module) compares it before every operation
    /// and reads the files again only when it changed.
    public var stateDirectory: String { store }

    /// Whether the store is unlocked, asked again and again: the holder of the unlocked key is
    /// found once, and each ``UnlockWatcher/isUnlocked()`` is a read of the kernel keyring (or the
    /// runtime file). Throws when the runtime directory is unusable.
    public func unlockWatcher() throws -> UnlockWatcher { UnlockWatcher(key: try unlockedKey) }

    /// Whether a credential is installed; answered without the store key (it says nothing of
    /// the credential itself, which only ``installed()`` reads).
    public var hasInstalledCredential: Bool { FileManager.default.fileExists(atPath: store + "/credential") }
    /// The client's id (the app's id, `dcclient init --app`), or nil when the client is not set up.
    public var clientID: ClientID? { try? config().clientId }
    /// The client's URL scheme, or nil when the client is not set up.
    public var scheme: URLScheme? { try? config().scheme }
    /// The provider's URL scheme the client asks and answers on, or nil when the client is not set up.
    public var providerScheme: URLScheme? { try? config().providerScheme }

    func bytes(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DCError(
                .fileNotFound, "missing from the client's store", subject: path,
                remedy: .setUpIncompleteStore)
        }
        return Array(data)
    }
}

/// Tells whether a client's store is unlocked, cheaply enough to ask before every operation
/// (``ManagedClient/unlockWatcher()``): the kernel key found once is read again by its serial.
public struct UnlockWatcher: Sendable {
    let key: ExpiringSecret
    private var kernelKey: Int32?

    init(key: ExpiringSecret) { self.key = key }

    /// Whether the store key is there and its auto-lock lifetime has not ended.
    public mutating func isUnlocked() -> Bool { key.expiry(rememberingKernelKey: &kernelKey) != nil }
}
