import AuthTokens
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Answers the service's four paths; every other path is 404, every other method on them 405.
///
/// - `GET /verifyGDAuthToken`: the verification (``VerificationAnswer``).
/// - `GET` or `HEAD /health`: liveness, 200 while the process serves; the body is `ok` and the
///   trust's ``TrustStatus/summary`` (which says so when the service fails closed).
/// - `GET` or `HEAD /ready`: readiness, 200 only when the trust is loaded and fresh, else 503,
///   with the same body.
/// - `GET /.well-known/jwks.json`: the JWKS file, when one is configured.
///
/// Nothing here throws: Hummingbird turns a thrown error into a 500, and every failure has a
/// proper answer. Logs carry outcome codes, reasons and sizes, never a token or a challenge.
struct VerificationResponder: HTTPResponder {
    typealias Context = ServiceRequestContext

    let verifier: any TokenVerifying
    let jwks: WatchedFile?
    let now: @Sendable () -> Date
    let log: RequestLog
    let trust: @Sendable () -> TrustStatus

    func respond(to request: Request, context: ServiceRequestContext) async throws -> Response {
        let path = request.uri.path
        let route: Route
        switch path {
        case "/verifyGDAuthToken": route = .verify
        case "/health": route = .health
        case "/ready": route = .ready
        case "/.well-known/jwks.json": route = .jwks
        default:
            context.logger.debug("no such path", metadata: ["dc.status": "404"])
            return Response(status: .notFound)
        }
        let head = request.method == .head && route.answersHead
        guard request.method == .get || head else {
            context.logger.debug("method not allowed", metadata: ["dc.status": "405"])
            return Response(status: .methodNotAllowed, headers: [.allow: route.answersHead ? "GET, HEAD" : "GET"])
        }
        switch route {
        case .verify: return verify(request, context: context)
        case .health: return status(.ok, head: head)
        case .ready: return status(trust().isReady ? .ok : .serviceUnavailable, head: head)
        case .jwks: return serveJWKS()
        }
    }

    private enum Route {
        case verify, health, ready, jwks

        /// The probes answer HEAD too: a load balancer's health check often asks with it.
        var answersHead: Bool { self == .health || self == .ready }
    }

    /// A probe's answer: `ok` (liveness) or `ready`/`not ready`, then the trust's summary; a HEAD
    /// gets the same status and no body.
    private func status(_ status: HTTPResponse.Status, head: Bool) -> Response {
        guard !head else { return Response(status: status, headers: [.contentType: "text/plain"]) }
        let trust = trust()
        let text = "\(status == .ok ? "ok" : "not ready"): \(trust.summary)\n"
        return Response(
            status: status, headers: [.contentType: "text/plain", .cacheControl: "no-store"], body: body(text))
    }

    private func verify(_ request: Request, context: ServiceRequestContext) -> Response {
        let started = ContinuousClock.now
        let answer = VerificationAnswer(
            to: request.headers, verifier: verifier, now: now(), log: log,
            request: VerificationAnswer.RequestFacts(
                client: context.remoteAddress, path: request.uri.path, started: started))
        return Response(status: answer.status, headers: answer.headers)
    }

    private func serveJWKS() -> Response {
        guard let jwks else { return Response(status: .notFound) }
        let bytes = jwks.contents
        return Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "max-age=60"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    private func body(_ text: String) -> ResponseBody { .init(byteBuffer: ByteBuffer(string: text)) }
}

/// Hummingbird's request context, with the client's address for the access log.
struct ServiceRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The connection's peer.
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
