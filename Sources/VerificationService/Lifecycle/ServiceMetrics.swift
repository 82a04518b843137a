import CoreMetrics

/// The service's metrics, through swift-metrics: whatever `MetricsSystem` the program bootstrapped
/// before it made the server (dcverify: Prometheus, served on its own listener) records them; with
/// none bootstrapped they cost nothing.
///
/// - `dcverify_verifications_total{code}`: answers by `X-Good-GD-AuthResponseCode` (100 to 103),
///   and `code="400"` for requests refused without a verdict;
/// - `dcverify_verification_duration_seconds`: how long each answer took (a histogram);
/// - `dcverify_connections_refused_total`, `dcverify_head_timeouts_total`: connections closed at
///   once for their address's limit, and cut for a slow request head;
/// - `dcverify_open_connections`: connections open now.
///
/// The trust's number, age and fetch errors are gauges the program sets when it is scraped, from
/// ``TrustStatus``: they change between scrapes without a request.
final class ServiceMetrics: Sendable {
    private let verdicts: [Int: CoreMetrics.Counter]
    private let refused: CoreMetrics.Counter
    private let headTimeouts: CoreMetrics.Counter
    private let refusedConnections: CoreMetrics.Counter
    private let duration: CoreMetrics.Timer
    /// Connections open now: a meter, whose increments and decrements the backend applies
    /// atomically (a gauge set from a count kept here could be set out of order by two threads).
    private let connections: CoreMetrics.Meter

    /// The metrics, made now from the bootstrapped `MetricsSystem`.
    init() {
        var verdicts: [Int: CoreMetrics.Counter] = [:]
        for code in 100...103 {
            verdicts[code] = Counter(label: "dcverify_verifications_total", dimensions: [("code", String(code))])
        }
        self.verdicts = verdicts
        refused = Counter(label: "dcverify_verifications_total", dimensions: [("code", "400")])
        headTimeouts = Counter(label: "dcverify_head_timeouts_total")
        refusedConnections = Counter(label: "dcverify_connections_refused_total")
        duration = Timer(label: "dcverify_verification_duration_seconds")
        connections = Meter(label: "dcverify_open_connections")
    }

    /// Counts `event`, and for a request the time since `started`.
    func record(_ event: RequestLog.Event, started: ContinuousClock.Instant?) {
        switch event {
        case .verdict(let code): verdicts[code]?.increment()
        case .refused: refused.increment()
        case .headTimeout: headTimeouts.increment()
        case .refusedConnection: refusedConnections.increment()
        }
        if let started { duration.recordNanoseconds((ContinuousClock.now - started).wholeNanoseconds) }
    }

    /// A connection opened (`delta` 1) or closed (-1).
    func connectionsChanged(by delta: Int) {
        if delta >= 0 { connections.increment(by: Double(delta)) } else { connections.decrement(by: Double(-delta)) }
    }
}

extension Duration {
    /// The duration in whole nanoseconds, rounded down.
    var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
