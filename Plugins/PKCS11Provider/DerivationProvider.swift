import CredentialCoding
import DerivedCredentials
import Foundation

/// A derived credential (NIST SP 800-157), id `derive`: for a card whose keys never leave it.
///
/// The steps (the CA's challenge signed on the card and checked against `trust-anchor`, new keys
/// generated here, certified by the CA provider `ca`, its answer checked) are
/// `CredentialDerivation`'s, which works with any card and any CA; this provider only reads the
/// options and finds the CA. The card's options (`uri`, `layout`, `tag`, …) and its PIN (the
/// request's passphrase) go to the card; `ca-option KEY=VALUE` goes to the CA.
public struct DerivationProvider: CredentialProvider {
    let card: any PossessionProvider
    let registry: ProviderRegistry

    /// `registry` holds the CA providers that `ca` may name.
    public init(card: any PossessionProvider = PKCS11Provider(), registry: ProviderRegistry) {
        self.card = card
        self.registry = registry
        descriptor = ProviderDescriptor(
            id: "derive", displayName: "Derived credential (SP 800-157) from a \(card.descriptor.displayName)",
            version: "1",
            options: card.descriptor.options + [
                ProviderOption(
                    name: "ca", summary: "the CA provider that certifies the new keys (testca, or a vendor's)",
                    required: true),
                ProviderOption(
                    name: "ca-option", summary: "KEY=VALUE for the CA provider (dir=DIR for the test CA)",
                    repeatable: true),
                ProviderOption(
                    name: "trust-anchor", summary: "a file of CA certificates the card's certificate must chain to",
                    repeatable: true, required: true),
                ProviderOption(
                    name: "key-algorithm",
                    summary: "the new keys' algorithm: p256, p384, rsa2048, rsa3072 (default: as the card's)",
                    formerName: "algorithm"),
                ProviderOption(
                    name: "crl", summary: "a CRL (PEM or DER) the card's certificate is checked against",
                    repeatable: true),
                ProviderOption(
                    name: "ocsp",
                    summary: "an OCSP responder (http://) for the card's certificate, or aia (the default)",
                    repeatable: true),
                ProviderOption(
                    name: "allow-unchecked-revocation",
                    summary: "true: derive even when the card's revocation status cannot be checked"),
            ])
    }

    /// Id `derive`: the card provider's options plus `ca` and `trust-anchor` (required), `ca-option`,
    /// `key-algorithm`, and the card's revocation check: `crl`, `ocsp` (default: the responders
    /// its certificate names) and `allow-unchecked-revocation`.
    public let descriptor: ProviderDescriptor

    /// Reads the options and runs `CredentialDerivation` with the card and the CA `ca` names.
    /// Throws `DCError/Code/usage` if `ca` names no certifying provider or no trust anchor is given, `DCError/Code/possessionNotProven`
    /// or `DCError/Code/untrustedCertificate` if the card's proof or certificate fails.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        let cardOptionNames = Set(card.descriptor.options.map(\.name))
        let cardRequest = ProviderRequest(
            options: request.options.filter { cardOptionNames.contains($0.key) }, passphrase: request.passphrase,
            workingDirectory: request.workingDirectory, progress: request.progress)
        let caOptions = try ProviderRequest.options(parsing: request.values("ca-option"), what: "ca-option KEY=VALUE")
        let caID = try request.requiredValue("ca")
        guard let ca = try registry.provider(id: caID) as? any CertifyingProvider else {
            throw DCError(
                .usage, "provider '\(caID)' cannot certify derived keys", hint: "use a CA provider such as testca")
        }
        let algorithm = try request.value("key-algorithm", formerly: "algorithm").map { name in
            guard let algorithm = KeyAlgorithm(rawValue: name) else {
                throw DCError(
                    .usage, "unknown key algorithm '\(name)'",
                    hint: "use \(KeyAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return algorithm
        }
        let anchors = try request.values("trust-anchor").flatMap {
            try CredentialReader().read(file: request.resolve($0)).certificates
        }

        let revocation = try RevocationPolicy(
            crlFiles: request.values("crl"), ocsp: request.values("ocsp"),
            allowsUnchecked: try request.value("allow-unchecked-revocation") == "true",
            directory: request.workingDirectory, defaultToCertificateURLs: true)

        return try await CredentialDerivation(
            card: card, cardRequest: cardRequest, ca: ca,
            caRequest: ProviderRequest(
                options: caOptions, workingDirectory: request.workingDirectory, progress: request.progress),
            trustAnchors: anchors, algorithm: algorithm, revocation: revocation
        ).derive()
    }
}
