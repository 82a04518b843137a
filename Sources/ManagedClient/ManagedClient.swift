import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation

/// The reference managed client: it registers a scheme, asks a provider for a credential,
/// receives, opens, validates and installs it all-or-nothing, and calls back.
///
/// ```
/// $XDG_DATA_HOME/dcclient/        0700
///   store/wrapped-key.json        the store key, sealed under a key derived from the passphrase
///   store/client-key              the client's private key, sealed under the store key
///   store/client.pem              its certificate (deliveries are sealed to it)
///   store/credential              the installed credential, sealed under the store key
///   store/processed/<request>     the outcome of each request handled (idempotency, replays)
///   spool/                        sealed deliveries from providers
///   status.json                   {"servicesAvailable": …}, read by providers
///   run/store.key                 the store key — only while unlocked
/// ```
public struct ManagedClient: Sendable {
    /// The client's directory, `$XDG_DATA_HOME/dcclient`; everything it keeps is under it.
    public let base: String
    /// The XDG directories the client lives in and publishes its registration to.
    public let locations: DeliveryLocations
    static let iterations = 200_000
    /// How long a delivery stays acceptable after the provider issued it.
    public static let requestTimeLimit: TimeInterval = 600

    /// The client kept under `locations`; nothing is read or created until it is used.
    public init(locations: DeliveryLocations = DeliveryLocations()) {
        self.locations = locations
        base = locations.dataHome + "/dcclient"
    }

    var store: String { base + "/store" }
    var spool: Spool { Spool(directory: base + "/spool") }
    var statusFile: String { base + "/status.json" }
    var runKey: String { base + "/run/store.key" }
    /// `store/client.json`: the client id and the two schemes; its presence means the client is set up.
    public var configFile: String { store + "/client.json" }

    struct Config: Codable {
        var clientId: String
        var scheme: String
        var providerScheme: String
    }

    // MARK: - Setup

    /// Creates the client: a store key sealed under the passphrase, a P-256 key and certificate for
    /// sealing, the registration; then unlocks.
    public func initialize(
        clientId: String, scheme: String, providerScheme: String, executable: String, passphrase: SecretBytes
    ) throws {
        guard !FileManager.default.fileExists(atPath: configFile) else {
            throw DCError(
                .outputExists, "the client is already set up", subject: base,
                hint: "use it as it is (dcclient unlock, dcclient register), or remove the directory to start afresh")
        }
        try AtomicFileSet.ensureDirectory(base)
        chmod(base, 0o700)
        try AtomicFileSet.ensureDirectory(store)
        let storeKey = try Digests.random(32)
        let salt = try Digests.random(16).withUnsafeBytes { Array($0) }
        let kek = try AtRest.deriveKey(passphrase: passphrase, salt: salt, iterations: Self.iterations)
        let wrapped = try AtRest.seal(storeKey, key: kek, context: "store-key")
        let clientKey = try KeyGeneration.generate(.p256)
        let certificate = try CertificateSigner(selfSigningWith: clientKey).issue(
            CertificateProfile(
                subject: DistinguishedName([.init("CN", "dcclient \(clientId)")]),
                notBefore: Date().addingTimeInterval(-60),
                notAfter: Date().addingTimeInterval(5 * 365 * 86400), keyUsage: .keyAgreement), for: clientKey)
        let config = Config(
            clientId: clientId, scheme: scheme.lowercased(), providerScheme: providerScheme.lowercased())
        let wrappedJSON = try JSONSerialization.data(withJSONObject: [
            "salt": Data(salt).base64EncodedString(), "iterations": Self.iterations,
            "sealed": Data(wrapped).base64EncodedString(),
        ])
        var files = AtomicFileSet(directory: store)
        try files.add("wrapped-key.json", .bytes(Array(wrappedJSON)), mode: 0o600)
        try files.add(
            "client-key",
            .bytes(try AtRest.seal(clientKey.withPKCS8DER { SecretBytes($0) }, key: storeKey, context: "client-key")),
            mode: 0o600)
        try files.add("client.pem", .bytes(PEM.certificate(certificate)), mode: 0o644)
        try files.add("client.json", .bytes(Array(try JSONEncoder().encode(config))), mode: 0o600)
        try files.commit()
        try publishRegistration(executable: executable)
        try AtomicFileSet.ensureDirectory(spool.directory)
        try unlock(passphrase: passphrase)
    }

