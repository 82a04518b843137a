import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import SchemeHandlers
import SystemSupport

/// Auth tokens: what an app sends its application server to prove which managed user and app it
/// is, bound to a challenge the server chose (``authToken(challenge:serverName:now:send:)``).
///
/// A token is made here, with the client's P-256 token key (sealed in the store, so only while
/// secure services are available), under the provider's *delegation*: a statement signed with
/// the provider's issuing key that certifies that key for this app and user for a day at most.
/// The provider sends a fresh delegation whenever the client is authorized and announces
/// availability; the client keeps the newest in `store/delegation`.
extension ManagedClient {
    var delegationFile: String { store + "/delegation" }
    /// A delegation closer than this to its expiry is renewed before a token is made.
    static let delegationRenewalMargin: Int64 = 3600

    /// Handles `<scheme>:/delegation…`: checks the URL's signature by the pinned provider and the
    /// spool file's digest, then that the delegation is for this client and its token key and
    /// valid now, and keeps it unless the one kept is newer. Returns the delegation kept.
    @discardableResult
    public func handleDelegation(_ url: String, now: Date = Date()) throws -> Delegation {
        let config = try config()
        return try handleDelegation(try DelegationNotice.parse(url, scheme: config.scheme), config: config, now: now)
    }

    func handleDelegation(_ message: DelegationNotice, config: Config, now: Date) throws -> Delegation {
        let (id, digest) = (message.id, message.digest.text)
        try checkAddressee(message.client, of: "delegation", config: config)
        try verifyProviderSignature(message, config: config, subject: id.text)
        if let policy = try currentPolicy(), policy.state != .authorized {
            spool.remove(request: id, kind: .delegation)
            throw DCError(.notAuthorized, "the app is \(policy.state); the delegation was not kept", subject: id.text)
        }
        let text = String(decoding: try spool.read(request: id, digest: digest, kind: .delegation), as: UTF8.self)
        defer { spool.remove(request: id, kind: .delegation) }
        let delegation = try Delegation(parsing: text)
        guard delegation.claims.id == id.text, delegation.claims.containerID == config.clientId.text,
            delegation.claims.appID == config.scheme.text
        else {
            throw DCError(
                .refusedMessage, "the delegation names another client or id than its URL", subject: id.text,
                hint: "nothing was kept")
        }
        guard let tokenKey = config.tokenKey.flatMap({ Data(base64Encoded: $0) }),
            Array(tokenKey) == delegation.claims.tokenKey.uncompressedPoint
        else {
            throw DCError(.delegationNotValid, "the delegation certifies another token key than this client's")
        }
        try delegation.checkValid(at: now)
        return try FileLock.withExclusiveLock(at: store + "/.delegation.lock") { _ in
            // Newest wins: a delegation issued before the one kept does not replace it, unless the
            // one kept is not valid now (a clock stepped back must not block every fresh one).
            if let kept = try? storedDelegation(), (try? kept.checkValid(at: now)) != nil,
                kept.claims.notBefore > delegation.claims.notBefore
            {
                return kept
            }
            var files = AtomicFileSet(directory: store)
            try files.add("delegation", .bytes(Array(text.utf8)), mode: 0o600)
            try files.commit(replacingExisting: true)
            return delegation
        }
    }

    /// The delegation kept, valid or not; nil when none was received.
    func storedDelegation() throws -> Delegation? {
        guard let data = FileManager.default.contents(atPath: delegationFile) else { return nil }
        return try Delegation(parsing: String(decoding: data, as: UTF8.self))
    }

    /// The delegation kept, if it is valid at `now` for more than `margin` seconds.
    func currentDelegation(now: Date, margin: Int64 = 0) -> Delegation? {
        guard let delegation = try? storedDelegation(), (try? delegation.checkValid(at: now)) != nil,
            delegation.claims.expires - Int64(now.timeIntervalSince1970) > margin
        else { return nil }
        return delegation
    }

