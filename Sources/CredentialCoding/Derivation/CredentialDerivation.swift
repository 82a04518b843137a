import DerivedCredentials
import FoundationEssentials

/// A derived credential (NIST SP 800-157) from any card that can prove possession of its key and
/// any CA that can certify keys generated elsewhere:
///
/// 1. The CA issues a fresh challenge (`CertifyingProvider.challenge(_:)`); the card signs it
///    with its authentication key; the proof is verified here against the card's certificate,
///    which must chain to ``trustAnchors``, before anything is generated or sent to the CA.
/// 2. A new key pair is generated here for each tag the card has, except escrow: new keys cannot
///    decrypt what the card's retired keys protected. The algorithm mirrors the card's key (or
///    ``algorithm``).
/// 3. The CA certifies the public keys with the card certificate's subject, byte for byte, after
///    checking the proof (and that it issued the challenge, once) itself. Its answer is checked
///    too: one certificate per key, for that key and subject, and nothing more.
///
/// Only proving is the card's part (`PossessionProvider`); the rest is here.
public struct CredentialDerivation: Sendable {
    /// The card that proves possession of its authentication key.
    public let card: any PossessionProvider
    /// The card's request: its options (a token, a layout, …) and its PIN as the passphrase.
    public let cardRequest: ProviderRequest
    /// The CA that issues the challenge and certifies the new keys.
    public let ca: any CertifyingProvider
    /// The CA's request: its own options (`dir` for the test CA) and working directory.
    public let caRequest: ProviderRequest
    /// The CA certificates the card's certificate must chain to; at least one.
    public let trustAnchors: [Certificate]
    /// The new keys' algorithm; nil mirrors each of the card's keys.
    public let algorithm: KeyAlgorithm?
    /// How the card's certificate is checked for revocation: a derived credential dies with its
    /// card (SP 800-157), so one is never derived from a revoked card, and from a card whose
    /// status is unknown only when the policy allows it by name.
    public let revocation: RevocationPolicy

    /// The default revocation policy: ask the responders the card's certificate names, and refuse
    /// when no answer can be had.
    public static let certificateResponders = RevocationPolicy(sources: RevocationSources(useCertificateURLs: true))

    /// A derivation with these parts. Throws `DCError/Code/usage` when `trustAnchors` is empty: a
    /// card certificate that chains to nothing proves nothing.
    public init(
        card: any PossessionProvider, cardRequest: ProviderRequest, ca: any CertifyingProvider,
        caRequest: ProviderRequest, trustAnchors: [Certificate], algorithm: KeyAlgorithm? = nil,
        revocation: RevocationPolicy = certificateResponders
    ) throws {
        guard !trustAnchors.isEmpty else {
            throw DCError(
                .usage, "deriving needs the CA certificates the card's certificate must chain to",
                hint: "give the card issuer's root as a trust anchor")
        }
        self.card = card
        self.cardRequest = cardRequest
        self.ca = ca
        self.caRequest = caRequest
        self.trustAnchors = trustAnchors
        self.algorithm = algorithm
        self.revocation = revocation
    }

    /// Proves possession on the card over the CA's challenge, checks the card certificate's
    /// revocation status, generates new keys, has the CA certify them and checks its answer.
    /// Throws `DCError/Code/possessionNotProven` or `DCError/Code/untrustedCertificate` if the
    /// card's proof or certificate fails, `DCError/Code/certificateRevoked` or
    /// `DCError/Code/revocationUnchecked` per ``revocation`` (the CA is then not asked to certify), `DCError/Code/providerProtocol` if the CA's answer is not for the keys
    /// and subject it was asked about.
    public func derive() async throws -> ProvidedCredential {
        let caName = ca.descriptor.id

        // 1. Possession over the CA's challenge, checked here before anything is generated.
        // Each step may wait on a card, a responder or a CA: the request's progress hears of it.
        caRequest.report("asking \(caName) for a challenge")
        let challenge = try await ca.challenge(caRequest)
        let (cardCertificates, proof) = try await card.prove(cardRequest, challenge: challenge)
        try PossessionCheck.verify(proof, challenge: challenge, anchors: trustAnchors)
        caRequest.report("checking the card's certificate")
        let cardStatus = try revocation.require(
            revocation.status(of: proof.certificate, issuers: trustAnchors), for: "the card's certificate")

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
            caRequest.report("generating the \(tag) key")
            let key = try KeyGeneration.generate(chosen)
            keys[tag] = key
            publicKeys[tag] = try key.subjectPublicKeyInfo()
        }

        // 3. The CA, whose answer is checked like any plug-in's.
        let subject = try CertificateDetails.subjectDER(of: proof.certificate)
        caRequest.report("asking \(caName) to certify the new keys")
        let certification = try await ca.certify(
            CertificationRequest(request: caRequest, subject: subject, publicKeys: publicKeys, proof: proof))
        var entries: [CredentialEntry] = []
        for tag in CredentialTag.allCases {
            guard let key = keys[tag] else { continue }
            guard let certificate = certification.certificates[tag] else {
                throw DCError(.providerProtocol, "the CA did not certify the \(tag) key", subject: caName)
            }
            let parsed = try CredentialReader().certificate(
                der: certificate.derBytes, source: "the CA's \(tag) certificate")
            guard try parsed.subjectPublicKeyInfo() == publicKeys[tag],
                try CertificateDetails.subjectDER(of: parsed) == subject
            else {
                throw DCError(
                    .providerProtocol,
                    "the CA's \(tag) certificate is not for the key and subject it was asked to certify",
                    subject: caName)
            }
            entries.append(try CredentialEntry(tag: tag, certificate: parsed, privateKey: key))
        }
        if let extra = certification.certificates.keys.first(where: { keys[$0] == nil }) {
            throw DCError(
                .providerProtocol, "the CA returned a certificate for \(extra), which it was not asked for",
                subject: caName)
        }
        let cardDetails = try CertificateDetails(proof.certificate)
        let details = try entries.map { try CertificateDetails($0.certificate) }
        return ProvidedCredential(
            entries: entries, chain: certification.chain,
            suggestedName: cardDetails.commonName.map { "\($0) (derived)" },
            suggestedSerialNumber: details.first?.serialNumber,
            suggestedExpirationDate: details.compactMap(\.notAfter).min(),
            warnings: cardStatus.isKnown ? [] : ["the card's certificate: \(cardStatus) (allowed)"])
    }
}
