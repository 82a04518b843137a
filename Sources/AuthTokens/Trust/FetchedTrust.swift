import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import Synchronization

/// How fresh a fetched trust list is, as a service reports it (`/ready`, `/health`, metrics):
/// a value read at one instant, safe to hand to any thread.
public struct TrustFreshness: Sendable, Equatable {
    /// Whether a list was ever accepted.
    public var loaded: Bool
    /// The number of the list in force.
    public var number: Int64?
    /// When the provider signed the list in force.
    public var issued: Date?
    /// When the provider promised a newer list at the latest (the list's `nextUpdate`).
    public var nextUpdate: Date?
    /// When the source last confirmed the list in force (a 200 with it or a newer one, or a 304).
    public var fetched: Date?
    /// Seconds since ``fetched`` at the instant this value was read.
    public var age: TimeInterval?
    /// Whether the list is past the staleness bound: every token is then refused (101).
    public var isStale: Bool
    /// Why the list is stale, when it is: never loaded, not confirmed for too long, or past its next update.
    public var staleReason: String?
    /// Why the last fetch failed or its document was refused, while the list in force stays; nil
    /// once a fetch succeeds.
    public var lastError: String?
    /// Fetches that failed or brought a refused document, since the trust was made.
    public var failures: Int = 0
}

/// The trust of a verifier that fetches it (``SignedTrustList``): the list in force, accepted only
/// when signed by the one trusted key and numbered above the one in force, and how fresh it is.
///
/// The fetcher hands it what the source answered (``offer(_:at:)``, ``confirm(at:)``,
/// ``failed(_:at:)``); the verifier reads ``issuers(at:)`` and ``revocations`` on every call,
/// which do no I/O. A refused document or a failed fetch keeps the list in force. Past the
/// staleness bound — ``maximumAge`` since the source last confirmed the list, or ``maximumAge``
/// after the list's own next update — ``issuers(at:)`` is empty, so every token answers 101
/// Invalid Token (fail closed) until a fresh list arrives, and ``freshness(at:)`` says so.
public final class FetchedTrust: Sendable {
    /// The key that must sign every list.
    public let key: TokenPublicKey
    /// The staleness bound.
    public let maximumAge: Duration

    private struct State {
        var list: SignedTrustList?
        var fetched: Date?
        var lastError: String?
        var failures = 0
    }
    private let state = Mutex(State())

    /// Trusts lists signed by `key`, stale `maximumAge` after the source last confirmed one.
    public init(key: TokenPublicKey, maximumAge: Duration) {
        self.key = key
        self.maximumAge = maximumAge
    }

    /// What happened to an offered document.
    public enum Outcome: Sendable, Equatable {
        /// It is the new list in force.
        case accepted(number: Int64)
        /// It is the list in force, confirmed.
        case unchanged(number: Int64)
    }

    /// Verifies `bytes` and makes it the list in force when its number is above the one in force;
    /// the same document again confirms it. Throws (keeping the list in force, and remembering why)
    /// for a document that is malformed, signed by another key, numbered below the one in force,
    /// or numbered the same with other contents.
    @discardableResult
    public func offer(_ bytes: [UInt8], at now: Date = Date()) throws -> Outcome {
        do {
            let list = try SignedTrustList(verifying: bytes, with: key)
            return try state.withLock { (state: inout State) throws -> Outcome in
                if let current = state.list {
                    guard list.number >= current.number else {
                        throw DCError(
                            .invalid,
                            "not a trust list to accept: number \(list.number) is below \(current.number), the one in force"
                        )
                    }
                    if list.number == current.number {
                        guard list.compact == current.compact else {
                            throw DCError(
                                .invalid,
                                "not a trust list to accept: number \(list.number) is in force with other contents")
                        }
                        (state.fetched, state.lastError) = (now, nil)
                        return .unchanged(number: list.number)
                    }
                }
                (state.list, state.fetched, state.lastError) = (list, now, nil)
                return .accepted(number: list.number)
            }
        } catch {
            let reported = error as? DCError ?? DCError(.invalid, "\(error)")
            state.withLock {
                $0.lastError = reported.message
                $0.failures += 1
            }
            throw reported
        }
    }

    /// The source answered that the list in force is still current (HTTP 304).
    public func confirm(at now: Date = Date()) {
        state.withLock {
            guard $0.list != nil else { return }
            ($0.fetched, $0.lastError) = (now, nil)
        }
    }

    /// A fetch failed (`reason` says why, without secrets); the list in force stays.
    public func failed(_ reason: String, at now: Date = Date()) {
        state.withLock {
            $0.lastError = reason
            $0.failures += 1
        }
    }

    /// The number of the list in force, if any.
    public var number: Int64? { state.withLock { $0.list?.number } }

    /// The trusted issuing keys at `now`: none while no fresh list is in force (every token is then 101).
    public func issuers(at now: Date = Date()) -> TrustedIssuers {
        state.withLock { Self.staleReason($0, now: now, maximumAge: maximumAge) == nil ? $0.list?.issuers : nil }
            ?? .empty
    }

    /// The revocation list in force (empty before the first list).
    public var revocations: RevocationList { state.withLock { $0.list?.revocations ?? .empty } }

    /// How fresh the list in force is at `now`.
    public func freshness(at now: Date = Date()) -> TrustFreshness {
        state.withLock { state in
            let reason = Self.staleReason(state, now: now, maximumAge: maximumAge)
            return TrustFreshness(
                loaded: state.list != nil, number: state.list?.number,
                issued: state.list.map { Date(timeIntervalSince1970: TimeInterval($0.issued)) },
                nextUpdate: state.list.map { Date(timeIntervalSince1970: TimeInterval($0.nextUpdate)) },
                fetched: state.fetched, age: state.fetched.map { now.timeIntervalSince($0) }, isStale: reason != nil,
                staleReason: reason, lastError: state.lastError, failures: state.failures)
        }
    }

    /// Why `state` is stale at `now`, or nil while it is fresh.
    private static func staleReason(_ state: State, now: Date, maximumAge: Duration) -> String? {
        guard let list = state.list, let fetched = state.fetched else { return "no trust list was ever accepted" }
        let bound = Double(maximumAge.components.seconds) + Double(maximumAge.components.attoseconds) / 1e18
        if now.timeIntervalSince(fetched) > bound {
            return "the source has not confirmed the trust list for more than \(maximumAge)"
        }
        if now.timeIntervalSince1970 > TimeInterval(list.nextUpdate) + bound {
            return "the trust list is past its next update by more than \(maximumAge)"
        }
        return nil
    }
}