    /// Makes an auth token for `challenge` (chosen by the application server; may be empty) and
    /// `serverName` (the server it is for; may be empty), valid for ten minutes at most.
    ///
    /// Only for an app that is set up, authorized, and whose secure services are available (the
    /// token key is sealed in the store). When the delegation kept is missing or ends within the
    /// hour, the client first announces availability through `send` (by default, the handler the
    /// provider registered), and the provider sends a new one; if that fails, a delegation still
    /// valid is used. Throws `notAuthorized` (exit 77) when the app is not authorized,
    /// `serviceUnavailable` when it is locked, `credentialExpired` (exit 80) when the app has a
    /// credential installed that may not be used at `now` (``usableCredential(now:)``: past its
    /// expiration date, or its authentication or signing certificate outside its validity),
    /// `invalidChallenge` for a challenge or server name outside printable ASCII, and
    /// `delegationNotValid` when no valid delegation can be had.
    public func authToken(
        challenge: String, serverName: String = "", now: Date = Date(),
        send: (@Sendable (String) async throws -> Void)? = nil
    ) async throws -> AuthToken {
        try HeaderText.check(challenge, what: "the challenge", maximumLength: HeaderText.maximumChallengeLength)
        try HeaderText.check(serverName, what: "the server name", maximumLength: HeaderText.maximumServerNameLength)
        try checkTokensAllowed()
        // An app whose credential has lapsed proves nothing with it any more: no token either.
        if hasInstalledCredential { _ = try usableCredential(now: now) }
        let tokenKey = try self.tokenKey()
        var delegation = currentDelegation(now: now, margin: Self.delegationRenewalMargin)
        var renewal: Error?
        if delegation == nil {
            do {
                guard let url = try availabilityURL(now: now) else { throw notSetUp }
                try await (send ?? sendToProvider)(url)
            } catch {
                renewal = error
            }
            // What the provider sent is valid from its clock's now, which may be past `now`.
            delegation = currentDelegation(now: max(now, Date()))
        }
        guard let delegation else {
            throw DCError(
                .delegationNotValid,
                "no valid auth-token delegation from the provider"
                    + (renewal.map { ": asking for one failed: \($0)" } ?? ""),
                remedy: .awaitDelegation)
        }
        // A delegation renewed just now may start a second after `now`: the token is made no
        // earlier than the delegation it names.
        let madeAt = max(now, Date(timeIntervalSince1970: TimeInterval(delegation.claims.notBefore)))
        return try AuthToken.make(
            challenge: challenge, serverName: serverName, delegation: delegation, tokenKey: tokenKey, now: madeAt)
    }

    /// The shared user id: the same for every managed app of the same user on this device, and
    /// not reversible to the user's name (`SharedUserID` in AuthTokens). The user is the one the provider's
    /// delegation names; the per-user secret is `$XDG_DATA_HOME/derived-credentials/shared-user-id.key`,
    /// created on first use. The empty string when it cannot be computed: no delegation received
    /// yet, no machine id, or no secret.
    public func sharedUserID(machineIDFile: String = "/etc/machine-id") -> String {
        guard let userID = (try? storedDelegation())?.claims.userID,
            let machineID = SharedUserID.machineID(at: machineIDFile),
            let secret = try? SharedUserID.secret(at: sharedUserIDSecretFile)
        else { return "" }
        return SharedUserID.compute(secret: secret, machineID: machineID, userID: userID)
    }

    /// The user the provider says this app serves (the user id its newest delegation names), or
    /// nil before the first delegation. Read without the store key and without making a token:
    /// the app's configuration can show whose app this is.
    public var userID: String? { (try? storedDelegation())?.claims.userID }

    /// The per-user secret behind ``sharedUserID(machineIDFile:)``, shared by every app of the user.
    public var sharedUserIDSecretFile: String { locations.dataHome + "/derived-credentials/shared-user-id.key" }

    /// Refuses unless the app is set up, authorized and unlocked.
    func checkTokensAllowed() throws {
        _ = try config()
        if let policy = try currentPolicy(), policy.state != .authorized {
            throw DCError(
                .notAuthorized, "the app is \(policy.state): it gets no tokens", subject: base,
                hint: policy.state == .retired ? "a retired client is set up afresh and paired again" : nil,
                remedy: policy.state == .retired ? nil : .askProviderToAuthorize)
        }
        guard isUnlocked else {
            throw DCError(
                .serviceUnavailable, "the client is locked: secure services are not available", subject: base,
                remedy: .unlockFirst)
        }
    }

    /// Opens `url` with the handler the provider registered for the client's provider scheme
    /// (refusing any other program that claims the scheme), and waits for it.
    public func sendToProvider(_ url: String) async throws {
        let config = try config()
        guard
            let provider = try Registrations.read(
                ProviderRegistration.self, at: locations.providerRegistration(config.providerScheme))
        else {
            throw DCError(
                .missingClient, "no provider is registered for \(config.providerScheme):",
                remedy: .registerProviderScheme(config.providerScheme))
        }
        let outcome = try await SchemeHandlers().open(
            url, scheme: config.providerScheme, expectedExecutable: provider.executable)
        guard outcome.termination == .exited(0) else {
            let said = String(decoding: outcome.stderr, as: UTF8.self).split(separator: "\n").last.map(String.init)
            throw DCError(
                .notReady,
                "the provider's handler did not complete (\(outcome.termination))" + (said.map { ": \($0)" } ?? ""))
        }
    }

    var notSetUp: DCError {
        DCError(
            .fileNotFound, "the client is not set up", subject: base,
            remedy: .setUpClient)
    }
}
