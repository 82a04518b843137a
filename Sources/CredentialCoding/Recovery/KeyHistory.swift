import DerivedCredentials
import FoundationEssentials

/// The one rule for an escrow key history, wherever one is put together (a renewal on the client,
/// recovered pairs on the provider): each certificate once, none that `excluding` holds, newest
/// first by the certificate's start of validity (a stable sort; unreadable ones last), at most
/// `CredentialEntry.maximumKeyHistory` pairs, the oldest dropped.
public enum KeyHistory {
    /// `candidates` in key-history order, after the rule above.
    public static func merge(_ candidates: [CertifiedKey], excluding: [Certificate] = []) -> [CertifiedKey] {
        var seen = Set(excluding.map(\.derBytes))
        let unique = candidates.filter { seen.insert($0.certificate.derBytes).inserted }
        let starts = unique.map { (try? CertificateDetails($0.certificate))?.notBefore ?? .distantPast }
        let ordered = zip(unique, starts).enumerated().sorted { left, right in
            left.element.1 != right.element.1 ? left.element.1 > right.element.1 : left.offset < right.offset
        }.map(\.element.0)
        return Array(ordered.prefix(CredentialEntry.maximumKeyHistory))
    }

    /// `credential` with its escrow entry carrying `history` (unchanged when it has no escrow entry).
    public static func credential(_ credential: Credential, carrying history: [CertifiedKey]) throws -> Credential {
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
