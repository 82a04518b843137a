import CredentialCoding
import DerivedCredentials
import Foundation

/// A derived credential (NIST SP 800-157), id `derive`: for a card whose keys never leave it.
///
/// 1. A fresh challenge is signed on the card with its authentication key and verified here
///    against the card's certificate (and, with `trust-anchor`, its chain).
/// 2. A new key pair is generated here for each tag the card has, except escrow: new keys cannot
///    decrypt what the card's retired keys protected. The algorithm mirrors the card's key
///    (or `key-algorithm`).
/// 3. The CA provider `ca` (the test CA in CI, a vendor's CA plug-in in production) certifies
///    the public keys with the card certificate's subject, byte for byte, after checking the
///    proof itself. Its answer is checked too: one certificate per key, for that key and subject.
///
/// The result is an ordinary credential. The card's options (`uri`, `layout`, `tag`, …) and its
/// PIN (the request's passphrase) go to the card; `ca-option KEY=VALUE` goes to the CA.
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
                    repeatable: true),
                ProviderOption(
                    name: "key-algorithm",
                    summary: "the new keys' algorithm: p256, p384, rsa2048, rsa3072 (default: as the card's)",
                    formerName: "algorithm"),
            ])
    }

    /// Id `derive`: the card provider's options plus `ca` (required), `ca-option`, `trust-anchor` and `key-algorithm`.
    public let descriptor: ProviderDescriptor

    /// Proves possession on the card, generates new keys, has the CA certify them and checks its answer.
    /// Throws `DCError/Code/usage` if `ca` names no certifying provider, `DCError/Code/possessionNotProven`
    /// or `DCError/Code/untrustedCertificate` if the card's proof or certificate fails.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        let cardOptionNames = Set(card.descriptor.options.map(\.name))
        let cardRequest = ProviderRequest(
            options: request.options.filter { cardOptionNames.contains($0.key) }, passphrase: request.passphrase,
            workingDirectory: request.workingDirectory)
        let caOptions = try ProviderRequest.options(parsing: request.values("ca-option"), what: "ca-option KEY=VALUE")
        let caID = try request.value("ca")!
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

        // 1. Possession, checked here before anything is generated or sent to the CA.
        let challenge = try PossessionCheck.newChallenge()
        let (cardCertificates, proof) = try await card.prove(cardRequest, challenge: challenge)
        try PossessionCheck.verify(proof, challenge: challenge, anchors: anchors)

        // 2. New keys, one per tag the card has (not escrow).
        var keys: [CredentialTag: PrivateKey] = [:]
        var publicKeys: [CredentialTag: [UInt8]] = [:]
        for (tag, certificate) in cardCertificates where tag != .escrow {
            try Task.checkCancellation()
            guard let chosen = try algorithm ?? KeyAlgorithm(publicKeyInfo: certificate.subjectPublicKeyInfo()) else {
                throw DCError(
                    .unsupportedAlgorithm, "the card's \(tag) key is not P-256, P-384, RSA 2048 or RSA 3072",
                    hint: "choose one with algorithm=")
            }
            let key = try KeyGeneration.generate(chosen)
            keys[tag] = key
            publicKeys[tag] = try key.subjectPublicKeyInfo()
        }

        // 3. The CA, whose answer is checked like any plug-in's.
        let subject = try CertificateDetails.subjectDER(of: proof.certificate)
        let certification = try await ca.certify(
            CertificationRequest(
                request: ProviderRequest(options: caOptions, workingDirectory: request.workingDirectory),
                subject: subject,
                publicKeys: publicKeys, proof: proof))
        var entries: [CredentialEntry] = []
        for tag in CredentialTag.allCases {
            guard let key = keys[tag] else { continue }
            guard let certificate = certification.certificates[tag] else {
                throw DCError(.providerProtocol, "the CA did not certify the \(tag) key", subject: caID)
            }
            let parsed = try CredentialReader().certificate(
                der: certificate.derBytes, source: "the CA's \(tag) certificate")
            guard try parsed.subjectPublicKeyInfo() == publicKeys[tag],
                try CertificateDetails.subjectDER(of: parsed) == subject
            else {
                throw DCError(
                    .providerProtocol,
                    "the CA's \(tag) certificate is not for the key and subject it was asked to certify", subject: caID)
            }
            entries.append(try CredentialEntry(tag: tag, certificate: parsed, privateKey: key))
        }
        if let extra = certification.certificates.keys.first(where: { keys[$0] == nil }) {
            throw DCError(
                .providerProtocol, "the CA returned a certificate for \(extra), which it was not asked for",
                subject: caID)
        }
        let card = try CertificateDetails(proof.certificate)
        let details = try entries.map { try CertificateDetails($0.certificate) }
        return ProvidedCredential(
            entries: entries, chain: certification.chain, suggestedName: card.commonName.map { "\($0) (derived)" },
            suggestedSerialNumber: details.first?.serialNumber,
            suggestedExpirationDate: details.compactMap(\.notAfter).min())
    }
}
