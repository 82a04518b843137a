import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import SystemSupport

/// What a verification service trusts, kept by the provider: the P-256 key that signs the
/// delegations behind its clients' auth tokens, published as a JWKS, and the revocation list.
///
/// Both files live in ``verifierDirectory`` and are replaced atomically, so a `dcverify` pointed at
/// them (`--issuers`, `--revocations`) reads the old file or the new one, never a mixture, and
/// takes a change without a restart. Retiring a client adds its container (app = the client's
/// scheme, container = its id) to the revocation list at once: every token it made stops
/// verifying (103 Revoked).
extension CredentialService {
    /// The directory of the files a verification service reads.
    public var verifierDirectory: String { stateDirectory + "/verifier" }
    /// The trusted issuing keys, a JWKS (`dcverify serve --issuers`).
    public var issuersPath: String { verifierDirectory + "/issuers.jwks" }
    /// The revocation list (`dcverify serve --revocations`).
    public var revocationsPath: String { verifierDirectory + "/revocations.json" }

    /// The key that verifies identity JWTs, as a JWKS (`dcverify serve --jwks`, served at
    /// `/.well-known/jwks.json`). Only that key: the issuing key is in ``issuersPath``, and a
    /// delegation (which names the same issuer and user) must never pass for an identity JWT
    /// with a relying party that looks keys up here.
    public var jwksPath: String { verifierDirectory + "/jwks.json" }

    /// The key that signs delegations, made on first use (PKCS#8, 0600, never leaves the provider);
    /// the trusted-issuers JWKS, the revocation list and the identity key's JWKS are written when
    /// missing, so that a verification service can start at once.
    public func issuingKey() throws -> TokenSigningKey {
        let key = try providerKey("token-issuing-key", what: "the token issuing key")
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        if (try? TrustedIssuers.load(from: issuersPath)) != TrustedIssuers([key.publicKey]) {
            try TrustedIssuers([key.publicKey]).write(to: issuersPath)
            if FileManager.default.fileExists(atPath: revocationsPath) { try republishTrust() }
        }
        if !FileManager.default.fileExists(atPath: revocationsPath) {
            try updateRevocations { _ in }
        }
        if !FileManager.default.fileExists(atPath: jwksPath) { _ = try identityKey() }
        return key
    }

    /// The key that signs identity JWTs, made on first use like ``issuingKey()``; its public half
    /// is published in ``jwksPath``.
    public func identityKey() throws -> TokenSigningKey {
        let key = try providerKey("identity-signing-key", what: "the identity JWT signing key")
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        if (try? TrustedIssuers.load(from: jwksPath)) != TrustedIssuers([key.publicKey]) {
            try TrustedIssuers([key.publicKey]).write(to: jwksPath)
        }
        return key
    }

    /// The provider's P-256 key in `<state>/<name>`, made (0600, atomically) when there is none.
    private func providerKey(_ name: String, what: String) throws -> TokenSigningKey {
        let path = stateDirectory + "/" + name
        return try PinnedKeys.storedKey(
            at: path,
            refusal: DCError(
                .permissionDenied, "\(what) is not a private regular file of this user", subject: path,
                hint: "make it mode 0600, or remove it (what was signed with it then stops verifying)"))
    }

    /// The revocation list now (empty when none was written).
    public func revocations() throws -> RevocationList {
        FileManager.default.fileExists(atPath: revocationsPath)
            ? try RevocationList.load(from: revocationsPath) : .empty
    }

    /// Changes the revocation list under its lock and replaces the file atomically, stamped now,
    /// then publishes it again where the provider publishes (``publishTrust(to:validity:now:)``).
    /// `expiring` gives the expiry (seconds since 1970) of delegation ids being revoked: once a
    /// revoked delegation has expired (with ten minutes to spare for clocks), no verifier accepts it
    /// anyway and its id leaves the list, so the list does not grow without end. Ids whose expiry
    /// the provider does not know stay.
    func updateRevocations(expiring: [String: Int64] = [:], _ change: (inout RevocationList) throws -> Void)
        throws
    {
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        try FileLock.withExclusiveLock(at: revocationsPath + ".lock") { _ in
            var list = try revocations()
            try change(&list)
            var expiries = try PinnedKeys.read([String: Int64].self, at: revokedExpiriesPath) ?? [:]
            expiries.merge(expiring) { max($0, $1) }
            let cutoff = Int64(Date().timeIntervalSince1970) - 600
            let expired = Set(expiries.filter { $0.value < cutoff }.keys)
            list.revokedDelegations.subtract(expired)
            expiries = expiries.filter { !expired.contains($0.key) && list.revokedDelegations.contains($0.key) }
            list.issued = max(list.issued + 1, Int64(Date().timeIntervalSince1970))
            try list.write(to: revocationsPath)
            try PinnedKeys.write(expiries, to: revokedExpiriesPath)
        }
        // Outside the list's lock, as ``publishTrust(to:validity:now:)`` reads the list under its own.
        try republishTrust()
    }

    /// When each revoked delegation expires, for pruning the list (private to the provider).
    var revokedExpiriesPath: String { stateDirectory + "/revoked-delegation-expiries.json" }

    /// Retires the container of `clientId` at `clientScheme` for every verification service, and
    /// revokes every delegation issued to it (so that when the same client id is set up afresh and
    /// paired again, lifting the container's retirement does not revive any of them).
    func revokeTokens(ofRetired clientId: ClientID, scheme: URLScheme) throws {
        _ = try issuingKey()
        try revokeDelegations(of: clientId)
        try updateRevocations {
            $0.retiredContainers.insert(.init(appID: scheme.text, containerID: clientId.text))
        }
    }

    /// Lets the container of `clientId` at `scheme` make tokens again: for a client set up afresh
    /// (another token key) and paired after its retirement. Its old delegations stay revoked by id.
    func liftRetirement(of clientId: ClientID, scheme: URLScheme) throws {
        let container = RevocationList.RetiredContainer(appID: scheme.text, containerID: clientId.text)
        guard try revocations().retiredContainers.contains(container) else { return }
        try updateRevocations { $0.retiredContainers.remove(container) }
    }
}
