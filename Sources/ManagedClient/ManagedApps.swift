import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The managed apps of one user: each is a container of its own under
/// `$XDG_DATA_HOME/dcclient/apps/<id>/` (its scheme, store, pairing, policy, secure files,
/// pasteboard and tokens), served by a ``ManagedClient`` made for it with
/// ``client(_:)``. The app's id is its client id (`dcclient init --app ID`).
///
/// What every app of the user shares lives outside the containers, so nothing secret is ever
/// copied from one to another: the shared-user-id secret (`SharedUserID` in AuthTokens) and the
/// desktop settings.
///
/// Versions before containers kept one client directly in `$XDG_DATA_HOME/dcclient/`. The first
/// command that opens a container moves it, whole, into the container named by its client id
/// (``migrateSingleClient()``).
public struct ManagedApps: Sendable {
    /// The XDG directories the apps live in.
    public let locations: XDGDirectories
    /// The environment variable that names the app when `--app` does not (documented in docs/CLI.md).
    public static let environmentVariable = "DCCLIENT_APP"
    /// The id an app gets when none is named and none is set up yet.
    public static let defaultApp = ClientID(validating: "dcclient")!  // cannot fail: a literal that keeps the rule

    /// The apps kept under `locations`; nothing is read until asked.
    public init(locations: XDGDirectories = XDGDirectories()) { self.locations = locations }

    /// `$XDG_DATA_HOME/dcclient`: the parent of every container.
    public var root: String { locations.dataHome + "/dcclient" }
    /// `$XDG_DATA_HOME/dcclient/apps`: one directory per app.
    public var containers: String { root + "/apps" }

    /// The client serving the app `id`; nothing is read or created until it is used. A command
    /// opens its app with ``open(_:)`` or ``choose(_:environment:)`` instead, which first move an
    /// older version's single client into its container.
    public func client(_ id: ClientID) -> ManagedClient { ManagedClient(locations: locations, app: id) }

    /// The client serving the app `id`, once the single client of an older version is in its
    /// container (``migrateSingleClient()``): the way into a container for a command, a URL or
    /// the PKCS#11 module that names its app.
    public func open(_ id: ClientID) throws -> ManagedClient {
        try migrateSingleClient()
        return client(id)
    }