    /// Publishes (again) what providers read: the client's id, scheme, certificate, spool, status
    /// and the executable that must handle its scheme. `dcclient init` and `dcclient register` do it.
    public func publishRegistration(executable: String) throws {
        let config = try config()
        let certificate = try CredentialReader().read(file: store + "/client.pem").certificates[0]
        try Registrations.publish(
            ClientRegistration(
                clientId: config.clientId, scheme: config.scheme, executable: executable, certificate: certificate,
                spool: spool.directory, status: statusFile),
            at: locations.clientRegistration(config.scheme))
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
                hint: "run dcclient init --client-scheme SCHEME --provider-scheme SCHEME --passphrase-file FILE")
        }
        return try JSONDecoder().decode(Config.self, from: data)
    }

    // MARK: - Lock

    /// Makes secure services available: the store key is unsealed into `run/` (0600).
    public func unlock(passphrase: SecretBytes) throws {
        guard let data = FileManager.default.contents(atPath: store + "/wrapped-key.json"),
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let salt = (object["salt"] as? String).flatMap({ Data(base64Encoded: $0) }),
            let sealed = (object["sealed"] as? String).flatMap({ Data(base64Encoded: $0) }),
            let iterations = object["iterations"] as? Int
        else {
            throw DCError(
                .fileNotFound, "the client is not set up", subject: base,
                hint: "run dcclient init --client-scheme SCHEME --provider-scheme SCHEME --passphrase-file FILE")
        }
        let kek = try AtRest.deriveKey(passphrase: passphrase, salt: Array(salt), iterations: iterations)
        let storeKey: SecretBytes
        do {
            storeKey = try AtRest.open(Array(sealed), key: kek, context: "store-key")
        } catch {
            throw DCError(
                .wrongPassphrase, "the passphrase does not unlock the client",
                hint: "give the passphrase dcclient init was given; it is never retried")
        }
        let run = (runKey as NSString).deletingLastPathComponent
        try AtomicFileSet.ensureDirectory(run)
        var files = AtomicFileSet(directory: run)
        try files.add("store.key", .secret(storeKey), mode: 0o600)
        try files.commit(replacingExisting: true)
        try publishStatus(available: true)
    }

    /// Makes secure services unavailable: the store key is destroyed; the store cannot be read.
    public func lock() throws {
        unlink(runKey)
        try publishStatus(available: false)
    }

    /// Whether the store key is in `run/`, so deliveries can be installed and the credential read.
    public var isUnlocked: Bool { FileManager.default.fileExists(atPath: runKey) }

    func publishStatus(available: Bool) throws {
        var files = AtomicFileSet(directory: base)
        try files.add("status.json", .bytes(Array("{\"servicesAvailable\":\(available)}\n".utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
    }

    func storeKey() throws -> SecretBytes {
        guard let data = FileManager.default.contents(atPath: runKey), data.count == 32 else {
            throw DCError(.serviceUnavailable, "the client is locked", hint: "run dcclient unlock")
        }
        var bytes = Array(data)
        return SecretBytes(consuming: &bytes)
    }

    // MARK: - Requesting and receiving

    /// The URL that asks the provider for a credential.
    public func requestURL() throws -> (url: String, providerScheme: String) {
        let config = try config()
        let request = Digests.hex(try Digests.random(16).withUnsafeBytes { Array($0) })
        return (
            DeliveryMessage.new(client: config.clientId, request: request).url(scheme: config.providerScheme),
            config.providerScheme
        )
    }

    /// The availability notification for the provider.
    public func availabilityURL() throws -> String? {
        let config = try config()
        return DeliveryMessage.available(client: config.clientId).url(scheme: config.providerScheme)
    }

    /// The outcome of handling a delivery URL, and the result URL to send back (if any).
    public struct Handled: Sendable {
        /// The request id of the delivery: 32 lowercase hex digits.
        public var request: String
        /// `ok` when the credential was installed, `invalid` when it failed validation and was not.
        public var status: String
        /// The MAC-authenticated `<provider-scheme>:/result?…` URL to open; for a replay, the one
        /// recorded the first time.
        public var resultURL: String?
        /// True when the request was handled before and its recorded result is returned; nothing was installed now.
        public var replay: Bool
        /// The delivered credential's name; nil for a replay.
        public var credentialName: String?
    }

    /// Handles `<scheme>:/deliver…`: checks the URL and the spool file, opens the payload,
    /// validates the credential and installs it atomically, then returns the authenticated result.
    /// A request already handled is not installed again; its recorded result is returned (idempotent).
    public func handleDelivery(_ url: String, validator: CredentialValidator = CredentialValidator()) throws -> Handled
    {
        let config = try config()
        // A crash mid-install leaves at most staging files; they are never read, only removed.
        AtomicFileSet.removeStaleStagingFiles(in: store)
        AtomicFileSet.removeStaleStagingFiles(in: store + "/processed")
        guard case .deliver(let client, let request, let digest) = try DeliveryMessage.parse(url, scheme: config.scheme)
        else {
            throw DCError(.invalid, "not a delivery URL", hint: "deliveries are <client-scheme>:/deliver?… URLs")
        }
        guard client == config.clientId else {
            throw DCError(
                .invalid, "a delivery for another client (\(client))",
                hint: "this client is '\(config.clientId)'; check which program handles the scheme \(config.scheme):")
        }
        let processed = store + "/processed/\(request)"
        if let recorded = FileManager.default.contents(atPath: processed),
            let line = String(data: recorded, encoding: .utf8)
        {
            let parts = line.split(separator: " ").map(String.init)
            return Handled(
                request: request, status: parts[0], resultURL: parts.count > 1 ? parts[1] : nil, replay: true)
        }
        let key = try storeKey()
        let sealed = try spool.read(request: request, digest: digest)
        let clientKey = PrivateKey(
            pkcs8DER: try AtRest.open(try bytes(store + "/client-key"), key: key, context: "client-key"))
        let certificate = try CredentialReader().read(file: store + "/client.pem").certificates[0]
        let opened = try Sealing.open(sealed, with: clientKey, certificate: certificate)
        let payload = try DeliveryPayload.decode(opened)
        guard payload.requestId == request, payload.clientId == config.clientId else {
            throw DCError(
                .refusedMessage, "the payload is bound to another request or client (a replayed or swapped spool file)",
                subject: request, hint: "nothing was installed; ask the provider again (dcclient request)")
        }
        // Request ids are good for a limited time (as the provider's ledger is).
        guard abs(payload.issuedAt.timeIntervalSinceNow) <= Self.requestTimeLimit else {
            spool.remove(request: request)
            throw DCError(
                .refusedMessage, "the delivery is older than \(Int(Self.requestTimeLimit)) s", subject: request,
                hint: "nothing was installed; ask the provider again (dcclient request)")
        }
        var status = "ok"
        let verdict = validator.validate(payload.credential)
        if !verdict.passes() {
            status = "invalid"
        } else {
            // All or nothing: the new credential replaces the old one in a single rename.
            var files = AtomicFileSet(directory: store)
            try files.add("credential", .bytes(try AtRest.seal(opened, key: key, context: "credential")), mode: 0o600)
            try files.commit(replacingExisting: true)
        }
        let result = DeliveryMessage.result(
            request: request, status: status,
            mac: DeliveryPayload.resultMAC(key: payload.resultKey, request: request, status: status)
        ).url(scheme: config.providerScheme)
        try AtomicFileSet.ensureDirectory(store + "/processed")
        var record = AtomicFileSet(directory: store + "/processed")
        try record.add(request, .bytes(Array("\(status) \(result)".utf8)), mode: 0o600)
        try record.commit(replacingExisting: true)
        spool.remove(request: request)
        return Handled(
            request: request, status: status, resultURL: result, replay: false, credentialName: payload.credential.name)
    }

    /// The installed credential (needs the client unlocked).
    public func installed() throws -> Credential? {
        let path = store + "/credential"
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        return try DeliveryPayload.decode(try AtRest.open(try bytes(path), key: try storeKey(), context: "credential"))
            .credential
    }

    /// The client's URL scheme, or nil when the client is not set up.
    public var scheme: String? { try? config().scheme }
    /// The provider's URL scheme the client asks and answers on, or nil when the client is not set up.
    public var providerScheme: String? { try? config().providerScheme }

    func bytes(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DCError(
                .fileNotFound, "missing from the client's store", subject: path,
                hint: "the store is incomplete: remove it and set the client up again (dcclient init)")
        }
        return Array(data)
    }
}
