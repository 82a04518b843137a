import AuthTokens
import CredentialCoding
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

    /// The verification keys as one JWKS, the issuing key and the identity key
    /// (`dcverify serve --jwks`, served at `/.well-known/jwks.json`), so relying parties can
    /// check identity JWTs.
    public var jwksPath: String { verifierDirectory + "/jwks.json" }

    /// The key that signs delegations, made on first use (PKCS#8, 0600, never leaves the provider);
    /// the JWKS files and the revocation list are written when missing, so that a verification
    /// service can start at once.
    public func issuingKey() throws -> TokenSigningKey {
        let key = try providerKey("token-issuing-key", what: "the token issuing key")
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        if (try? TrustedIssuers.load(from: issuersPath)) != TrustedIssuers([key.publicKey]) {
            try TrustedIssuers([key.publicKey]).write(to: issuersPath)
        }
        try publishVerificationKeys(issuing: key)
        if !FileManager.default.fileExists(atPath: revocationsPath) {
            try updateRevocations { _ in }
        }
        return key
    }

    /// The key that signs identity JWTs, made on first use like ``issuingKey()``; its public half
    /// is published in ``jwksPath``.
    public func identityKey() throws -> TokenSigningKey {
        let key = try providerKey("identity-signing-key", what: "the identity JWT signing key")
        try publishVerificationKeys(identity: key)
        return key
    }

    /// Writes ``jwksPath`` (atomically) when it does not hold both public keys.
    private func publishVerificationKeys(issuing: TokenSigningKey? = nil, identity: TokenSigningKey? = nil) throws {
        let issuingKey = try issuing ?? providerKey("token-issuing-key", what: "the token issuing key")
        let identityKey = try identity ?? providerKey("identity-signing-key", what: "the identity JWT signing key")
        let wanted = TrustedIssuers([issuingKey.publicKey, identityKey.publicKey])
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        if (try? TrustedIssuers.load(from: jwksPath)) != wanted { try wanted.write(to: jwksPath) }
    }

    /// The provider's P-256 key in `<state>/<name>`, made (0600, atomically) when there is none.
    private func providerKey(_ name: String, what: String) throws -> TokenSigningKey {
        let path = stateDirectory + "/" + name
        let refusal = DCError(
            .permissionDenied, "\(what) is not a private regular file of this user", subject: path,
            hint: "make it mode 0600, or remove it (what was signed with it then stops verifying)")
        if var bytes = try PinnedKeys.privateFile(path, limit: 1 << 12, else: refusal).map(Array.init) {
            return try TokenSigningKey(pkcs8DER: SecretBytes(consuming: &bytes))
        }
        let made = try TokenSigningKey.generate()
        try AtomicFileSet.ensureDirectory(stateDirectory)
        var files = AtomicFileSet(directory: stateDirectory)
        try made.privateKey.withPKCS8DER { bytes in
            var copy = Array(bytes)
            try files.add(name, .secret(SecretBytes(consuming: &copy)), mode: 0o600)
        }
        do {
            try files.commit(replacingExisting: false)
            return made
        } catch DCError.Code.outputExists {
            // Another process made it first: use that one.
            guard var bytes = try PinnedKeys.privateFile(path, limit: 1 << 12, else: refusal).map(Array.init) else {
                throw refusal
            }
            return try TokenSigningKey(pkcs8DER: SecretBytes(consuming: &bytes))
        }
    }

    /// The revocation list now (empty when none was written).
    public func revocations() throws -> RevocationList {
        FileManager.default.fileExists(atPath: revocationsPath)
            ? try RevocationList.load(from: revocationsPath) : .empty
    }

    /// Changes the revocation list under its lock and replaces the file atomically, stamped now.
    func updateRevocations(_ change: (inout RevocationList) throws -> Void) throws {
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        try FileLock.withExclusiveLock(at: revocationsPath + ".lock") { _ in
            var list = try revocations()
            try change(&list)
            list.issued = max(list.issued + 1, Int64(Date().timeIntervalSince1970))
            try list.write(to: revocationsPath)
        }
    }

    /// Retires the container of `clientId` at `clientScheme` for every verification service.
    func revokeTokens(ofRetired clientId: String, scheme: String) throws {
        _ = try issuingKey()
        try updateRevocations {
            $0.retiredContainers.insert(.init(appID: scheme, containerID: clientId))
        }
    }
}
