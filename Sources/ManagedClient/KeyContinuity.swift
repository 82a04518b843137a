import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// What a renewal keeps: the retired encryption pairs, so that what was encrypted to an old
/// certificate stays readable after the credential is replaced.
///
/// When a new credential replaces an installed one, the old credential's key-management pairs
/// (its ``CredentialTag/encryption`` pair and its ``CredentialTag/escrow`` pair) join the key
/// history, with the pairs retired before them and the history the new credential's escrow entry
/// brings. Its authentication and signing keys are not kept: replacing the credential destroys
/// them. The history follows `KeyHistory`'s rule (each certificate once, none the new credential
/// uses, newest first, at most `CredentialEntry.maximumKeyHistory`, the PIV retired
/// key-management slots).
enum KeyContinuity {
    /// The key history once `new` replaces `old` (nil when nothing was installed), given the
    /// history the client kept so far.
    static func history(replacing old: Credential?, kept: [CertifiedKey], with new: Credential) -> [CertifiedKey] {
        var candidates = new[.escrow]?.keyHistory ?? []
        if let old {
            candidates += [CredentialTag.encryption, .escrow].compactMap { old[$0]?.certifiedKey }
            candidates += old[.escrow]?.keyHistory ?? []
        }
        candidates += kept
        return KeyHistory.merge(candidates, excluding: new.entries.map(\.certificate))
    }

    /// `credential` with its escrow entry carrying `history` (unchanged when it has no escrow
    /// entry: the history is then only in ``ManagedClient/keyHistory()``).
    static func credential(_ credential: Credential, carrying history: [CertifiedKey]) throws -> Credential {
        try KeyHistory.credential(credential, carrying: history)
    }
}
