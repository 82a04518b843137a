import CredentialCoding
import DerivedCredentials
import DerivedCredentialsTesting
import ExecProvider
import Foundation
import PKCS11Provider
import TestCAProvider
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

/// One test CA for the suite (creating one generates two keys).
private let caDirectory: TemporaryDirectory = {
    let directory = try! TemporaryDirectory("derive-ca")
    try! TestCA.initialize(at: directory.file("ca"))
    return directory
}()

private func deriveOptions(_ extra: [String: [String]] = [:]) -> [String: [String]] {
    _ = SoftHSM.shared  // SOFTHSM2_CONF before any module is loaded
    return [
        "uri": ["pkcs11:token=PIV%20Card"], "layout": ["piv"], "module": ["softhsm2"], "ca": ["testca"],
        "ca-option": ["dir=\(caDirectory.file("ca"))"], "trust-anchor": [f.ca.certificate],
        // The openssl fixtures' CA publishes no responder; the revocation tests give it CRLs.
        "allow-unchecked-revocation": ["true"],
    ]
    .merging(extra) { _, new in new }
}

private func pin(_ value: String = SoftHSM.userPIN) -> FixedPassphrase {
    FixedPassphrase(SecretBytes(Array(value.utf8)))
}

private func derive(
    _ options: [String: [String]] = deriveOptions(), card: any PossessionProvider = PKCS11Provider(),
    ca: any CredentialProvider = TestCAProvider()
) async throws -> ProvidedCredential {
    try await DerivationProvider(card: card, registry: ProviderRegistry([ca, PKCS11Provider()])).provide(
        ProviderRequest(options: options, passphrase: pin()))
}

private func certificate(_ pem: String) throws -> Certificate { Certificate(derBytes: try HostileInput.der(of: pem)) }

/// A card that lies (fake: SoftHSM and the real tools cannot make a card sign one challenge and
/// report another, or present a certificate its key does not match, through the same call).
private struct LyingCard: PossessionProvider {
    enum Lie { case otherCertificate, otherChallenge }
    let lie: Lie
    let descriptor = PKCS11Provider().descriptor
    func provide(_ request: ProviderRequest) async throws -> ProvidedCredential { throw DCError(.unknown, "not used") }
    func prove(_ request: ProviderRequest, challenge: [UInt8]) async throws -> (
        certificates: [CredentialTag: Certificate], proof: PossessionProof
    ) {
        switch lie {
        case .otherCertificate:
            var (certificates, proof) = try await PKCS11Provider().prove(request, challenge: challenge)
            proof.certificate = try certificate(f.signing.certificate)
            certificates[.authentication] = proof.certificate
            return (certificates, proof)
        case .otherChallenge:
            return try await PKCS11Provider().prove(request, challenge: try PossessionCheck.newChallenge())
        }
    }
}

/// A CA that records whether it was asked, and may answer wrongly (fake: a plug-in that lies).
private final class SpyCA: CertifyingProvider, @unchecked Sendable {
    enum Answer { case honest, swapped, missing }
    let answer: Answer
    private let lock = NSLock()
    private var calls = 0  // guarded by `lock`
    var callCount: Int { lock.withLock { calls } }
    let descriptor = TestCAProvider().descriptor
    init(_ answer: Answer = .honest) { self.answer = answer }
    func provide(_ request: ProviderRequest) async throws -> ProvidedCredential { throw DCError(.unknown, "not used") }
    func challenge(_ request: ProviderRequest) async throws -> [UInt8] {
        try await TestCAProvider().challenge(request)
    }
    func certify(_ request: CertificationRequest) async throws -> Certification {
        lock.withLock { calls += 1 }
        var certification = try await TestCAProvider().certify(request)
        switch answer {
        case .honest: break
        case .swapped: certification.certificates[.authentication] = certification.certificates[.signing]
        case .missing: certification.certificates[.encryption] = nil
        }
        return certification
    }
}

@Suite("SP 800-157 derivation from a card whose keys cannot leave it", .ownThreads, .softHSM, .timeLimit(.minutes(3)))
struct DerivationTests {
    /// Swift Testing makes a suite value per test: every test here prepares the SoftHSM fixture
    /// (and SOFTHSM2_CONF) before it can load the module, whatever runs first in the process.
    init() { _ = SoftHSM.shared }

