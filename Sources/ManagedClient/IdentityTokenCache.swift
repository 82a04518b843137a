import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import IdentityTokens
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Identity JWTs (``identityToken(clientID:scope:refresh:now:send:)``): asked of the provider,
/// cached sealed in the store until they expire.
extension ManagedClient {
    var identityTokenDirectory: String { store + "/identity-tokens" }
    /// A cached token closer than this to its expiry is not handed out.
    static let identityTokenMargin: TimeInterval = 60

    /// An identity JWT naming the user for the relying party `clientID` with `scope`: the cached
    /// one while it is valid for at least another minute, otherwise (or with `refresh`) a new one
    /// from the provider, asked with a signed `jwt` request through `send` (by default the
    /// handler the provider registered), which the provider answers in the client's spool.
    ///
    /// Only for an app that is set up, authorized and unlocked (the cache is sealed under the store
    /// key, the request signed with the client's key): `notAuthorized` (exit 77) or
    /// `serviceUnavailable` otherwise; `usage` for a client id or scope that is empty or not
    /// printable ASCII; `notReady` when the provider did not answer.
    public func identityToken(
        clientID: String, scope: String, refresh: Bool = false, now: Date = Date(),
        send: (@Sendable (String) async throws -> Void)? = nil
    ) async throws -> IdentityToken {
        try IdentityToken.check(clientID, what: "the client id")
        try IdentityToken.check(scope, what: "the scope")
        try checkTokensAllowed()
        let config = try config()
        let key = try storeKey()
        let cacheName = Digests.hex(Digests.sha256(Array("\(clientID)\n\(scope)".utf8)))
        let cacheFile = identityTokenDirectory + "/" + cacheName
        /// Whether `token` is what was asked for and still good for a minute.
        func fits(_ token: IdentityToken) -> Bool {
            token.claims.audience == clientID && token.claims.scope == scope
                && token.isValid(at: now, margin: Self.identityTokenMargin)
        }
        if !refresh, let sealed = try? bytes(cacheFile),
            let opened = try? AtRest.open(sealed, key: key, context: "identity-token"),
            let cached = try? IdentityToken(parsing: opened.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }),
            fits(cached)
        {
            return cached
        }
        // An answer left by a request whose client was killed before it read it is not left lying
        // around in the clear.
        removeIdentityAnswers(olderThan: 60, now: now)
        let request = RequestID.random()
        let url = try IdentityRequest(
            client: config.clientId, request: request, audience: try ClaimText(clientID), scope: try ClaimText(scope),
            time: Int64(now.timeIntervalSince1970)
        ).signed(with: try signingKey(), scheme: config.providerScheme).url(scheme: config.providerScheme)
        defer { spool.remove(request: request, kind: .identityToken) }
        try await (send ?? sendToProvider)(url)
        let answer: [UInt8]
        do {
            answer = try spool.read(request: request, digest: nil, kind: .identityToken)
        } catch DCError.Code.notReady {
            throw DCError(
                .notReady, "the provider did not answer the identity request", subject: config.providerScheme.text,
                remedy: .checkProviderPairing)
        }
        let token = try IdentityToken(parsing: String(decoding: answer, as: UTF8.self))
        guard fits(token) else {
            throw DCError(
                .refusedMessage,
                "the identity token in the spool is not the one asked for (another audience, scope or time)",
                subject: request.text, hint: "nothing was cached; ask again")
        }
        try AtomicFileSet.ensureDirectory(identityTokenDirectory)
        var files = AtomicFileSet(directory: identityTokenDirectory)
        try files.add(
            cacheName,
            .bytes(try AtRest.seal(SecretBytes(Array(token.compact.utf8)), key: key, context: "identity-token")),
            mode: 0o600)
        try files.commit(replacingExisting: true)
        return token
    }

    /// Removes identity JWTs the provider answered into the spool (`*.jwt`) that are at least
    /// `age` seconds old: answers nobody read.
    func removeIdentityAnswers(olderThan age: TimeInterval, now: Date = Date()) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: spool.directory)) ?? []
        for name in names where name.hasSuffix(".jwt") {
            let path = spool.directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            if now.timeIntervalSince1970 - TimeInterval(info.st_mtim.tv_sec) >= age { unlink(path) }
        }
    }
}
