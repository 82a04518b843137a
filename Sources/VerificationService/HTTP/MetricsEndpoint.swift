import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// `GET /metrics` on a listener of its own (``ServiceConfiguration/metricsListen``): the
/// Prometheus text exposition, away from the address app servers reach, so that what the service
/// counts is not published to every client. Every other path is 404.
enum MetricsEndpoint {
    /// The Prometheus text format's media type.
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The listener's application: answers `GET /metrics` with `exposition()`.
    static func application(
        listen: ListenAddress, exposition: @escaping @Sendable () -> [UInt8], logger: Logger
    ) -> some Service {
        let router = Router()
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: contentType, .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: exposition())))
        }
        return Application(
            router: router,
            configuration: .init(address: .hostname(listen.host, port: listen.port), serverName: nil),
            onServerRunning: { channel in
                logger.notice("metrics listening", metadata: ["dc.port": "\(channel.localAddress?.port ?? 0)"])
            },
            logger: logger)
    }
}
