import CredentialCoding
import DerivedCredentials
import Foundation

/// What a renewal keeps: the retired encryption pairs, so that what was encrypted to an old
/// certificate stays readable after the credential is replaced.
///
/// When a new credential replaces an installed one, the old credential's key-management pairs
/// (its ``CredentialTag/encryption`` pair and its ``CredentialTag/escrow`` pair) join the key
/// history, with the pairs retired before them and the history the new credential's escrow entry
/// brings. Its authentication and signing keys are not kept: replacing the credential destroys
/// them. The history holds each certificate once, none the new credential uses, newest first (by
/// the certificate's start of validity), and at most `CredentialEntry.maximumKeyHistory` pairs,
/// the PIV retired key-management slots; the oldest go first.
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
        var seen = Set(new.entries.map(\.certificate.derBytes))
        let unique = candidates.filter { seen.insert($0.certificate.derBytes).inserted }
        // Newest first; a certificate whose start cannot be read sorts last. The sort is stable.
        let starts = unique.map { (try? CertificateDetails($0.certificate))?.notBefore ?? .distantPast }
        let ordered = zip(unique, starts).enumerated().sorted { left, right in
            left.element.1 != right.element.1 ? left.element.1 > right.element.1 : left.offset < right.offset
        }.map(\.element.0)
        return Array(ordered.prefix(CredentialEntry.maximumKeyHistory))
    }

    /// `credential` with its escrow entry carrying `history` (unchanged when it has no escrow
    /// entry: the history is then only in ``ManagedClient/keyHistory()``).
    static func credential(_ credential: Credential, carrying history: [CertifiedKey]) throws -> Credential {
        guard let escrow = credential[.escrow], escrow.keyHistory != history else { return credential }
        let entries = try credential.entries.map { entry in
            entry.tag == .escrow
                ? try CredentialEntry(
                    tag: .escrow, certificate: escrow.certificate, privateKey: escrow.privateKey, keyHistory: history)
                : entry
        }
        return try Credential(
            name: credential.name, serialNumber: credential.serialNumber, expirationDate: credential.expirationDate,
            entries: entries)
    }
}
