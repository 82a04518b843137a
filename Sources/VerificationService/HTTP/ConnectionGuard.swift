import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The open connections of each client address, shared by every event loop of one server, so that
/// one address cannot take the whole connection pool (``ServiceConfiguration/maximumConnectionsPerAddress``).
///
/// An IPv4 address counts alone; an IPv6 address counts with its /64 (one host is usually given a
/// whole /64, so counting single IPv6 addresses would limit nothing); an IPv4-mapped IPv6 address
/// counts as its IPv4 address.
final class ConnectionsPerAddress: Sendable {
    /// The most connections one address may have open at once.
    let limit: Int
    private let counts = Mutex<[Key: Int]>([:])

    /// What connections are counted by: an IPv4 address, an IPv6 /64, or (a Unix socket) one key.
    struct Key: Hashable {
        var high: UInt64
        var low: UInt64

        init(_ address: SocketAddress?) {
            switch address {
            case .v4(let v4)?:
                self.init(high: 0, low: UInt64(UInt32(bigEndian: v4.address.sin_addr.s_addr)))
            case .v6(let v6)?:
                var raw = v6.address.sin6_addr
                let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
                if mapped {
                    self.init(high: 0, low: bytes[12..<16].reduce(0) { $0 << 8 | UInt64($1) })
                } else {
                    self.init(high: bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }, low: .max)
                }
            default:
                self.init(high: .max, low: .max)
            }
        }

        private init(high: UInt64, low: UInt64) {
            self.high = high
            self.low = low
        }
    }

    /// Where the connections open now are reported.
    private let metrics: ServiceMetrics?

    init(limit: Int, metrics: ServiceMetrics? = nil) {
        self.limit = limit
        self.metrics = metrics
    }

    /// Counts a new connection from `key`; false (and not counted) when `key` is at the limit.
    func open(_ key: Key) -> Bool {
        let opened = counts.withLock { counts in
            let open = counts[key, default: 0]
            guard open < limit else { return false }
            counts[key] = open + 1
            return true
        }
        if opened { metrics?.connectionsChanged(by: 1) }
        return opened
    }

    /// Uncounts a connection ``open(_:)`` counted.
    func close(_ key: Key) {
        metrics?.connectionsChanged(by: -1)
        counts.withLock { counts in
            let open = counts[key, default: 1] - 1
            counts[key] = open > 0 ? open : nil
        }
    }

    /// The connections open now, all addresses together (for tests and the summary).
    var total: Int { counts.withLock { $0.values.reduce(0, +) } }
}

/// The first handler of every accepted connection, before TLS: closes one that has not delivered
/// a whole request head within the head timeout, and uncounts the connection from its address
/// when it closes.
///
/// The head timer runs from connecting (so it covers the TLS handshake) to the first request's
/// head, and, on a kept-alive connection, from the first byte after an answer to the next head. A
/// kept-alive connection that sends nothing is left to the idle timeout
/// (``ServiceConfiguration/requestTimeout``): a reverse proxy keeps its connections open between
/// requests, and sends each request whole.
///
/// This is decided per connection, before any request is parsed: a client that is cut off costs
/// no task, no request, no log line (the summary counts it).
final class ConnectionGuardHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let addresses: ConnectionsPerAddress
    private let headTimeout: TimeAmount
    private let log: RequestLog
    /// The address this connection is counted under, until it closes.
    private var key: ConnectionsPerAddress.Key?
    private var timer: Scheduled<Void>?
    /// Whether the first head timer has been started.
    private var started = false
    /// Requests whose head has come and whose answer has not been written to its end.
    private var unanswered = 0
    /// Bytes came, while no request was open, in the read being delivered now.
    private var bytesWithoutHead = false

    /// A guard for a connection already counted under `key`.
    init(key: ConnectionsPerAddress.Key, addresses: ConnectionsPerAddress, headTimeout: TimeAmount, log: RequestLog) {
        self.key = key
        self.addresses = addresses
        self.headTimeout = headTimeout
        self.log = log
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Added to a connection that is already active: channelActive will not come.
        if context.channel.isActive { start(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        start(context: context)
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        startTimer(context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimer()
        if let key {
            addresses.close(key)
            self.key = nil
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if unanswered == 0 && timer == nil { bytesWithoutHead = true }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // By now the handlers after this one (TLS, the HTTP decoder) have seen the read: a head
        // that came in it has called headArrived().
        context.fireChannelReadComplete()
        if bytesWithoutHead && unanswered == 0 && timer == nil && started { startTimer(context: context) }
        bytesWithoutHead = false
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
        if let key {
            addresses.close(key)
            self.key = nil
        }
    }

    /// A request head has come (from ``RequestHeadWatcher``).
    func headArrived() {
        cancelTimer()
        bytesWithoutHead = false
        unanswered += 1
    }

    /// An answer has been written to its end (from ``RequestHeadWatcher``).
    func answered() {
        unanswered = max(0, unanswered - 1)
    }

    private func startTimer(context: ChannelHandlerContext) {
        let log = self.log
        // NIOIsolatedEventLoop.scheduleTask takes a closure that runs on this channel's loop.
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: headTimeout) {
            log.count(.headTimeout)
            context.close(promise: nil)
        }
    }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}

/// Sits after Hummingbird's connection-state handler and tells the ``ConnectionGuardHandler`` of
/// its connection when a request head has been decoded and when an answer has ended.
final class RequestHeadWatcher: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let guardHandler: ConnectionGuardHandler

    init(_ guardHandler: ConnectionGuardHandler) { self.guardHandler = guardHandler }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) { guardHandler.headArrived() }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { guardHandler.answered() }
        context.write(data, promise: promise)
    }
}

/// Closes its connection as soon as it is active: the whole pipeline of a connection refused for
/// its address's limit.
final class CloseWhenActive: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { context.close(promise: nil) }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.close(promise: nil)
    }
}

/// A child channel (HTTP/1, with or without TLS) that counts each connection against its
/// address: one over ``ConnectionsPerAddress/limit`` gets no TLS or HTTP handlers at all, only a
/// ``CloseWhenActive`` (so a flood of refused connections costs little), and one within it gets
/// a ``ConnectionGuardHandler`` first in its pipeline and its ``RequestHeadWatcher`` after the
/// connection-state handler.
struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel
where Base.Value == NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart> {
    typealias Value = Base.Value

    let base: Base
    let addresses: ConnectionsPerAddress
    let headTimeout: TimeAmount
    let log: RequestLog

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let key = ConnectionsPerAddress.Key(channel.remoteAddress)
        guard addresses.open(key) else {
            log.count(.refusedConnection)
            // Failing the setup instead would end the server's accept loop (NIO reports a child
            // channel's failed setup to the server channel): the connection is set up, to close.
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(CloseWhenActive())
                return try Value(wrappingChannelSynchronously: channel)
            }
        }
        let setUp = base.setup(channel: channel, logger: logger).flatMapThrowing {
            [addresses, headTimeout, log] value in
            let operations = channel.pipeline.syncOperations
            let state = try operations.handler(type: HTTPConnectionStateHandler.self)
            let guardHandler = ConnectionGuardHandler(
                key: key, addresses: addresses, headTimeout: headTimeout, log: log)
            try operations.addHandler(RequestHeadWatcher(guardHandler), position: .after(state))
            // Added last: from here on, the guard uncounts the connection when it closes.
            try operations.addHandler(guardHandler, position: .first)
            return value
        }
        setUp.whenFailure { [addresses] _ in addresses.close(key) }
        return setUp
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
