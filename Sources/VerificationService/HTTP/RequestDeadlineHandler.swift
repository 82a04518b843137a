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
///
/// A request that arrives whole in one read (every verification: a GET has no body) needs no
/// timer; one is set only when a read ends with a request still open, for what is left of the
/// limit.
final class RequestDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let limit: TimeAmount
    /// When the head of the request still being read arrived; nil between requests.
    private var openSince: NIODeadline?
    private var timer: Scheduled<Void>?

    init(limit: TimeAmount) { self.limit = limit }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            cancelTimer()
            openSince = .now()
        case .end:
            cancelTimer()
            openSince = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if let openSince, timer == nil {
            // NIOIsolatedEventLoop.scheduleTask takes a closure that runs on this channel's loop.
            timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: openSince + limit) {
                context.close(promise: nil)
            }
        }
        context.fireChannelReadComplete()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
    }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}
