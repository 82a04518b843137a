import AuthTokens
import DerivedCredentials
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SystemSupport

/// The verification service: `GET /verifyGDAuthToken`, `GET`/`HEAD /health` and `/ready`, and
/// `GET /.well-known/jwks.json` over HTTP/1.1 (HTTPS with ``ServiceConfiguration/tls``), and
/// `GET /metrics` on a listener of its own (``ServiceConfiguration/metricsListen``), until
/// SIGTERM or SIGINT.
///
/// ```swift
/// let server = try VerificationServer(
///     configuration: ServiceConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:8080")),
///     verifier: verifier, logger: Logger(label: "dcverify"), onReload: { verifier.reloadRevocations() })
/// try await server.run()
/// ```
///
/// The service is stateless: it keeps nothing between requests but what the verifier keeps, so
/// several instances can serve behind one load balancer.
public struct VerificationServer: Sendable {
    /// How it listens and defends itself.
    public let configuration: ServiceConfiguration
    private let verifier: any TokenVerifying
    private let logger: Logger
    private let onReload: @Sendable () -> Void
    private let jwks: WatchedFile?
    private let tls: ServerTLS?
    private let now: @Sendable () -> Date
    private let trust: @Sendable () -> TrustStatus
    private let exposition: (@Sendable () -> [UInt8])?
    private let metrics: ServiceMetrics

    /// Checks `configuration` and reads what it names now (the TLS certificate and key, the JWKS
    /// file), so that a mistake stops the service before it listens. `onReload` runs on each
    /// SIGHUP, after the JWKS file is re-read; `now` is the verifier's clock; `trust` says where
    /// the verifier's trust stands (for `/health` and `/ready`); `exposition` gives the text
    /// `/metrics` answers (Prometheus' text format), asked at each scrape, and is needed when the
    /// configuration names a metrics listener. The service's own metrics go to the
    /// `MetricsSystem` bootstrapped before this call.
    public init(
        configuration: ServiceConfiguration,
        verifier: any TokenVerifying,
        logger: Logger,
        onReload: @escaping @Sendable () -> Void = {},
        now: @escaping @Sendable () -> Date = { Date() },
        trust: @escaping @Sendable () -> TrustStatus = { .localFiles },
        exposition: (@Sendable () -> [UInt8])? = nil
    ) throws {
        try configuration.validate()
        guard configuration.metricsListen == nil || exposition != nil else {
            throw DCError(.usage, "a metrics listener needs the metrics to expose")
        }
        self.trust = trust
        self.exposition = exposition
        metrics = ServiceMetrics()
        self.configuration = configuration
        self.verifier = verifier
        self.logger = logger
        self.onReload = onReload
        self.now = now
        jwks = try configuration.jwksFile.map { try WatchedFile.jwks(path: $0, logger: logger) }
        tls = try configuration.tls.map { try ServerTLS($0) }
    }

    /// Listens, writes the port file, and serves until SIGTERM or SIGINT; then stops accepting,
    /// lets the requests in flight finish (up to ``ServiceConfiguration/shutdownGracePeriod``)
    /// and returns. Throws when it cannot listen.
    public func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: configuration.threads)
        do {
            try await serve(on: group)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    private func serve(on eventLoopGroup: MultiThreadedEventLoopGroup) async throws {
        let limit = TimeAmount(configuration.requestTimeout)
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [RequestDeadlineHandler(limit: limit)],
            idleTimeout: limit,
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: configuration.maximumHeaderFieldSize,
                maxHeaderListSize: configuration.maximumHeaderListSize,
                maxHeaderFieldCount: configuration.maximumHeaderCount))
        let verifier = self.verifier
        let now = self.now
        let logger = self.logger
        let log = RequestLog(
            logger: logger, linesPerSecond: configuration.requestLogLinesPerSecond, metrics: metrics)
        let addresses = ConnectionsPerAddress(limit: configuration.maximumConnectionsPerAddress, metrics: metrics)
        let headTimeout = TimeAmount(configuration.headTimeout)
        let tls = self.tls
        // Every connection gets a ConnectionGuardHandler first (per-address limit, head timeout),
        // then TLS when configured, then HTTP/1. Verifications are answered on the event loop when
        // the verifier never waits; otherwise (a verifier that may block) every request goes
        // through Hummingbird's tasks.
        @Sendable func guarded<Base: ServerChildChannel>(_ base: Base) throws -> any ServerChildChannel
        where Base.Value == HTTP1Channel.Value {
            if let tls {
                return GuardedChildChannel(
                    base: try tls.channel(base), addresses: addresses, headTimeout: headTimeout,
                    log: log)
            }
            return GuardedChildChannel(base: base, addresses: addresses, headTimeout: headTimeout, log: log)
        }
        let server = HTTPServerBuilder { responder in
            let http1Channel = HTTP1Channel(responder: responder, configuration: http1)
            guard verifier.verifiesWithoutWaiting else { return try guarded(http1Channel) }
            return try guarded(
                FastPathHTTP1Channel(base: http1Channel) {
                    VerificationFastPath(verifier: verifier, now: now, log: log)
                })
        }
        let responder = VerificationResponder(verifier: verifier, jwks: jwks, now: now, log: log, trust: trust)
        let portFile = configuration.portFile
        let scheme = tls == nil ? "http" : "https"
        let application = Application(
            responder: responder,
            server: server,
            configuration: .init(
                address: .hostname(configuration.listen.host, port: configuration.listen.port),
                // A deep accept queue (the kernel caps it at net.core.somaxconn): under a flood of
                // connections (a slowloris from many sockets) a full queue drops new connections'
                // SYNs, and a well-behaved client then waits for its retransmission (1 s, then 3).
                // Queued connections are accepted quickly, and those over their address's limit
                // are closed at once.
                backlog: ServiceConfiguration.listenBacklog,
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.maximumConnections)),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                logger.notice("listening", metadata: ["dc.scheme": "\(scheme)", "dc.port": "\(port)"])
                if let portFile {
                    do {
                        try PortFile.write(port, to: portFile)
                    } catch {
                        logger.error("cannot write the port file", metadata: ["dc.error": "\(error)"])
                    }
                }
            },
            eventLoopGroupProvider: .shared(eventLoopGroup),
            logger: logger)
        let jwks = self.jwks
        let onReload = self.onReload
        let reloader = await SignalReloader {
            logger.notice("SIGHUP: reloading")
            jwks?.reload()
            onReload()
        }
        // Services stop in reverse order: the last summary follows the last request.
        let summaries = RequestLogSummaries(log: log, interval: configuration.logSummaryInterval)
        var services: [any Service] = [
            summaries, ListeningService(base: application, address: configuration.listen, listener: .service),
            reloader,
        ]
        if let listen = configuration.metricsListen, let exposition {
            services.append(
                ListeningService(
                    base: MetricsEndpoint.application(
                        listen: listen, requestTimeout: configuration.requestTimeout, exposition: exposition,
                        logger: logger),
                    address: listen, listener: .metrics))
        }
        var group = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        group.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        try await ServiceGroup(configuration: group).run()
        logger.notice("stopped")
    }
}

/// The bound port, written for whoever started the service (`--port-file`).
enum PortFile {
    /// Writes `port` and a newline to `path` atomically (a temporary file renamed over it).
    static func write(_ port: Int, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        var files = AtomicFileSet(directory: url.deletingLastPathComponent().path)
        try files.add(url.lastPathComponent, .bytes(Array("\(port)\n".utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
    }
}
