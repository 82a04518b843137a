import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// `GET /metrics` on a listener of its own (``ServiceConfiguration/metricsListen``): the
/// Prometheus text exposition, away from the address app servers reach, so that what the service
/// counts is not published to every client. Every other path is 404.
///
/// It defends itself as the service's listener does, at a scraper's scale: a request must come
/// whole within the service's request timeout (the same ``RequestDeadlineHandler``), an idle
/// connection is closed after it, and at most ``maximumConnections`` are served at once, so a
/// client that opens connections and sends nothing cannot use up the process's descriptors.
enum MetricsEndpoint {
    /// The Prometheus text format's media type.
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// Connections served at once; a scraper needs one or two.
    static let maximumConnections = 16

    /// The listener's application: answers `GET /metrics` with `exposition()`, each request
    /// within `requestTimeout`.
    static func application(
        listen: ListenAddress, requestTimeout: Duration, exposition: @escaping @Sendable () -> [UInt8], logger: Logger
    ) -> some Service {
        let limit = TimeAmount(requestTimeout)
        let router = Router()
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: contentType, .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: exposition())))
        }
        return Application(
            router: router,
            server: .http1(
                configuration: .init(
                    additionalChannelHandlers: [RequestDeadlineHandler(limit: limit)], idleTimeout: limit)),
            configuration: .init(
                address: .hostname(listen.host, port: listen.port), serverName: nil,
                availableConnectionsDelegate: MaximumAvailableConnections(maximumConnections)),
            onServerRunning: { channel in
                logger.notice("metrics listening", metadata: ["dc.port": "\(channel.localAddress?.port ?? 0)"])
            },
            logger: logger)
    }
}
