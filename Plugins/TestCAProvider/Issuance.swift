import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization
import SystemSupport

/// Deliberately broken certificates, for testing other tools' validation. Never produced unless
/// asked for by name; applied to the authentication entry.
public enum NegativeProfile: String, Sendable, CaseIterable, Codable {
    /// Validity ended a year ago.
    case expired
    /// keyEncipherment instead of digitalSignature.
    case wrongKeyUsage = "wrong-key-usage"
    /// The entry's key is not the certificate's.
    case mismatchedKey = "mismatched-key"
    /// basicConstraints CA:TRUE with keyCertSign.
    case caCertificate = "ca-certificate"
}

/// What to issue.
public struct TestCAIssueRequest: Sendable {
    /// The subject's commonName in the default subject.
    public var commonName: String
    /// The subject to use instead of `O=<organization>, OU=Derived PIV, CN=<commonName>` (for example
    /// a smart card certificate's subject, copied byte for byte).
    public var subject: DistinguishedName?
    /// nil: the CA's algorithm.
    public var algorithm: KeyAlgorithm?
    /// The tags to issue, each at most once; at least one.
    public var tags: [CredentialTag]
    /// Retired escrow pairs (0–20), newest first, each expired, 90 days apart.
    public var escrowHistory: Int
    /// Certificate lifetime in days from ``now``, at least 1, cut at the issuing CA's own expiry.
    public var validityDays: Int
    /// An rfc822Name added to each certificate's subjectAltName.
    public var email: String?
    /// A deliberately broken profile for the authentication entry; nil for a valid credential.
    public var negative: NegativeProfile?
    /// The issue time; certificates start 60 seconds before it, to tolerate clock skew.
    public var now: Date
    /// Told after each key pair is issued: how many of how many.
    public var progress: (@Sendable (_ done: Int, _ total: Int) -> Void)?

    /// A request with these settings; by default `Test User`, all four tags, no history, 365 days.
    public init(
        commonName: String = "Test User", subject: DistinguishedName? = nil, algorithm: KeyAlgorithm? = nil,
        tags: [CredentialTag] = CredentialTag.allCases, escrowHistory: Int = 0, validityDays: Int = 365,
        email: String? = nil, negative: NegativeProfile? = nil, now: Date = Date(),
        progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) {
        self.progress = progress
        self.commonName = commonName
        self.subject = subject
        self.algorithm = algorithm
        self.tags = tags
        self.escrowHistory = escrowHistory
        self.validityDays = validityDays
        self.email = email
        self.negative = negative
        self.now = now
    }
}

