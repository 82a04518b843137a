import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import SystemSupport

/// The delegations a provider issued to one client that have not expired yet, by id, so that
/// unauthorizing or retiring the client can revoke them all at once, and the newest one, which is
/// sent again while more than half its life is left (a client that unlocks often does not make
/// the provider mint, record and later revoke a delegation each time).
/// `$XDG_STATE_HOME/dcprovision/delegations/<client-id>.json`.
struct DelegationRecord: Codable, Sendable, Equatable {
    /// The id (`jti`) and expiry (seconds since 1970) of each delegation issued.
    var issued: [String: Int64] = [:]
    /// The newest delegation, compact.
    var latest: String?
}

/// Auth-token delegations: what lets a client make auth tokens that a verification service
/// accepts. The provider issues one (``Delegation``, at most a day long, signed with its issuing
/// key) for the client's pinned token key whenever the client is authorized and its secure
/// services are available (a policy push, an availability notice), so an app that unlocks at
/// least daily always holds a valid one. It travels as a spool file (`<id>.dlg`) named by a
/// signed `delegation` URL. Unauthorizing or retiring the client revokes every delegation it holds.
extension CredentialService {
    var delegationsDirectory: String { stateDirectory + "/delegations" }
    func delegationRecordPath(_ clientId: ClientID) -> String { delegationsDirectory + "/\(clientId).json" }

    /// Issues a delegation for the client registered for `registration.scheme` and opens it at the
    /// client. Returns nil (and sends nothing) when the client pinned no token key at pairing (an
    /// older client). Throws `notAuthorized` for a client that is not authorized.
    @discardableResult
    public func sendDelegation(
        to registration: ClientRegistration, now: Date = Date(), progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Delegation? {
        guard let pairing = try pairing(clientId: registration.clientId),
            let pinned = pairing.tokenKey.flatMap({ Data(base64Encoded: $0) })
        else { return nil }
        try checkAuthorized(registration)
        try checkHandler(registration)
        let tokenKey = try TokenPublicKey(uncompressedPoint: Array(pinned))
        let userID = pairing.userID ?? ClientPairing.defaultUserID
        let seconds = Int64(now.timeIntervalSince1970)
        var delegation: Delegation?
        // Recorded before it goes out, under the record's lock, and only while the client is still
        // authorized: an unauthorize (which revokes under the same lock, after it wrote the new
        // policy) either sees this id or makes this check fail. A delegation that reached the
        // client can always be revoked.
        try updateDelegationRecord(registration.clientId, now: now) { record in
            try checkAuthorized(registration)
            if let latest = record.latest.flatMap({ try? Delegation(parsing: $0) }),
                record.issued[latest.claims.id] != nil, latest.claims.tokenKey == tokenKey,
                latest.claims.userID == userID, latest.claims.appID == registration.scheme.text,
                latest.claims.notBefore <= seconds, latest.claims.expires - seconds > Delegation.maximumLifetime / 2
            {
                delegation = latest
                return
            }
            let issued = try Delegation.issue(
                issuer: callbackScheme.text, userID: userID, appID: registration.scheme.text,
                containerID: registration.clientId.text, tokenKey: tokenKey, issuingKey: try issuingKey(), now: now)
            record.issued[issued.claims.id] = issued.claims.expires
            record.latest = issued.compact
            delegation = issued
        }
        guard let delegation else { return nil }
        // The provider made the id (``Delegation/issue``); a recorded delegation whose id breaks the
        // rule is refused here, before anything is spooled.
        let id = try RequestID(delegation.claims.id)
        let spool = Spool(directory: registration.spool)
        spool.remove(request: id, kind: .delegation)
        let digest = try spool.write(Array(delegation.compact.utf8), request: id, kind: .delegation)
        let url = try DelegationNotice(
            client: registration.clientId, id: id, digest: try SHA256Hex(digest), time: Int64(now.timeIntervalSince1970)
        ).signed(with: try signingKey(), scheme: registration.scheme).url(scheme: registration.scheme)
        progress(
            "auth-token delegation \(delegation.claims.id) for \(registration.clientId), valid until \(Date(timeIntervalSince1970: TimeInterval(delegation.claims.expires)))"
        )
        do {
            try await open(url, registration)
        } catch {
            spool.remove(request: id, kind: .delegation)
            throw error
        }
        return delegation
    }

    /// ``sendDelegation(to:now:progress:)`` where a failure is reported, not thrown: a client that
    /// cannot take a delegation now still gets its policy and its credentials.
    func offerDelegation(to registration: ClientRegistration, progress: @Sendable (String) -> Void) async {
        do {
            try await sendDelegation(to: registration, progress: progress)
        } catch {
            progress("no auth-token delegation sent: \(error)")
        }
    }

    /// Revokes every unexpired delegation issued to `clientId` for every verification service; the
    /// client's tokens then answer 103 Revoked. The revocation list is written first and the record
    /// emptied only once it is: a failure leaves every id to be revoked by the next attempt.
    /// Returns how many were revoked.
    @discardableResult
    func revokeDelegations(of clientId: ClientID, now: Date = Date()) throws -> Int {
        var revoked = 0
        try updateDelegationRecord(clientId, now: now) { record in
            guard !record.issued.isEmpty else { return }
            try updateRevocations(expiring: record.issued) { $0.revokedDelegations.formUnion(record.issued.keys) }
            revoked = record.issued.count
            record = DelegationRecord()
        }
        return revoked
    }

    /// Changes the delegation record of `clientId` under its lock, dropping the expired ones first;
    /// nothing is written when `change` throws.
    private func updateDelegationRecord(
        _ clientId: ClientID, now: Date, _ change: (inout DelegationRecord) throws -> Void
    ) throws {
        try AtomicFileSet.ensureDirectory(delegationsDirectory)
        let path = delegationRecordPath(clientId)
        try FileLock.withExclusiveLock(at: path + ".lock") { _ in
            var record = try PinnedKeys.read(DelegationRecord.self, at: path) ?? DelegationRecord()
            let seconds = Int64(now.timeIntervalSince1970)
            record.issued = record.issued.filter { $0.value > seconds }
            try change(&record)
            try PinnedKeys.write(record, to: path)
        }
    }
}
