import CredentialCoding
import DerivedCredentials
import Dispatch
import FoundationEssentials
import Synchronization

/// Judges auth tokens with public keys and a revocation list only: what the verification service
/// runs for every request. It keeps no state that changes a verdict, so any number of instances
/// can serve behind a load balancer, and verifying a token does not consume it.
///
/// ``verify(_:now:)`` checks, in this order, and answers the first failure:
///
/// 1. The token parses strictly within its size caps (``AuthToken``, ``Delegation``,
///    ``AuthTokenClaims``, ``CompactJWS``): otherwise **101 Invalid Token**.
/// 2. The delegation's `kid` is a trusted issuing key (**101**) and not revoked (**103 Revoked**).
/// 3. The delegation's signature verifies under that key (**101**), and `nbf ≤ now + skew` and
///    `now < exp` (**102 Expired Token**).
/// 4. Its `jti` is not revoked and its (`app`, `ctr`) not retired (**103**).
/// 5. The token's signature verifies under the delegation's `cnf.jwk`, its `dlg` is the
///    delegation's `jti`, and it expires no later than the delegation (**101**).
/// 6. Its `iat ≤ now + skew` and `now < exp` (**102**).
///
/// A genuine token gives `100 OK` and the identity: challenge, server name, user, app, container,
/// version and creation time.
///
/// A signature verifies only in its low-S form (`ES256Signature` in CredentialCoding, checked by
/// `TokenPublicKey` for every ES256 signature the project verifies), so the high-S twin
/// `(r, n − s)` of a genuine delegation or token, which other ES256 verifiers accept, is **101**:
/// a token has one encoding.
///
/// Delegations whose signature verified are kept in a bounded cache keyed by the SHA-256 of
/// their text, so a client's second token costs one ECDSA verification instead of two; the key
/// trust, revocation and time checks still run on every call, against the current
/// ``TrustedIssuers`` and ``RevocationList``. Thread-safe; `Sendable`.
public struct AuthTokenVerifier: TokenVerifying {
    /// How lenient and how large the verifier is.
    public struct Options: Sendable {
        /// How far ahead of the verifier's clock a token's `iat` (and a delegation's `nbf`) may be,
        /// in seconds: the clocks of the provider, the client and the service differ a little.
        public var clockSkew: Int64
        /// How many verified delegations the cache holds at most (0 turns it off).
        public var cacheCapacity: Int

        /// A minute of skew and ten thousand delegations (about 60 MB: some 6 KB each, measured with
        /// the OpenSSL key each one holds).
        public init(clockSkew: Int64 = 60, cacheCapacity: Int = 10_000) {
            self.clockSkew = clockSkew
            self.cacheCapacity = cacheCapacity
        }
    }

    private let issuers: @Sendable () -> TrustedIssuers
    private let revocations: @Sendable () -> RevocationList
    private let options: Options
    private let cache: DelegationCache

    /// A verifier that asks `issuers` and `revocations` for the current trust on every call, so a
    /// reloaded file takes effect at once (they must be cheap and thread-safe).
    public init(
        issuers: @escaping @Sendable () -> TrustedIssuers, revocations: @escaping @Sendable () -> RevocationList,
        options: Options = Options()
    ) {
        self.issuers = issuers
        self.revocations = revocations
        self.options = options
        self.cache = DelegationCache(capacity: options.cacheCapacity)
    }

    /// A verifier with fixed trust.
    public init(issuers: TrustedIssuers, revocations: RevocationList, options: Options = Options()) {
        self.init(issuers: { issuers }, revocations: { revocations }, options: options)
    }

    /// A verifier whose trust comes from files that are read again when they change (see ``Reloading``).
    public init(
        issuers: Reloading<TrustedIssuers>, revocations: Reloading<RevocationList>, options: Options = Options()
    ) {
        self.init(issuers: { issuers.value }, revocations: { revocations.value }, options: options)
    }

    /// The verdict on `token` at `now`; the same token at the same time with the same trust always
    /// gets the same verdict. The failure reasons name a rule, never a token or key.
    public func verify(_ token: String, now: Date) -> TokenVerdict {
        TokenVerdict(check(token, now: Int64(now.timeIntervalSince1970.rounded(.down))))
    }

    /// True: a verification is parsing and one or two ECDSA checks against keys in memory. The
    /// trust it asks for must be as cheap (a ``Reloading`` value is read under a lock; its file is
    /// looked at and read again on a thread of its own).
    public var verifiesWithoutWaiting: Bool { true }

