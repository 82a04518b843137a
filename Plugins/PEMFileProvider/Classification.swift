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
    static let authenticationEKUs: Set<String> = [
        ExtendedKeyUsage.clientAuth, ExtendedKeyUsage.pkinitClientAuth, ExtendedKeyUsage.smartcardLogon,
    ]
    static let signingEKUs: Set<String> = [
        ExtendedKeyUsage.emailProtection, ExtendedKeyUsage.documentSigning, ExtendedKeyUsage.microsoftDocumentSigning,
        ExtendedKeyUsage.adobePDFSigning,
    ]

    /// The tags `details` could have; exactly one means it is classified.
    public static func candidates(_ details: CertificateDetails) -> [CredentialTag] {
        let usage = Set(details.keyUsage ?? [])
        let eku = Set(details.extendedKeyUsage ?? [])
        let encrypts = usage.contains("keyEncipherment") || usage.contains("keyAgreement")
        let hasUPN = details.subjectAlternativeNames.contains { $0.hasPrefix("UPN:") }
        var tags: [CredentialTag] = []
        if usage.contains("digitalSignature") && !usage.contains("nonRepudiation")
            && (!eku.isDisjoint(with: authenticationEKUs) || hasUPN)
        {
            tags.append(.authentication)
        }
        if usage.contains("nonRepudiation")
            || (usage.contains("digitalSignature") && !eku.isEmpty && eku.isSubset(of: signingEKUs) && !hasUPN)
        {
            tags.append(.signing)
        }
        if encrypts && !usage.contains("nonRepudiation") && eku.isDisjoint(with: authenticationEKUs) {
            tags.append(.encryption)
        }
        return tags
    }

    /// The tag of `details`, or an error naming `source`.
    public static func tag(_ details: CertificateDetails, source: String) throws -> CredentialTag {
        let tags = candidates(details)
        guard tags.count == 1 else {
            let usage = (details.keyUsage ?? ["no keyUsage"]).joined(separator: ", ")
            throw DCError(
                .invalid,
                tags.isEmpty
                    ? "cannot tell which tag the certificate is for (keyUsage: \(usage))"
                    : "the certificate could be \(tags.map(\.rawValue).joined(separator: " or ")) (keyUsage: \(usage))",
                subject: source, hint: "give its tag explicitly with --pem TAG=\(source)")
        }
        return tags[0]
    }
}
