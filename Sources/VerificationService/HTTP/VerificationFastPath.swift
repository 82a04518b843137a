import AuthTokens
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// Answers `GET /verifyGDAuthToken` on the connection's event loop, and hands every other
/// request on to Hummingbird.
///
/// A verification is a few microseconds of parsing and one or two ECDSA verifications against
/// keys already in memory: no I/O, nothing to wait for. Hummingbird runs each request as a Swift
/// task on the global pool, which on a loaded core costs about as much as the verification
/// itself (the request hops from the event-loop thread to a pool thread and back). Answering here
/// saves that hop; what is answered is the same ``VerificationAnswer`` the Hummingbird route
/// gives.
///
/// The handler sits after Hummingbird's connection-state handler, so idle timeouts, graceful
/// shutdown and the request deadline see every request. It steps aside while a request it handed
/// on is still being answered (a pipelining client), so answers leave in the order the requests
/// came.
final class VerificationFastPath: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let verifier: any TokenVerifying
    private let now: @Sendable () -> Date
    private let log: RequestLog

    /// What happens to the parts of the request being read.
    private enum Reading {
        case betweenRequests
        /// A verification, answered at its end; its body (a GET has none) is dropped. `started`
        /// is when its head came.
        case verification(HTTPRequest, started: ContinuousClock.Instant)
        /// A request for Hummingbird.
        case handingOn
    }

    private var reading = Reading.betweenRequests
    /// Requests handed on whose answer has not been written to its end.
    private var handedOnUnanswered = 0
    private var date = HTTPDate()

    init(verifier: any TokenVerifying, now: @escaping @Sendable () -> Date, log: RequestLog) {
        self.verifier = verifier
        self.now = now
        self.log = log
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch (reading, part) {
        case (.betweenRequests, .head(let head)):
            if handedOnUnanswered == 0, head.method == .get, Self.isVerification(head.path) {
                reading = .verification(head, started: .now)
                return
            }
            reading = .handingOn
            handedOnUnanswered += 1
        case (.verification, .body):
            return
        case (.verification(let head, let started), .end):
            reading = .betweenRequests
            answer(head, started: started, context: context)
            return
        case (.handingOn, .end):
            reading = .betweenRequests
        default:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { handedOnUnanswered -= 1 }
        context.write(data, promise: promise)
    }

    private func answer(_ head: HTTPRequest, started: ContinuousClock.Instant, context: ChannelHandlerContext) {
        // The path is the verification's: isVerification let no other through (a query is not logged).
        let answer = VerificationAnswer(
            to: head.headerFields, verifier: verifier, now: now(), log: log,
            request: VerificationAnswer.RequestFacts(
                client: context.channel.remoteAddress, path: Self.verificationPath, started: started))
        var headers = answer.headers
        headers.append(HTTPField(name: .contentLength, value: "0"))
        headers.append(HTTPField(name: .date, value: date.now()))
        let closing = head.headerFields[.connection]?.lowercased() == "close"
        if closing { headers.append(HTTPField(name: .connection, value: "close")) }
        // The state handler before this one counts the answer's end as the request's.
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: headers))), promise: nil)
        if closing {
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        } else {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    /// The one path answered here.
    static let verificationPath = "/verifyGDAuthToken"

    /// The path without its query is exactly `/verifyGDAuthToken`, as Hummingbird's router sees it.
    private static func isVerification(_ path: String?) -> Bool {
        guard let path else { return false }
        let utf8 = path.utf8
        let end = utf8.firstIndex(of: UInt8(ascii: "?")) ?? utf8.endIndex
        return utf8[..<end].elementsEqual(verificationPath.utf8)
    }
}

/// The `Date` header's value (RFC 9110's IMF-fixdate), made again only when the second changes.
struct HTTPDate {
    private var second = 0
    private var text = ""

    mutating func now() -> String {
        let current = time(nil)
        if current != second || text.isEmpty {
            second = current
            var parts = tm()
            var seconds = current
            gmtime_r(&seconds, &parts)
            var buffer = [CChar](repeating: 0, count: 40)
            let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
            text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return text
    }
}

/// Hummingbird's HTTP/1 child channel with a ``VerificationFastPath`` after its connection-state
/// handler.
struct FastPathHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    let base: HTTP1Channel
    let makeFastPath: @Sendable () -> VerificationFastPath

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let operations = channel.pipeline.syncOperations
            let state = try operations.handler(type: HTTPConnectionStateHandler.self)
            try operations.addHandler(makeFastPath(), position: .after(state))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