    private func check(_ token: String, now: Int64) -> Result<TokenVerdict.Identity, TokenVerdict.FailureReason> {
        func fail(_ failure: TokenVerdict.Failure, _ reason: String) -> Result<
            TokenVerdict.Identity, TokenVerdict.FailureReason
        > {
            .failure(TokenVerdict.FailureReason(failure, reason))
        }
        // 1. Strict parsing within the size caps.
        guard token.utf8.count <= AuthToken.maximumLength else {
            return fail(.invalid, "longer than \(AuthToken.maximumLength) bytes")
        }
        let bytes = Array(token.utf8)
        let delegation: Delegation
        let cached: Bool
        let tokenJWS: CompactJWS
        let claims: AuthTokenClaims
        let key: DelegationCache.Key
        do throws(FormatError) {
            let (delegationPart, tokenPart) = try AuthToken.split(bytes)
            key = delegationPart.withUnsafeBytes { DelegationCache.Key(Digests.sha256($0)) }
            if let hit = cache.lookup(key) {
                (delegation, cached) = (hit, true)
            } else {
                (delegation, cached) = (try Delegation(bytes: delegationPart), false)
            }
            tokenJWS = try CompactJWS(bytes: tokenPart, type: AuthTokenClaims.type, keyed: false)
            claims = try AuthTokenClaims(json: tokenJWS.payload)
        } catch {
            return fail(.invalid, "malformed: \(error.description)")
        }
        let dlg = delegation.claims

        // 2. A trusted issuing key that is not revoked.
        guard let issuerKey = issuers().key(for: delegation.keyID) else {
            return fail(.invalid, "the issuing key is not trusted")
        }
        let revocations = self.revocations()
        guard !revocations.revokedIssuerKeys.contains(delegation.keyID) else {
            return fail(.revoked, "the issuing key is revoked")
        }

        // 3. The delegation's signature, then its validity period.
        if !cached {
            guard delegation.jws.isSigned(by: issuerKey) else {
                return fail(.invalid, "the delegation's signature does not verify")
            }
            cache.insert(key, delegation)
        }
        guard dlg.notBefore <= now + options.clockSkew else { return fail(.expired, "the delegation is not valid yet") }
        guard now < dlg.expires else { return fail(.expired, "the delegation has expired") }

        // 4. Revoked delegation, retired container.
        guard !revocations.revokedDelegations.contains(dlg.id) else {
            return fail(.revoked, "the delegation is revoked")
        }
        guard !revocations.isRetired(appID: dlg.appID, containerID: dlg.containerID) else {
            return fail(.revoked, "the container is retired")
        }

        // 5. The token's signature under the delegated key, and its binding to the delegation.
        guard tokenJWS.isSigned(by: dlg.tokenKey) else {
            return fail(.invalid, "the token's signature does not verify under the delegated key")
        }
        guard claims.delegationID == dlg.id else { return fail(.invalid, "the token names another delegation") }
        guard claims.expires <= dlg.expires else { return fail(.invalid, "the token outlives its delegation") }

        // 6. The token's validity period.
        guard claims.issuedAt <= now + options.clockSkew else { return fail(.expired, "the token is from the future") }
        guard now < claims.expires else { return fail(.expired, "the token has expired") }

        return .success(
            TokenVerdict.Identity(
                challenge: claims.challenge, serverName: claims.serverName, userID: dlg.userID, appID: dlg.appID,
                containerID: dlg.containerID, version: claims.version, creationTime: claims.issuedAt))
    }
}

/// Delegations whose signature verified, by the SHA-256 of their text; bounded.
///
/// Two generations approximate least-recently-used eviction in O(1): entries go into `recent`; a
/// hit in `older` moves the entry back to `recent`; when `recent` holds half the capacity, it
/// becomes `older` and the previous `older` is dropped. So at most `capacity` entries are kept,
/// and an entry used at least once per generation stays.
final class DelegationCache: @unchecked Sendable {
    // `recent` and `older` are in `generations`, a `Mutex`; `half` never changes.
    struct Key: Hashable {
        var words: (UInt64, UInt64, UInt64, UInt64)

        init(_ digest: [UInt8]) {
            precondition(digest.count == 32)
            words = digest.withUnsafeBytes {
                (
                    $0.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
                    $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                    $0.loadUnaligned(fromByteOffset: 16, as: UInt64.self),
                    $0.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
                )
            }
        }

        static func == (lhs: Key, rhs: Key) -> Bool { lhs.words == rhs.words }

        func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }

    private let half: Int
    private let generations = Mutex(Generations())

    /// The two generations, behind the cache's `Mutex`.
    private struct Generations {
        var recent: [Key: Delegation] = [:]
        var older: [Key: Delegation] = [:]

        /// Stores `delegation`, starting a new generation when `recent` holds `half` already;
        /// returns the generation dropped, if any, to be freed outside the lock.
        mutating func store(_ key: Key, _ delegation: Delegation, half: Int) -> [Key: Delegation] {
            var dropped: [Key: Delegation] = [:]
            if recent.count >= half, recent[key] == nil {
                dropped = older
                older = recent
                recent = [:]
            }
            recent[key] = delegation
            return dropped
        }
    }

    init(capacity: Int) { half = max(0, capacity / 2) }

    /// How many delegations are held.
    var count: Int { generations.withLock { $0.recent.count + $0.older.count } }

    func lookup(_ key: Key) -> Delegation? {
        guard half > 0 else { return nil }
        var dropped: [Key: Delegation] = [:]
        defer { Self.reclaim(dropped) }
        return generations.withLock { generations -> Delegation? in
            if let hit = generations.recent[key] { return hit }
            guard let hit = generations.older.removeValue(forKey: key) else { return nil }
            dropped = generations.store(key, hit, half: half)
            return hit
        }
    }

    func insert(_ key: Key, _ delegation: Delegation) {
        guard half > 0 else { return }
        let dropped = generations.withLock { $0.store(key, delegation, half: half) }
        Self.reclaim(dropped)
    }

    /// Where a dropped generation is freed: thousands of OpenSSL keys take tens of milliseconds to
    /// free (measured: about 50 ms for 5 000), which must not be spent by the request that
    /// happened to fill the cache.
    private static let reclaimer = DispatchQueue(label: "derived-credentials.delegation-cache.reclaim", qos: .utility)

    private static func reclaim(_ dropped: consuming [Key: Delegation]) {
        guard !dropped.isEmpty else { return }
        // The block holds the last reference (this function's ends when it returns, before a
        // worker thread picks the block up), so the freeing happens on the reclaimer's thread.
        let generation = dropped
        reclaimer.async { _ = generation.count }
    }
}