extension TestCA {
    /// Issues a credential: one new key and certificate per tag, plus the retired escrow pairs.
    public func issue(_ request: TestCAIssueRequest) throws -> ProvidedCredential {
        guard (0...CredentialEntry.maximumKeyHistory).contains(request.escrowHistory) else {
            throw DCError(.usage, "escrow history must be 0 to \(CredentialEntry.maximumKeyHistory) pairs")
        }
        guard request.escrowHistory == 0 || request.tags.contains(.escrow) else {
            throw DCError(.usage, "an escrow history needs the escrow tag")
        }
        guard request.validityDays > 0 else { throw DCError(.usage, "validity must be at least one day") }
        guard !request.tags.isEmpty, Set(request.tags).count == request.tags.count else {
            throw DCError(.usage, "give each tag at most once, and at least one")
        }
        let algorithm = request.algorithm ?? metadata.algorithm
        let subject =
            request.subject
            ?? DistinguishedName([
                .init("O", metadata.organization), .init("OU", "Derived PIV"), .init("CN", request.commonName),
            ])
        // One UUID for the person across the credential, as the PIV card's UUID (SP 800-73).
        let uuid = UUID().uuidString.lowercased()
        var names: [SubjectAlternativeName] = [.uri("urn:uuid:\(uuid)")]
        if let email = request.email { names.append(.email(email)) }
        // Certificates hold whole seconds; so do the suggestions, or the credential would outlive
        // its certificates by a fraction of a second.
        let now = Date(timeIntervalSince1970: request.now.timeIntervalSince1970.rounded(.down))
        let notBefore = now.addingTimeInterval(-60)  // tolerate small clock skew
        let notAfter = min(now.addingTimeInterval(TimeInterval(request.validityDays) * 86400), issuingNotAfter)

        var entries: [CredentialEntry] = []
        let keys = request.tags.count + (request.tags.contains(.escrow) ? request.escrowHistory : 0)
        var issuedKeys = 0
        func issuedOne() {
            issuedKeys += 1
            request.progress?(issuedKeys, keys)
        }
        for tag in request.tags {
            try Task.checkCancellation()
            var profile = CertificateProfile(
                subject: subject, notBefore: notBefore, notAfter: notAfter,
                keyUsage: TagProfile.of(tag).requiredKeyUsage(for: algorithm),
                extendedKeyUsage: TagProfile.of(tag).issuedPurposes, subjectAlternativeNames: names,
                policies: [Self.policy(tag)], ocspURLs: metadata.ocspURLs, crlURLs: metadata.crlURLs)
            var mismatched = false
            if tag == .authentication, let negative = request.negative {
                switch negative {
                case .expired:
                    profile.notBefore = now.addingTimeInterval(-2 * 365 * 86400)
                    profile.notAfter = now.addingTimeInterval(-365 * 86400)
                case .wrongKeyUsage:
                    profile.keyUsage = [.keyEncipherment, .dataEncipherment]
                case .mismatchedKey:
                    mismatched = true
                case .caCertificate:
                    profile.isCA = true
                    profile.keyUsage.insert(.keyCertSign)
                }
            }
            let issued = try issuer.issueWithNewKey(profile, algorithm: algorithm)
            issuedOne()
            let entryKey = mismatched ? try KeyGeneration.generate(algorithm) : issued.privateKey
            var history: [CertifiedKey] = []
            if tag == .escrow {
                for index in 0..<request.escrowHistory {
                    try Task.checkCancellation()
                    var retired = profile
                    retired.notAfter = now.addingTimeInterval(-Double(index + 1) * 90 * 86400)
                    retired.notBefore = retired.notAfter.addingTimeInterval(-365 * 86400)
                    history.append(try issuer.issueWithNewKey(retired, algorithm: algorithm))
                    issuedOne()
                }
            }
            entries.append(
                try CredentialEntry(
                    tag: tag, certificate: issued.certificate, privateKey: entryKey, keyHistory: history))
        }
        let serial = (0..<8).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
        return ProvidedCredential(
            entries: entries, chain: [issuingCertificate, rootCertificate],
            suggestedName: "\(request.commonName) (test CA)", suggestedSerialNumber: serial,
            suggestedExpirationDate: request.negative == .expired ? now.addingTimeInterval(-365 * 86400) : notAfter)
    }
}

extension TestCA {
    /// Issues one credential per request, on up to `width` threads at a time (by default one per
    /// core this process may run on), and returns them in the order of the requests.
    ///
    /// Each credential is exactly what ``issue(_:)`` makes of its request: its own keys and
    /// certificates, signed with this CA's key, which OpenSSL 3 lets several threads use at once.
    /// A request that fails stops the batch: the requests not started yet are not issued, and the
    /// error of the first failing request (in their order) is thrown; nothing is returned. A
    /// cancelled task issues nothing.
    public func issue(_ requests: [TestCAIssueRequest], width: Int = ParallelWork.availableCores) throws
        -> [ProvidedCredential]
    {
        try Task.checkCancellation()
        let results = Mutex<[Int: Result<ProvidedCredential, any Error>]>([:])
        let failed = Atomic<Bool>(false)
        ParallelWork.forEach(requests.count, width: width) { index in
            guard !failed.load(ordering: .relaxed) else { return }
            let result = Result { try issue(requests[index]) }
            if case .failure = result { failed.store(true, ordering: .relaxed) }
            results.withLock { $0[index] = result }
        }
        // In request order, the first failure is thrown; a request is missing only after one failed.
        return try results.withLock { results in try requests.indices.compactMap { try results[$0]?.get() } }
    }
}