    @Test(
        "Possession proven on the card, new keys certified with the card's subject byte for byte; the credential validates"
    )
    func derives() async throws {
        let provided = try await derive()
        // Escrow is not derived (the card's retired slot 05 stays on the card).
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption])
        let card = try certificate(f.authentication.certificate)
        let subject = try CertificateDetails.subjectDER(of: card)
        for entry in provided.entries {
            #expect(try CertificateDetails.subjectDER(of: entry.certificate) == subject)
            #expect(try entry.certificate.subjectPublicKeyInfo() == entry.privateKey.subjectPublicKeyInfo())
            #expect(entry.keyHistory.isEmpty)
        }
        // New keys, mirroring the card's algorithms (01 P-256, 02 P-384, 03 P-256).
        let cardKeys = try [f.authentication, f.signing, f.escrow].map {
            try certificate($0.certificate).subjectPublicKeyInfo()
        }
        #expect(
            try provided.entries.map { try $0.certificate.subjectPublicKeyInfo() }.allSatisfy { !cardKeys.contains($0) }
        )
        #expect(
            try provided.entries.map { try CertificateDetails($0.certificate).keyAlgorithm } == [
                "EC P-256", "EC P-384", "EC P-256",
            ])
        #expect(provided.suggestedName == "Alice authentication (derived)")
        let ca = try TestCA(directory: caDirectory.file("ca"))
        let verdict = CredentialValidator(trustAnchors: [ca.rootCertificate], intermediates: provided.chain).validate(
            try provided.credential())
        #expect(verdict.errors.isEmpty, "\(verdict.findings)")
    }

    @Test("The card's certificate must chain to the trust anchors, which are required; the CA is not asked otherwise")
    func trustAnchors() async throws {
        let unanchored = SpyCA()
        do {
            _ = try await derive(deriveOptions().filter { $0.key != "trust-anchor" }, ca: unanchored)
            Issue.record("a derivation without trust anchors went ahead")
        } catch let error as DCError {
            #expect(error.code == .usage, "\(error)")
        }
        #expect(unanchored.callCount == 0)
        let spy = SpyCA()
        _ = try await derive(deriveOptions(["trust-anchor": [f.ca.certificate]]), ca: spy)
        #expect(spy.callCount == 1)
        let refused = SpyCA()
        do {
            _ = try await derive(deriveOptions(["trust-anchor": [f.otherCA.certificate]]), ca: refused)
            Issue.record("a card certificate from another CA was accepted")
        } catch let error as DCError {
            #expect(error.code == .untrustedCertificate)
            #expect(error.code.category.exitStatus == 77)
        }
        #expect(refused.callCount == 0)
    }

    @Test(
        "The card's certificate is checked for revocation before the CA certifies: revoked is refused (79), unknown (no source, a stale CRL) refused (75) unless allowed by name, which warns; a current CRL (openssl ca -gencrl) that does not list it goes ahead"
    )
    func cardRevocation() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let good = try f.crl(revoking: [], name: "good.crl", in: dir)
        let revoked = try f.crl(revoking: [f.authentication], name: "revoked.crl", in: dir)
        let stale = try f.crl(revoking: [], seconds: 1, name: "stale.crl", in: dir)
        var checked = deriveOptions()
        checked["allow-unchecked-revocation"] = nil
        func refused(_ options: [String: [String]], _ code: DCError.Code, _ words: String) async throws {
            let spy = SpyCA()
            do {
                _ = try await derive(options, ca: spy)
                Issue.record("derived with \(options)")
            } catch let error as DCError {
                #expect(error.code == code, "\(error)")
                #expect(error.description.contains(words), "\(error)")
            }
            #expect(spy.callCount == 0)
        }
        try await refused(checked.merging(["crl": [revoked]]) { $1 }, .certificateRevoked, "keyCompromise")
        #expect(DCError.Code.certificateRevoked.category.exitStatus == 79)
        // The fixtures' card certificate names no OCSP responder: nothing to ask.
        try await refused(checked, .revocationUnchecked, "the card's certificate: revocation status unknown")
        #expect(DCError.Code.revocationUnchecked.category.exitStatus == 75)
        try await Task.sleep(for: .seconds(2))
        try await refused(checked.merging(["crl": [stale]]) { $1 }, .revocationUnchecked, "stale")
        // Revoked stays refused even when unchecked status is allowed.
        try await refused(
            checked.merging(["crl": [revoked], "allow-unchecked-revocation": ["true"]]) { $1 }, .certificateRevoked,
            "revoked")

        let allowed = try await derive(
            checked.merging(["crl": [stale], "allow-unchecked-revocation": ["true"]]) { $1 })
        #expect(allowed.warnings.count == 1 && allowed.warnings[0].contains("not checked"), "\(allowed.warnings)")
        let current = try await derive(checked.merging(["crl": [good]]) { $1 })
        #expect(current.warnings.isEmpty && current.entries.count == 3, "\(current.warnings)")
    }

    @Test(
        "A card that lies about its certificate or the challenge is refused before the CA is asked",
        arguments: [LyingCard.Lie.otherCertificate, .otherChallenge])
    fileprivate func lyingCard(_ lie: LyingCard.Lie) async throws {
        let spy = SpyCA()
        do {
            _ = try await derive(card: LyingCard(lie: lie), ca: spy)
            Issue.record("a lying card was believed")
        } catch let error as DCError {
            #expect(error.code == .possessionNotProven, "\(error)")
        }
        #expect(spy.callCount == 0)
    }

    @Test(
        "A CA that answers with the wrong certificate, or leaves one out, is a protocol error",
        arguments: [SpyCA.Answer.swapped, .missing])
    fileprivate func lyingCA(_ answer: SpyCA.Answer) async throws {
        do {
            _ = try await derive(ca: SpyCA(answer))
            Issue.record("a lying CA was believed")
        } catch let error as DCError {
            #expect(error.code == .providerProtocol, "\(error)")
        }
    }

    @Test("The test CA checks the proof itself: another subject, a forged signature and an escrow key are refused")
    func caChecksProof() async throws {
        let challenge = try await TestCAProvider().challenge(
            ProviderRequest(options: ["dir": [caDirectory.file("ca")]]))
        let (_, proof) = try await PKCS11Provider().prove(
            ProviderRequest(
                options: ["uri": ["pkcs11:token=PIV%20Card"], "layout": ["piv"], "module": ["softhsm2"]],
                passphrase: pin()), challenge: challenge)
        let key = try KeyGeneration.generate(.p256).subjectPublicKeyInfo()
        let ca = ProviderRequest(options: ["dir": [caDirectory.file("ca")]])
        let subject = try CertificateDetails.subjectDER(of: proof.certificate)
        let certified = try await TestCAProvider().certify(
            CertificationRequest(request: ca, subject: subject, publicKeys: [.authentication: key], proof: proof))
        #expect(certified.certificates.count == 1)

        var forged = proof
        forged.signature[forged.signature.count - 3] ^= 0x01
        let otherSubject = try CertificateDetails.subjectDER(of: try certificate(f.signing.certificate))
        let bad: [(CertificationRequest, DCError.Code)] = [
            (
                CertificationRequest(
                    request: ca, subject: otherSubject, publicKeys: [.authentication: key], proof: proof),
                .possessionNotProven
            ),
            (
                CertificationRequest(request: ca, subject: subject, publicKeys: [.authentication: key], proof: forged),
                .possessionNotProven
            ),
            (CertificationRequest(request: ca, subject: subject, publicKeys: [.escrow: key], proof: proof), .usage),
            (
                CertificationRequest(
                    request: ca, subject: subject, publicKeys: [.authentication: [0x30, 0x00]], proof: proof),
                .unsupportedAlgorithm
            ),
        ]
        for (request, code) in bad {
            do {
                _ = try await TestCAProvider().certify(request)
                Issue.record("the test CA certified a bad request (\(code))")
            } catch let error as DCError {
                #expect(error.code == code, "\(error)")
            }
        }
    }

    @Test(
        "The challenge comes from the CA: a proof over a challenge the caller chose, or a replayed proof, is refused")
    func challengeFromTheCA() async throws {
        let card = ProviderRequest(
            options: ["uri": ["pkcs11:token=PIV%20Card"], "layout": ["piv"], "module": ["softhsm2"]], passphrase: pin())
        let ca = ProviderRequest(options: ["dir": [caDirectory.file("ca")]])
        let key = try KeyGeneration.generate(.p256).subjectPublicKeyInfo()
        func certify(_ proof: PossessionProof) async throws -> Certification {
            try await TestCAProvider().certify(
                CertificationRequest(
                    request: ca, subject: try CertificateDetails.subjectDER(of: proof.certificate),
                    publicKeys: [.authentication: key], proof: proof))
        }
        func expectRefused(_ proof: PossessionProof, _ what: String) async throws {
            do {
                _ = try await certify(proof)
                Issue.record("the test CA certified \(what)")
            } catch let error as DCError {
                #expect(error.code == .possessionNotProven, "\(what): \(error)")
            }
        }
        // A well-formed challenge the caller made up: the card signs it, the CA never issued it.
        let (_, chosen) = try await PKCS11Provider().prove(card, challenge: try PossessionCheck.newChallenge())
        try await expectRefused(chosen, "a proof over a challenge it did not issue")

        // The CA's own challenge is accepted once; the same proof again is a replay.
        let issued = try await TestCAProvider().challenge(ca)
        let (_, proof) = try await PKCS11Provider().prove(card, challenge: issued)
        #expect(try await certify(proof).certificates.count == 1)
        try await expectRefused(proof, "a replayed proof")
    }

    @Test("Chosen algorithms, a CA that cannot certify, and the conformance kit")
    func optionsAndConformance() async throws {
        let rsa = try await derive(deriveOptions(["algorithm": ["rsa2048"]]))
        #expect(
            try rsa.entries.map { try CertificateDetails($0.certificate).keyAlgorithm } == [
                "RSA 2048", "RSA 2048", "RSA 2048",
            ])
        do {
            _ = try await derive(deriveOptions(["ca": ["pkcs11"]]))
            Issue.record("pkcs11 accepted as a CA")
        } catch let error as DCError {
            #expect(error.code == .usage)
        }
        let registry = ProviderRegistry([TestCAProvider()])
        let report = await ProviderConformance.check(
            DerivationProvider(registry: registry),
            request: ProviderRequest(options: deriveOptions(), passphrase: pin()),
            failingRequests: [
                ProviderRequest(options: deriveOptions(), passphrase: NoPassphrase()),
                ProviderRequest(options: deriveOptions(["ca-option": ["dir=/nonexistent"]]), passphrase: pin()),
                ProviderRequest(
                    options: deriveOptions(["uri": ["pkcs11:token=Export%20Card"]]).filter { $0.key != "layout" }
                        .merging(["tag": ["signing=02"]]) { a, _ in a }, passphrase: pin()),
            ],
            trustAnchors: [try TestCA(directory: caDirectory.file("ca")).rootCertificate])
        #expect(report.isConforming, "\(report)")
    }

    @Test(
        "A vendor's CA as an exec plug-in (the sample, openssl inside) certifies derived keys; a lying one is refused")
    func execCA() async throws {
        let sample = URL(fileURLWithPath: sampleExecProvider).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("exec-ca/dcprovider-sample-ca").path
        let options = deriveOptions(["ca": ["sample-ca"]])
        let provided = try await derive(options, ca: ExecProvider(path: sample, id: "sample-ca"))
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption])
        let root = try TestCA(directory: caDirectory.file("ca")).rootCertificate
        let verdict = CredentialValidator(trustAnchors: [root], intermediates: provided.chain).validate(
            try provided.credential())
        #expect(verdict.errors.isEmpty, "\(verdict.findings)")

        // The sample issues the challenge and accepts a proof over it once: a proof over a
        // challenge the caller chose, and the same proof again, are refused.
        let plugin = ExecProvider(path: sample, id: "sample-ca")
        let card = ProviderRequest(
            options: ["uri": ["pkcs11:token=PIV%20Card"], "layout": ["piv"], "module": ["softhsm2"]], passphrase: pin())
        let ca = ProviderRequest(options: ["dir": [caDirectory.file("ca")]])
        let key = try KeyGeneration.generate(.p256).subjectPublicKeyInfo()
        func certify(_ proof: PossessionProof) async throws -> Certification {
            try await plugin.certify(
                CertificationRequest(
                    request: ca, subject: try CertificateDetails.subjectDER(of: proof.certificate),
                    publicKeys: [.authentication: key], proof: proof))
        }
        let (_, chosen) = try await PKCS11Provider().prove(card, challenge: try PossessionCheck.newChallenge())
        let (_, proof) = try await PKCS11Provider().prove(card, challenge: try await plugin.challenge(ca))
        #expect(try await certify(proof).certificates.count == 1)
        for (bad, what) in [(chosen, "a caller's challenge"), (proof, "a replayed proof")] {
            do {
                _ = try await certify(bad)
                Issue.record("the sample CA certified \(what)")
            } catch let error as DCError {
                #expect(error.code == .possessionNotProven, "\(what): \(error)")
            }
        }

        // A plug-in that answers with the card's own certificate for the new key: refused.
        let dir = try TemporaryDirectory("lying-ca")
        defer { dir.remove() }
        let liar = try dir.write(
            "dcprovider-liar",
            """
            #!/usr/bin/env python3
            import base64, json, secrets, sys
            request = json.loads(sys.stdin.read())
            if request["operation"] == "challenge":
                challenge = b"dcprovision proof of possession (SP 800-157) v1\\n" + secrets.token_bytes(32)
                print(json.dumps({"protocol": 1, "challenge": base64.b64encode(challenge).decode()}))
            else:
                print(json.dumps({"protocol": 1, "certification": {"certificates": {"authentication": request["proof"]["certificate"]}}}))
            """)
        chmod(liar, 0o755)
        do {
            _ = try await derive(deriveOptions(["ca": ["liar"]]), ca: ExecProvider(path: liar, id: "liar"))
            Issue.record("a lying CA plug-in was believed")
        } catch let error as DCError {
            #expect(error.code == .providerProtocol, "\(error)")
        }
    }
}
