import AuthTokens
import Foundation
import HTTPTypes
import Logging

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

    /// Verifies the token in `request`'s `X-Good-GD-AuthToken` header with `verifier` at `now`,
    /// and records the outcome in `log`.
    init(to requestHeaders: HTTPFields, verifier: any TokenVerifying, now: Date, log: RequestLog) {
        let values = requestHeaders[values: .gdAuthToken]
        guard values.count == 1 else {
            log.record(
                .refused, "refused: the token header must appear once",
                metadata: ["dc.status": "400", "dc.count": "\(values.count)"])
            self.init(status: .badRequest, headers: [:])
            return
        }
        let token = values[0]
        guard token.utf8.count <= ServiceConfiguration.maximumTokenSize else {
            log.record(
                .refused, "refused: the token is too large",
                metadata: ["dc.status": "400", "dc.size": "\(token.utf8.count)"])
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
                metadata: [
                    "dc.code": "100", "dc.app": .string(identity.appID), "dc.container": .string(identity.containerID),
                ])
        case .failure(let failure):
            log.record(
                .verdict(failure.failure.rawValue), "not verified",
                metadata: ["dc.code": .string(String(failure.failure.rawValue)), "dc.reason": .string(failure.reason)])
        }
        self.init(status: .ok, headers: headers)
    }

    private init(status: HTTPResponse.Status, headers: HTTPFields) {
        self.status = status
        self.headers = headers
    }
}
