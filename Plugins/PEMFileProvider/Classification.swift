import CredentialCoding
import DerivedCredentials

/// Assigns a tag to an untagged certificate from its key usage, extended key usage and
/// subjectAltName (`--classify`):
///
/// - keyEncipherment or keyAgreement, without nonRepudiation or a client-authentication EKU →
///   **encryption**
/// - nonRepudiation → **signing**; so is digitalSignature with only e-mail/document-signing EKUs
/// - digitalSignature with a client-authentication EKU (clientAuth, PKINIT, smart-card logon) or a
///   UPN in the subjectAltName → **authentication**
///
/// Anything that fits none or more than one (a dual-use S/MIME certificate with digitalSignature,
/// keyEncipherment and emailProtection) is ambiguous and refused with an error naming the file.
public enum Classification {
    // Everything below is read from the profile table (`TagProfile`), so that a certificate is
    // classified by the same rules it is validated against.

    /// The purposes only authentication has: client authentication, PKINIT, smart-card logon.
    static let authenticationEKUs = Set(TagProfile.authentication.purposes)
    /// The purposes of signing: e-mail protection and document signing.
    static let signingEKUs = Set(TagProfile.signing.purposes)
    /// The bit signing requires beyond authentication's: nonRepudiation.
    static let signingOnlyUsage = TagProfile.signing.rsaKeyUsage.subtracting(TagProfile.authentication.rsaKeyUsage)
    /// The bit every signing tag requires: digitalSignature.
    static let signatureUsage = TagProfile.authentication.rsaKeyUsage
    /// The bits encryption requires, by key kind: keyEncipherment (RSA) or keyAgreement (EC).
    static let encryptionUsage = TagProfile.encryption.rsaKeyUsage.union(TagProfile.encryption.ecKeyUsage)

    /// The tags `details` could have; exactly one means it is classified.
    public static func candidates(_ details: CertificateDetails) -> [CredentialTag] {
        let usage = details.keyUsage ?? []
        let eku = Set(details.extendedKeyUsage ?? [])
        let encrypts = !usage.isDisjoint(with: encryptionUsage)
        let commits = !usage.isDisjoint(with: signingOnlyUsage)
        let signs = usage.isSuperset(of: signatureUsage)
        let hasUPN = details.subjectAlternativeNames.contains { $0.hasPrefix("UPN:") }
        var tags: [CredentialTag] = []
        if signs && !commits && (!eku.isDisjoint(with: authenticationEKUs) || hasUPN) {
            tags.append(.authentication)
        }
        if commits || (signs && !eku.isEmpty && eku.isSubset(of: signingEKUs) && !hasUPN) {
            tags.append(.signing)
        }
        if encrypts && !commits && eku.isDisjoint(with: authenticationEKUs) {
            tags.append(.encryption)
        }
        return tags
    }

    /// The tag of `details`, or an error naming `source`.
    public static func tag(_ details: CertificateDetails, source: String) throws -> CredentialTag {
        let tags = candidates(details)
        guard tags.count == 1 else {
            let usage = (details.keyUsage?.names ?? ["no keyUsage"]).joined(separator: ", ")
            throw DCError(
                .invalid,
                tags.isEmpty
                    ? "cannot tell which tag the certificate is for (keyUsage: \(usage))"
                    : "the certificate could be \(tags.map(\.rawValue).joined(separator: " or ")) (keyUsage: \(usage))",
                subject: source, remedy: .tagExplicitly(source))
        }
        return tags[0]
    }
}
