import AuthTokens
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Answers the service's three paths; every other path is 404, every other method on them 405.
///
/// Nothing here throws: Hummingbird turns a thrown error into a 500, and every failure has a
/// proper answer. Logs carry outcome codes, reasons and sizes, never a token or a challenge.
struct VerificationResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    let verifier: any TokenVerifying
    let jwks: WatchedFile?
    let now: @Sendable () -> Date
    let log: RequestLog

    func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        let path = request.uri.path
        let route: Route
        switch path {
        case "/verifyGDAuthToken": route = .verify
        case "/health": route = .health
        case "/.well-known/jwks.json": route = .jwks
        default:
            context.logger.debug("no such path", metadata: ["dc.status": "404"])
            return Response(status: .notFound)
        }
        guard request.method == .get else {
            context.logger.debug("method not allowed", metadata: ["dc.status": "405"])
            return Response(status: .methodNotAllowed, headers: [.allow: "GET"])
        }
        switch route {
        case .verify: return verify(request)
        case .health: return Response(status: .ok, headers: [.contentType: "text/plain"], body: body("ok\n"))
        case .jwks: return serveJWKS()
        }
    }

    private enum Route { case verify, health, jwks }

    private func verify(_ request: Request) -> Response {
        let answer = VerificationAnswer(to: request.headers, verifier: verifier, now: now(), log: log)
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
