import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import IdentityTokens
import SystemSupport

/// Identity JWTs: a paired, authorized client asks (`<provider-scheme>:/jwt?…`, signed with its
/// pinned key), and the provider answers with an ``IdentityToken`` signed with its identity key,
/// written to the client's spool as `<request>.jwt` for the client process that is waiting for
/// the handler to finish.
extension CredentialService {
    /// Handles a client's signed identity request: authenticates it (``authenticate(_:now:)``:
    /// paired, its key, within the time limit), refuses a replay (a request id answered
    /// before) and a client that is not authorized, signs the JWT for the user
    /// named at pairing, and writes it to the client's spool. Returns the token. The request id is
    /// recorded first and stays, as replay protection; when signing or writing the answer fails,
    /// what else was written is taken back (`Rollback`), and the client asks again with a new id.
    @discardableResult
    public func issueIdentityToken(_ message: IdentityRequest, now: Date = Date()) async throws -> IdentityToken {
        let (clientId, request, audience, scope) = (
            message.client, message.request, message.audience.text, message.scope.text
        )
        let (registration, pairing) = try authenticate(message, now: now)
        try checkAuthorized(registration)
        // Each request id once: a captured request replayed within its time limit gets nothing
        // (older ones are refused by their time). Requests made at once all get answers.
        let seen = stateDirectory + "/identity-requests/\(clientId)"
        try AtomicFileSet.ensureDirectory(seen)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: seen)) ?? [] {
            var info = stat()
            if lstat(seen + "/" + name, &info) == 0,
                now.timeIntervalSince1970 - TimeInterval(info.st_mtim.tv_sec) > 2 * ledger.timeLimit
            {
                unlink(seen + "/" + name)
            }
        }
        var marker = AtomicFileSet(directory: seen)
        try marker.add(request.text, .bytes([]), mode: 0o600)
        do {
            try marker.commit(replacingExisting: false)
        } catch DCError.Code.outputExists {
            throw DCError(
                .refusedMessage, "a replayed identity request (its request id was answered before)",
                subject: clientId.text,
                hint: "nothing was issued")
        }
        // The request id stays recorded, answered or not (a replay gets nothing either way); the
        // rest is all or nothing: the identity key and JWKS made on first use, and the answer.
        let spool = Spool(directory: registration.spool)
        return try Rollback.allOrNothing { rollback in
            for path in [stateDirectory + "/identity-signing-key", jwksPath] { rollback.keep(path) }
            rollback.keep(spool.path(request: request, kind: .identityToken))
            let token = try IdentityToken.sign(
                issuer: callbackScheme.text, userID: pairing.userID ?? ClientPairing.defaultUserID, audience: audience,
                scope: scope, key: try identityKey(), now: now)
            _ = try spool.write(Array(token.compact.utf8), request: request, kind: .identityToken)
            return token
        }
    }
}
