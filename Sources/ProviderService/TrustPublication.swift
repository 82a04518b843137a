import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import SystemSupport

/// Where the provider publishes what verifiers fetch, remembered in its state once it has
/// published: `<state>/publication.json`.
public struct TrustPublicationRecord: Codable, Sendable, Equatable {
    /// The directory a static web server serves (`dcprovision publish --out-dir`).
    public var directory: String
    /// The number of the last signed list published.
    public var number: Int64
    /// How long after its issue time each list promises the next one, in seconds.
    public var validity: Int64
}

/// The highest list number the provider has used, written before the files that carry it:
/// `<state>/publication-number.json`.
struct TrustPublicationNumber: Codable, Equatable {
    /// The number of the last list signed (published or not).
    var number: Int64
}

/// What a publication wrote.
public struct PublishedTrust: Sendable {
    /// The directory written.
    public var directory: String
    /// The signed list written (`trust.jws`).
    public var list: SignedTrustList
    /// The public key that verifies it (`trust-key.jwks`).
    public var key: TokenPublicKey
}

/// Publishing trust for verifiers that fetch it (`dcverify serve --trust-url`): the provider signs
/// one ``SignedTrustList`` (its issuing keys and its revocation list, numbered) with a key of its
/// own and writes, in one atomic set, into a directory any static web server can serve:
///
/// - `trust.jws`: the signed list, what `dcverify` fetches;
/// - `trust-key.jwks`: the public half of the trust-signing key (`dcverify serve --trust-key`);
/// - `issuers.jwks` and `revocations.json`: the same trust unsigned, as the local files are.
///
/// The trust-signing key is a key of its own (`<state>/trust-signing-key`), not the issuing key:
/// a verifier given only its public half trusts exactly what the provider signed with it, the
/// issuing key can be replaced without touching every verifier, and no signature the issuing key
/// makes (delegations) can be taken for a trust list or the other way round.
///
/// Once published, the directory is remembered and published again, with the next number, on
/// every change of the revocation list or the issuing keys.
extension CredentialService {
    /// The files in a publication directory, by name.
    public enum PublishedFile {
        /// The signed list.
        public static let list = "trust.jws"
        /// The trust-signing key's public half, a JWKS with that one key.
        public static let key = "trust-key.jwks"
        /// The issuing keys, unsigned.
        public static let issuers = "issuers.jwks"
        /// The revocation list, unsigned.
        public static let revocations = "revocations.json"
    }

    /// How long a list promises the next one by default: a day.
    public static let defaultTrustValidity: Int64 = 86_400

    /// The record of the last publication, when the provider has published.
    var publicationPath: String { stateDirectory + "/publication.json" }

    /// The key that signs trust lists, made on first use (PKCS#8, 0600, never leaves the provider).
    public func trustSigningKey() throws -> TokenSigningKey {
        let path = stateDirectory + "/trust-signing-key"
        return try PinnedKeys.storedKey(
            at: path,
            refusal: DCError(
                .permissionDenied, "the trust-signing key is not a private regular file of this user", subject: path,
                remedy: .fixTrustSigningKey))
    }

    /// The highest number used, written ahead of the files (``TrustPublicationNumber``).
    var publicationNumberPath: String { stateDirectory + "/publication-number.json" }

    /// The last publication's record, if the provider has published.
    public func publication() throws -> TrustPublicationRecord? {
        try PinnedKeys.read(TrustPublicationRecord.self, at: publicationPath)
    }

    /// Signs the current trust with the next number and writes it into `directory` (or the one
    /// remembered, when nil), which is remembered for later changes; `validity` (seconds) sets the
    /// next update, else the remembered one or ``defaultTrustValidity``. Throws `usage` when no
    /// directory is given and none is remembered.
    @discardableResult
    public func publishTrust(to directory: String? = nil, validity: Int64? = nil, now: Date = Date()) throws
        -> PublishedTrust
    {
        let issuing = try issuingKey()
        try AtomicFileSet.ensureDirectory(stateDirectory)
        return try FileLock.withExclusiveLock(at: publicationPath + ".lock") { _ in
            let record = try publication()
            guard let directory = directory ?? record?.directory else {
                throw DCError(.usage, "no publication directory", remedy: .namePublicationDirectory)
            }
            let validity = validity ?? record?.validity ?? Self.defaultTrustValidity
            // All or nothing but the number: a publication that fails puts back the files and the
            // record (and a trust-signing key it made), and leaves the number it used up.
            return try Rollback.allOrNothing { rollback in
                keepTrust(in: rollback, publishingTo: directory)
                return try sign(into: directory, issuing: issuing, validity: validity, record: record, now: now)
            }
        }
    }

    /// Signs the current trust with the next number and writes it into `directory`, under the
    /// publication lock (``publishTrust(to:validity:now:)``).
    private func sign(
        into directory: String, issuing: TokenSigningKey, validity: Int64, record: TrustPublicationRecord?, now: Date
    ) throws -> PublishedTrust {
        let key = try trustSigningKey()
        let issued = Int64(now.timeIntervalSince1970)
        // The number is recorded before any file carries it. Stopped between the files and the
        // record (a crash, a full disk), a publication then skips a number, which verifiers
        // accept, rather than signing a second, different list with the number of one they hold,
        // which they would refuse as not newer, and with it every revocation it adds.
        let used = try PinnedKeys.read(TrustPublicationNumber.self, at: publicationNumberPath)?.number ?? 0
        let number = max(record?.number ?? 0, used) + 1
        try PinnedKeys.write(TrustPublicationNumber(number: number), to: publicationNumberPath)
        // Read under the publication lock: a change that publishes after this one reads after it.
        let list = try SignedTrustList.sign(
            number: number, issued: issued, nextUpdate: issued + validity,
            issuers: TrustedIssuers([issuing.publicKey]), revocations: try revocations(), key: key)
        let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
        var files = AtomicFileSet(directory: absolute)
        try files.add(PublishedFile.key, .bytes(TrustedIssuers([key.publicKey]).jwks()), mode: 0o644)
        try files.add(PublishedFile.issuers, .bytes(list.issuers.jwks()), mode: 0o644)
        try files.add(PublishedFile.revocations, .bytes(list.revocations.json()), mode: 0o644)
        try files.add(PublishedFile.list, .bytes(list.bytes), mode: 0o644)
        let existed = FileManager.default.fileExists(atPath: absolute)
        try files.commitCreatingDirectory(replacingExisting: true)
        // A directory made here is the web server's to read: 0755, not the private default.
        if !existed { chmod(absolute, 0o755) }
        try PinnedKeys.write(
            TrustPublicationRecord(directory: absolute, number: list.number, validity: validity),
            to: publicationPath)
        return PublishedTrust(directory: absolute, list: list, key: key.publicKey)
    }

    /// Publishes again when the provider has published before: every change of the revocation
    /// list or the issuing keys calls it, so the directory is never behind the local files.
    func republishTrust() throws {
        guard FileManager.default.fileExists(atPath: publicationPath) else { return }
        try publishTrust()
    }
}
