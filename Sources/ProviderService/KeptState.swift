import DerivedCredentials
import Foundation
import SystemSupport

/// What each provider command that makes state keeps (`Rollback`), so that it completes or leaves
/// nothing: the files it may change, by name. Only those: a whole directory put back would also
/// undo what another command (a handler answering a client) wrote in it meanwhile.
extension CredentialService {
    /// Keeps the files the provider makes on first use, which registering it makes: its
    /// message-signing key, the token issuing and identity keys, and the files a verification
    /// service reads (the trusted issuers, the revocation list, the identity JWKS); and the
    /// registration it publishes.
    public func keepRegistration(in rollback: Rollback) {
        for name in ["signing-key", "token-issuing-key", "identity-signing-key"] {
            rollback.keep(stateDirectory + "/" + name)
        }
        for path in [issuersPath, jwksPath] { rollback.keep(path) }
        keepTrust(in: rollback)
        rollback.keep(locations.providerRegistration(callbackScheme))
    }

    /// Keeps the trust verifiers read: the trust-signing key and the publication (its record and
    /// the files of the remembered directory, or of `directory`); the revocation list and its
    /// expiries only while absent (made afresh, they go again). A revocation list that exists is
    /// never put back: a policy command may have added to it meanwhile, and a revocation errs
    /// toward revoked. Not the number of the last list signed either: a failed publication may use
    /// one up, but a number is never used twice (``publishTrust(to:validity:now:)``).
    func keepTrust(in rollback: Rollback, publishingTo directory: String? = nil) {
        for path in [revocationsPath, revokedExpiriesPath] { rollback.keepIfAbsent(path) }
        for path in [publicationPath, stateDirectory + "/trust-signing-key"] { rollback.keep(path) }
        let remembered = (try? publication())?.directory
        for directory in Set([directory, remembered].compactMap { $0 }) {
            let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
            rollback.keep(absolute)
            for name in [PublishedFile.key, PublishedFile.issuers, PublishedFile.revocations, PublishedFile.list] {
                rollback.keep(absolute + "/" + name)
            }
        }
    }

    /// Keeps what pairing with `clientId` changes: its pairing, its policy record and its
    /// delegation record, and the trust (a client set up afresh has its old delegations revoked,
    /// a retired one its container opened again).
    func keepPairing(_ clientId: ClientID, in rollback: Rollback) {
        for path in [pairingPath(clientId), policyPath(clientId), delegationRecordPath(clientId)] {
            rollback.keep(path)
        }
        keepTrust(in: rollback)
    }
}
