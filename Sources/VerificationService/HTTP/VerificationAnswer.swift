import AuthTokens
import Foundation
import HTTPTypes
import Logging
import NIOCore

/// The answer to one `GET /verifyGDAuthToken`: the one home of what the service says about a
/// token, used by both ways a request is served (``VerificationFastPath`` on the event loop, and
/// the Hummingbird route when the fast path steps aside).
///
/// Every answer is counted in the ``RequestLog``, which writes a sample of them at `info`; what
/// is written is the outcome code, the reason and the app and container of a genuine token, never
/// the token or its challenge.
struct VerificationAnswer {
    /// `200` for every verdict (the verdict is in ``VerificationHeaders/responseCode``); `400`
    /// when the request does not carry exactly one token of at most
    /// ``ServiceConfiguration/maximumTokenSize`` bytes.
    let status: HTTPResponse.Status
    /// The response code and, for a genuine token only, the identity headers.
    let headers: HTTPFields

    /// What the access log says of the request besides its outcome.
    struct RequestFacts {
        /// The connection's peer (nil for a Unix socket).
        var client: SocketAddress?
        /// The request's path, without its query.
        var path: String
        /// When the request began to be answered.
        var started: ContinuousClock.Instant

        /// The access log's fields: the client address, the path, the HTTP status and the time
        /// taken so far, in microseconds.
        func metadata(status: HTTPResponse.Status) -> Logger.Metadata {
            [
                "dc.client": .string(client?.ipAddress ?? "local"), "dc.path": .string(path),
                "dc.status": .string(String(status.code)),
                "dc.latency-us": .string(String((ContinuousClock.now - started).wholeMicroseconds)),
            ]
        }
    }

    /// Verifies the token in `request`'s `X-Good-GD-AuthToken` header with `verifier` at `now`,
    /// and records the outcome in `log` (and in the service's metrics).
    init(
        to requestHeaders: HTTPFields, verifier: any TokenVerifying, now: Date, log: RequestLog, request: RequestFacts
    ) {
        let values = requestHeaders[values: .gdAuthToken]
        guard values.count == 1 else {
            log.record(
                .refused, "refused: the token header must appear once",
                metadata: request.metadata(status: .badRequest).merging(["dc.count": "\(values.count)"]) { $1 },
                started: request.started)
            self.init(status: .badRequest, headers: [:])
            return
        }
        let token = values[0]
        guard token.utf8.count <= ServiceConfiguration.maximumTokenSize else {
            log.record(
                .refused, "refused: the token is too large",
                metadata: request.metadata(status: .badRequest).merging(["dc.size": "\(token.utf8.count)"]) { $1 },
                started: request.started)
            self.init(status: .badRequest, headers: [:])
            return
        }
        let verdict = verifier.verify(token, now: now)
        // Appended, not set by subscript: a set looks for earlier fields of the same name first.
        var headers = HTTPFields()
        headers.reserveCapacity(10)
        headers.append(HTTPField(name: .gdResponseCode, value: verdict.responseCode))
        switch verdict.outcome {
        case .success(let identity):
            for header in VerificationHeaders.identityFields {
                headers.append(HTTPField(name: header.field, value: header.value(identity)))
            }
            log.record(
                .verdict(100), "verified",
                metadata: request.metadata(status: .ok).merging([
                    "dc.code": "100", "dc.app": .string(identity.appID), "dc.container": .string(identity.containerID),
                ]) { $1 }, started: request.started)
        case .failure(let failure):
            log.record(
                .verdict(failure.failure.rawValue), "not verified",
                metadata: request.metadata(status: .ok).merging([
                    "dc.code": .string(String(failure.failure.rawValue)), "dc.reason": .string(failure.reason),
                ]) { $1 }, started: request.started)
        }
        self.init(status: .ok, headers: headers)
    }

    private init(status: HTTPResponse.Status, headers: HTTPFields) {
        self.status = status
        self.headers = headers
    }
}

extension Duration {
    /// The duration in whole microseconds, rounded down.
    var wholeMicroseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }
}
