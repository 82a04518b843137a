import CredentialCoding
import DerivedCredentials
import Foundation

extension TestCA {
    /// Certifies public keys generated elsewhere for a derived credential (SP 800-157): the request
    /// is checked first (keys of allowed algorithms, no escrow), then the proof (the signature, the
    /// subject asked for being the card certificate's, and the challenge being one this CA issued
    /// with ``newChallenge()`` and has not accepted before), then each key gets its tag's profile
    /// with that subject, byte for byte. Escrow cannot be derived: new keys cannot decrypt what the
    /// card's old keys protected.
    public func certify(
        _ request: CertificationRequest, validityDays: Int = 365, email: String? = nil, now: Date = Date()
    ) throws
        -> Certification
    {
        guard !request.publicKeys.isEmpty else { throw DCError(.usage, "no public keys to certify") }
        if request.publicKeys[.escrow] != nil {
            throw DCError(
                .usage, "escrow keys cannot be derived", hint: "derive authentication, signing and encryption")
        }
        guard validityDays > 0 else { throw DCError(.usage, "validity must be at least one day") }
        var algorithms: [CredentialTag: KeyAlgorithm] = [:]
        for (tag, publicKey) in request.publicKeys {
            guard let algorithm = KeyAlgorithm(publicKeyInfo: publicKey), TagProfile.of(tag).allows(algorithm) else {
                throw DCError(.unsupportedAlgorithm, "the \(tag) key is not P-256, P-384, RSA 2048 or RSA 3072")
            }
            algorithms[tag] = algorithm
        }
        try PossessionCheck.verify(request.proof, now: now)
        guard request.subject == (try CertificateDetails.subjectDER(of: request.proof.certificate)) else {
            throw DCError(.possessionNotProven, "the subject to certify is not the proven certificate's subject")
        }
        try redeem(request.proof.challenge, now: now)
        let subject = DistinguishedName(der: request.subject)
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let notAfter = min(now.addingTimeInterval(TimeInterval(validityDays) * 86400), issuingNotAfter)
        var names: [SubjectAlternativeName] = [.uri("urn:uuid:\(UUID().uuidString.lowercased())")]
        if let email { names.append(.email(email)) }
        var certificates: [CredentialTag: Certificate] = [:]
        for tag in CredentialTag.allCases {
            guard let publicKey = request.publicKeys[tag], let algorithm = algorithms[tag] else { continue }
            try Task.checkCancellation()
            let profile = CertificateProfile(
                subject: subject, notBefore: now.addingTimeInterval(-60), notAfter: notAfter,
                keyUsage: TagProfile.of(tag).requiredKeyUsage(for: algorithm),
                extendedKeyUsage: TagProfile.of(tag).issuedPurposes, subjectAlternativeNames: names,
                policies: [Self.policy(tag)], ocspURLs: metadata.ocspURLs, crlURLs: metadata.crlURLs)
            certificates[tag] = try issuer.issue(profile, publicKeyInfo: publicKey)
        }
        return Certification(certificates: certificates, chain: [issuingCertificate, rootCertificate])
    }
}

extension TestCAProvider: CertifyingProvider {
    /// A fresh challenge from the test CA in `dir` (``TestCA/newChallenge()``); other options are
    /// those of ``certify(_:)`` and are ignored here.
    public func challenge(_ request: ProviderRequest) async throws -> [UInt8] {
        try request.check(against: descriptor)
        return try TestCA(directory: request.resolve(try request.requiredValue("dir"))).newChallenge()
    }

    /// Options: `dir` (required), `validity-days`, `email`. The certificates are recorded in the
    /// CA's database with the card certificate's serial (``TestCA/record(_:cardSerial:archiving:now:)``).
    public func certify(_ request: CertificationRequest) async throws -> Certification {
        try request.request.check(against: descriptor)
        let allowed: Set = ["dir", "validity-days", "email"]
        if let other = request.request.options.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw DCError(
                .usage, "option '\(other)' does not apply to derived credentials",
                hint: "the test CA takes dir, validity-days and email here")
        }
        try Task.checkCancellation()
        let ca = try TestCA(directory: request.request.resolve(try request.request.requiredValue("dir")))
        let days = try request.request.value("validity-days").map { days in
            guard let count = Int(days) else { throw DCError(.usage, "validity-days must be a number") }
            return count
        }
        let certification = try ca.certify(
            request, validityDays: days ?? 365, email: try request.request.value("email"))
        // Tied to the card, so that terminating the card revokes what was derived from it.
        try ca.record(
            certification.certificates.mapValues { [$0] },
            cardSerial: try CertificateDetails(request.proof.certificate).serialNumber)
        return certification
    }
}