    /// The ids of the apps that have a container, sorted (the single client of an older version
    /// is moved into its container first).
    public func list() throws -> [ClientID] {
        try migrateSingleClient()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: containers)) ?? []
        return names.compactMap(ClientID.init(validating:)).sorted { $0.description < $1.description }
    }

    /// The app a command serves: `requested` (from `--app`) or else the environment variable's
    /// value; with neither, the only app there is, or ``defaultApp`` when there is none. Several
    /// apps and none named is a usage error that lists them: guessing could act on the wrong one.
    /// Whichever way it is named, an older version's single client is moved into its container
    /// first (``open(_:)``).
    public func choose(_ requested: ClientID?, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws -> ManagedClient
    {
        if let named = try named(requested, environment: environment) { return try open(named) }
        let apps = try list()
        switch apps.count {
        case 0: return client(Self.defaultApp)
        case 1: return client(apps[0])
        default:
            throw DCError(
                .usage, "several managed apps are set up (\(apps.map(\.description).joined(separator: ", ")))",
                remedy: .nameApp)
        }
    }

    /// The apps a command that can serve each in turn serves (`dcclient check`): the one named, as
    /// ``choose(_:environment:)`` names it; with none named, every app set up, sorted by id (or
    /// ``defaultApp`` when there is none).
    public func chooseEvery(
        _ requested: ClientID?, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> [ManagedClient] {
        if let named = try named(requested, environment: environment) { return [try open(named)] }
        let apps = try list()
        return apps.isEmpty ? [client(Self.defaultApp)] : apps.map(client)
    }

    /// The app `requested` names, else the one the environment variable names; nil for neither.
    private func named(_ requested: ClientID?, environment: [String: String]) throws -> ClientID? {
        if let requested { return requested }
        guard let named = environment[Self.environmentVariable], !named.isEmpty else { return nil }
        guard let id = ClientID(validating: named) else {
            throw DCError(
                .usage, "\(Self.environmentVariable) is not an app id (lowercase letters, digits, -)",
                subject: named.escapingControlCharacters)
        }
        return id
    }

    /// The app whose own scheme is `scheme`: the one a URL of that scheme is for. Nil when no
    /// app has it.
    public func app(forScheme scheme: URLScheme) throws -> ManagedClient? {
        try list().lazy.map(client).first { $0.scheme == scheme }
    }

    /// Moves the single client of an older version (`$XDG_DATA_HOME/dcclient/store/…`) into the
    /// container named by its client id, all or nothing: the old directory is renamed aside in
    /// one step, its registration is published again naming the container's spool and status
    /// file, and it is renamed into place as the container in a last step. A process that stops
    /// (or fails) anywhere between leaves the client whole in the aside directory, which the next
    /// call finishes moving; no call ever sees half a client. An unlocked store key follows the
    /// client (its name derives from the store's path); a stop before it is stored again leaves
    /// the client locked. Safe to call from several processes at once (a lock file serializes
    /// them). Two clients where one is being moved (the older layout beside the containers, or a
    /// container already taken by the client's id) are refused with `conflictingLayouts`: moving
    /// either would mix them, so the user decides.
    public func migrateSingleClient() throws {
        let aside = root + ".moving"
        let legacyConfig = root + "/store/client.json"
        let fileManager = FileManager.default
        guard fileManager.fileExists(atPath: legacyConfig) || fileManager.fileExists(atPath: aside) else { return }
        try FileLock.withExclusiveLock(at: locations.dataHome + "/.dcclient-migration.lock") { _ in
            if fileManager.fileExists(atPath: legacyConfig) {
                // An older version run again after containers existed (or while a move waits to be
                // finished): moving its client aside would carry the containers with it, or land on
                // the other client. Refused; the user decides.
                for other in [containers, aside] where fileManager.fileExists(atPath: other) {
                    throw DCError(
                        .conflictingLayouts,
                        "both an older version's client and \(other == aside ? "a client being moved into its app container" : "app containers") are here",
                        subject: root,
                        hint: "move store/, spool/ and status.json out of \(root), or \(other) out of the way")
                }
                let legacy = ManagedClient(legacyBase: root, locations: locations)
                let unlocked = (try? legacy.unlockedKey).flatMap { key in
                    (try? key.read()).flatMap { secret in key.expiry().map { (key, secret, $0) } }
                }
                guard rename(root, aside) == 0 else {
                    throw DCError(
                        .ioError, "cannot move the client into its app container: \(String(cString: strerror(errno)))",
                        subject: root)
                }
                // The key's name follows the store's path: it is stored again under the new one.
                unlocked?.0.remove()
                try finishMove(from: aside, keeping: unlocked.map { ($0.1, $0.2) })
            } else if fileManager.fileExists(atPath: aside) {
                try finishMove(from: aside, keeping: nil)
            }
            // Else another process moved it while this one waited for the lock.
        }
    }

    /// The last steps of the move: the registration names the container's spool and status file,
    /// then the directory set aside becomes its container.
    private func finishMove(from aside: String, keeping unlocked: (SecretBytes, Date)?) throws {
        let moving = ManagedClient(legacyBase: aside, locations: locations)
        guard let config = try? moving.config() else {
            throw DCError(
                .invalid, "a client being moved into its app container has no readable configuration",
                subject: aside)
        }
        let client = client(config.clientId)
        if FileManager.default.fileExists(atPath: client.configFile) {
            throw DCError(
                .conflictingLayouts, "the app container of a client being moved holds another client already",
                subject: client.base, hint: "move \(aside) or \(client.base) out of the way")
        }
        try AtomicFileSet.ensureDirectory(containers)
        chmod(root, 0o700)
        // Before the rename: a stop between the two leaves a registration naming where the spool
        // is about to be (the next call finishes the move), never one naming where it was.
        let registrationPath = locations.clientRegistration(config.scheme)
        if let registration = try? Registrations.read(ClientRegistration.self, at: registrationPath) {
            try moving.publishRegistration(executable: registration.executable, servedFrom: client)
        }
        guard rename(aside, client.base) == 0 else {
            let failure = errno
            throw DCError(
                failure == ENOTEMPTY || failure == EEXIST ? .conflictingLayouts : .ioError,
                "cannot move the client into its app container: \(String(cString: strerror(failure)))",
                subject: client.base)
        }
        if let (secret, expiry) = unlocked, let key = try? client.unlockedKey {
            let left = expiry.timeIntervalSinceNow
            if left >= 1 { _ = try? key.store(secret, lifetime: .seconds(Int64(left))) }
        }
    }
}
