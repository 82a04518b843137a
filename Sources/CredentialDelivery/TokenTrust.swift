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

    /// The key that signs delegations, made on first use (PKCS#8, 0600, never leaves the provider);
    /// the JWKS and the revocation list are written when missing, so that a verification service
    /// can start at once.
    public func issuingKey() throws -> TokenSigningKey {
        let path = stateDirectory + "/token-issuing-key"
        let key: TokenSigningKey
        let refusal = DCError(
            .permissionDenied, "the token issuing key is not a private regular file of this user", subject: path,
            hint: "make it mode 0600, or remove it (tokens issued with it then stop verifying)")
        if var bytes = try PinnedKeys.privateFile(path, limit: 1 << 12, else: refusal).map(Array.init) {
            key = try TokenSigningKey(pkcs8DER: SecretBytes(consuming: &bytes))
        } else {
            let made = try TokenSigningKey.generate()
            try AtomicFileSet.ensureDirectory(stateDirectory)
            var files = AtomicFileSet(directory: stateDirectory)
            try made.privateKey.withPKCS8DER { bytes in
                var copy = Array(bytes)
                try files.add("token-issuing-key", .secret(SecretBytes(consuming: &copy)), mode: 0o600)
            }
            try files.commit()
            key = made
        }
        try AtomicFileSet.ensureDirectory(verifierDirectory)
        if (try? TrustedIssuers.load(from: issuersPath)) != TrustedIssuers([key.publicKey]) {
            try TrustedIssuers([key.publicKey]).write(to: issuersPath)
        }
        if !FileManager.default.fileExists(atPath: revocationsPath) {
            try updateRevocations { _ in }
        }
        return key
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
