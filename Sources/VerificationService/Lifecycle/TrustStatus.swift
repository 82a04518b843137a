import Foundation

/// Where the service's trust (the issuing keys and the revocation list it verifies against)
/// stands: what `GET /health` says in its body, what `GET /ready` answers, and what `/metrics`
/// reports as the trust's number, age and fetch errors.
///
/// `/health` is liveness: 200 whenever the process serves, with ``summary`` as its body, so an
/// operator reads there that the service fails closed. `/ready` is readiness: 200 only when the
/// trust is loaded and fresh (``isReady``), else 503 with the same summary, so a load balancer
/// sends no traffic to an instance that would answer 101 to every token.
public struct TrustStatus: Sendable, Equatable {
    /// Whether the trust is loaded and within its staleness bound.
    public var isReady: Bool
    /// Whether every verification is answered 101 because the trust is past its staleness bound.
    public var isFailingClosed: Bool
    /// One line for people: where the trust came from, its number and age, and what is wrong.
    public var summary: String
    /// The revocation list's number, when it carries one.
    public var number: Int64?
    /// Seconds since the trust in force was issued (or, for a source that says when it was last
    /// confirmed, since then), when known.
    public var ageSeconds: Double?
    /// Fetches of the trust that failed since the service started.
    public var fetchErrors: Int

    /// A status with every field given.
    public init(
        isReady: Bool, isFailingClosed: Bool, summary: String, number: Int64? = nil, ageSeconds: Double? = nil,
        fetchErrors: Int = 0
    ) {
        self.isReady = isReady
        self.isFailingClosed = isFailingClosed
        self.summary = summary
        self.number = number
        self.ageSeconds = ageSeconds
        self.fetchErrors = fetchErrors
    }

    /// Trust read from local files, which the service re-reads when they change: ready as soon as
    /// it was read (the service does not start without it), never stale.
    public static let localFiles = TrustStatus(
        isReady: true, isFailingClosed: false, summary: "trust from local files")
}
