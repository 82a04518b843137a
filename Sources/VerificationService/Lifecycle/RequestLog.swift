import Logging
import ServiceLifecycle
import Synchronization

/// The service's per-request log: every request is counted exactly, but at most
/// ``ServiceConfiguration/requestLogLinesPerSecond`` lines a second are written at `info`; the
/// counts go out in a summary line every ``ServiceConfiguration/logSummaryInterval`` and once more
/// when the service stops.
///
/// A service under load would otherwise write a line per request (tens of megabytes a minute): a
/// flood that fills disks and buries what matters. Lines at `warning` and above never pass
/// through here and are never limited; at `debug` and below (`--log-level debug`) every request
/// is logged. Nothing logged here carries a token or a challenge: callers give outcome codes,
/// reasons and identifiers only.
final class RequestLog: Sendable {
    /// What a summary counts.
    enum Event: Hashable, Sendable, CaseIterable {
        /// A verification answered 200 with this `X-Good-GD-AuthResponseCode` (100 to 103).
        case verdict(Int)
        /// A verification refused with 400 (no token, two tokens, a token too large).
        case refused
        /// A connection cut because its request head did not come within the head timeout.
        case headTimeout
        /// A connection closed at once because its address had its limit of connections open.
        case refusedConnection

        static let allCases: [Event] = [
            .verdict(100), .verdict(101), .verdict(102), .verdict(103), .refused, .headTimeout, .refusedConnection,
        ]

        /// The summary's metadata key.
        var key: String {
            switch self {
            case .verdict(let code): "dc.code.\(code)"
            case .refused: "dc.refused"
            case .headTimeout: "dc.head-timeouts"
            case .refusedConnection: "dc.refused-connections"
            }
        }
    }

    private struct State {
        var counts: [Event: Int] = [:]
        /// Per-request lines written in the current second, and lines not written since the last
        /// summary.
        var second: Int64 = 0
        var linesThisSecond = 0
        var unlogged = 0
    }

    /// The logger every line goes to.
    let logger: Logger
    private let linesPerSecond: Int
    private let state = Mutex(State())
    private let clock = ContinuousClock()
    private let start: ContinuousClock.Instant

    /// The metrics every event is counted in too.
    let metrics: ServiceMetrics

    /// A log writing to `logger`, at most `linesPerSecond` per-request lines a second, counting
    /// every event in `metrics` as well.
    init(logger: Logger, linesPerSecond: Int, metrics: ServiceMetrics = ServiceMetrics()) {
        self.logger = logger
        self.metrics = metrics
        self.linesPerSecond = linesPerSecond
        start = clock.now
    }

    /// Counts `event` (with the time since `started` in the metrics) and, when this second's
    /// budget allows (or the logger is at `debug` or below), writes `message` with `metadata` at
    /// `info`.
    func record(
        _ event: Event, _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata,
        started: ContinuousClock.Instant
    ) {
        metrics.record(event, started: started)
        let everything = logger.logLevel <= .debug
        let second = (clock.now - start).components.seconds
        let write = state.withLock { state -> Bool in
            state.counts[event, default: 0] += 1
            if everything { return true }
            if state.second != second {
                state.second = second
                state.linesThisSecond = 0
            }
            guard state.linesThisSecond < linesPerSecond else {
                state.unlogged += 1
                return false
            }
            state.linesThisSecond += 1
            return true
        }
        if write { logger.info(message(), metadata: metadata()) }
    }

    /// Counts `event` without a line of its own (connections cut or refused).
    func count(_ event: Event) {
        metrics.record(event, started: nil)
        state.withLock { $0.counts[event, default: 0] += 1 }
    }

    /// Writes one `summary` line with the counts since the last one (nothing when nothing
    /// happened), and starts counting again.
    func summarize() {
        let (counts, unlogged) = state.withLock { state in
            defer {
                state.counts = [:]
                state.unlogged = 0
            }
            return (state.counts, state.unlogged)
        }
        guard !counts.isEmpty else { return }
        var metadata: Logger.Metadata = ["dc.unlogged": "\(unlogged)"]
        var requests = 0
        for event in Event.allCases + counts.keys.filter({ !Event.allCases.contains($0) }) {
            let count = counts[event, default: 0]
            metadata[event.key] = "\(count)"
            if case .verdict = event { requests += count }
            if case .refused = event { requests += count }
        }
        metadata["dc.requests"] = "\(requests)"
        logger.info("summary", metadata: metadata)
    }
}

/// Writes the ``RequestLog``'s summary every interval, and a last one at graceful shutdown. Put it
/// first in the service group, so that it stops after the server (and its last requests).
struct RequestLogSummaries: Service {
    let log: RequestLog
    let interval: Duration

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                log.summarize()
            }
        }
        log.summarize()
    }
}
