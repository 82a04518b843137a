internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

/// Checking an SP 800-157 proof of possession with OpenSSL: the challenge, the signature, and the
/// certificate it rests on.
public enum PossessionCheck {
    /// Every challenge starts with this, so that a card asked to sign one never signs something
    /// that means anything elsewhere (a TLS handshake, a document).
    public static let challengeContext = Array("dcprovision proof of possession (SP 800-157) v1\n".utf8)

    /// A fresh challenge: the context and 32 random bytes.
    public static func newChallenge() throws -> [UInt8] {
        challengeContext + (try Digests.random(32)).withUnsafeBytes { Array($0) }
    }

    /// A PKCS#11 `CKM_ECDSA` signature (r ‖ s, each the size of the curve) as the DER
    /// ECDSA-Sig-Value that X.509 and OpenSSL use.
    public static func ecdsaSignatureDER(raw: [UInt8]) throws -> [UInt8] {
        guard !raw.isEmpty, raw.count % 2 == 0, raw.count <= 264 else {
            throw DCError(.malformedInput, "the card returned an ECDSA signature of \(raw.count) bytes")
        }
        let half = raw.count / 2
        guard let signature = ECDSA_SIG_new() else { throw OpenSSL.failure("ECDSA_SIG_new") }
        defer { ECDSA_SIG_free(signature) }
        let r = BN_bin2bn(raw, Int32(half), nil)
        let s = Array(raw[half...]).withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            throw OpenSSL.failure("ECDSA_SIG_set0")
        }
        guard let der = encodeDER({ i2d_ECDSA_SIG(signature, $0) }) else { throw OpenSSL.failure("i2d_ECDSA_SIG") }
        return der
    }

    /// Checks that `proof` holds at `now`: the challenge is the one asked for, the signature over it
    /// verifies with the certificate's key (SHA-256), and the certificate is in its validity period
    /// and allows digitalSignature. With `anchors`, the certificate must also chain to one of them
    /// (`intermediates` help build the chain). Every failure is a refusal naming what failed.
    public static func verify(
        _ proof: PossessionProof, challenge: [UInt8]? = nil, anchors: [Certificate] = [],
        intermediates: [Certificate] = [],
        now: Date = Date()
    ) throws {
        let x509 = try X509Certificate(proof.certificate)
        let details = try CertificateDetails(proof.certificate)
        if let challenge, !Digests.constantTimeEqual(challenge, proof.challenge) {
            throw DCError(
                .possessionNotProven, "the card signed a different challenge from the one it was given",
                subject: details.subject)
        }
        guard proof.challenge.starts(with: challengeContext), proof.challenge.count >= challengeContext.count + 32
        else {
            throw DCError(
                .possessionNotProven, "the challenge is not a dcprovision possession challenge",
                subject: details.subject)
        }
        guard let key = PKey.fromCertificate(x509) else {
            throw DCError(
                .unsupportedAlgorithm, "the certificate's public key cannot be read", subject: details.subject)
        }
        guard let context = EVP_MD_CTX_new() else { throw OpenSSL.failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key.pointer) == 1 else {
            throw OpenSSL.failure("EVP_DigestVerifyInit")
        }
        let verified = EVP_DigestVerify(
            context, proof.signature, proof.signature.count, proof.challenge, proof.challenge.count)
        OpenSSLError.clear()
        guard verified == 1 else {
            throw DCError(
                .possessionNotProven, "the signature over the challenge does not verify with the card's certificate",
                subject: details.subject,
                hint: "the key that signed is not the certificate's: is the right card and slot selected?")
        }
        if let notBefore = details.notBefore, now < notBefore {
            throw DCError(.untrustedCertificate, "the card's certificate is not valid yet", subject: details.subject)
        }
        if let notAfter = details.notAfter, now > notAfter {
            throw DCError(.untrustedCertificate, "the card's certificate has expired", subject: details.subject)
        }
        // The card authentication key (PIV 9E) signs without a PIN: anyone holding the card could
        // make this proof. A derived credential stands for the person, so it needs the PIN-guarded
        // PIV authentication key (9A).
        if let purposes = details.extendedKeyUsage, purposes.contains(.pivCardAuthentication) {
            throw DCError(
                .untrustedCertificate,
                "the card's certificate is its card authentication certificate (PIV 9E): it proves the card, not its holder, and needs no PIN",
                subject: details.subject, hint: "prove possession with the PIV authentication key (slot 9A)")
        }
        if let usage = details.keyUsage, !usage.contains(.digitalSignature) {
            throw DCError(
                .untrustedCertificate, "the card's certificate does not allow digitalSignature",
                subject: details.subject)
        }
        if !anchors.isEmpty {
            let reason = x509.verifyChain(
                anchors: try anchors.map { try X509Certificate($0) },
                intermediates: try intermediates.map { try X509Certificate($0) },
                at: now, checkTime: true)
            if let reason {
                throw DCError(
                    .untrustedCertificate, "the card's certificate does not chain to the trust anchors: \(reason)",
                    subject: details.subject,
                    hint: "give the card issuer's root (and intermediates) as trust anchors")
            }
        }
    }
}

extension PrivateKey {
    /// The SubjectPublicKeyInfo (DER) of this key's public half: what a CA certifies.
    public func subjectPublicKeyInfo() throws -> [UInt8] {
        guard let key = PKey.from(self) else {
            throw DCError(.malformedInput, "the private key cannot be read")
        }
        return try key.subjectPublicKeyInfo()
    }
}

extension Certificate {
    /// The SubjectPublicKeyInfo (DER) this certificate carries.
    public func subjectPublicKeyInfo() throws -> [UInt8] {
        try X509Certificate(self).subjectPublicKeyInfo()
    }
}

extension CertificateSigner {
    /// Issues a certificate for a public key given as a SubjectPublicKeyInfo (DER): the key was
    /// generated elsewhere and its private half never comes here.
    public func issue(_ profile: CertificateProfile, publicKeyInfo: [UInt8]) throws -> Certificate {
        guard let key = PKey.fromSubjectPublicKeyInfo(publicKeyInfo) else {
            throw DCError(.malformedInput, "the public key to certify cannot be read")
        }
        return try issue(profile, for: key)
    }
}

extension KeyAlgorithm {
    /// The algorithm of a SubjectPublicKeyInfo (DER), or nil when it is none of ours.
    public init?(publicKeyInfo: [UInt8]) {
        guard let description = PKey.fromSubjectPublicKeyInfo(publicKeyInfo)?.algorithmDescription else { return nil }
        guard let algorithm = KeyAlgorithm.allCases.first(where: { $0.description == description }) else { return nil }
        self = algorithm
    }
}
