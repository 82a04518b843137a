import NIOCore
import NIOHTTPTypes

/// Closes the connection when one request, from its head to its end, takes longer than the
/// limit.
///
/// Hummingbird's idle timeout covers a client that dribbles the TLS handshake or the request
/// head (its timer runs from connecting, or from the last response, until a whole head arrives),
/// but every body chunk resets it, and the body is drained even after the answer went out: a
/// client that sends one body byte a second would hold its connection for ever. This handler
/// puts an absolute deadline on the rest of the request.
final class RequestDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let limit: TimeAmount
    private var timer: Scheduled<Void>?

    init(limit: TimeAmount) { self.limit = limit }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            timer?.cancel()
            // NIOIsolatedEventLoop.scheduleTask takes a closure that runs on this channel's loop.
            timer = context.eventLoop.assumeIsolated().scheduleTask(in: limit) {
                context.close(promise: nil)
            }
        case .end:
            timer?.cancel()
            timer = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }
}
