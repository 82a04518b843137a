import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization

/// The challenges a `cmp` provider issued in this process, each accepted once, within
/// ``lifetime``. The CA behind CMP never sees them: the provider checks the card's proof itself
/// and then vouches for the new keys as the CA's registration authority (`raVerified`).
final class ChallengeBook: Sendable {
    /// How long an issued challenge may wait for its proof.
    static let lifetime: TimeInterval = 300
    private let issued = Mutex<[[UInt8]: Date]>([:])

    /// A fresh challenge, remembered.
    func issue(now: Date = Date()) throws -> [UInt8] {
        let challenge = try PossessionCheck.newChallenge()
        issued.withLock { $0[challenge] = now }
        return challenge
    }

    /// Forgets `challenge`; throws unless this book issued it less than ``lifetime`` ago.
    func redeem(_ challenge: [UInt8], now: Date = Date()) throws {
        let when = issued.withLock { $0.removeValue(forKey: challenge) }
        guard let when, now.timeIntervalSince(when) <= Self.lifetime else {
            throw DCError(
                .possessionNotProven, "the proof is over a challenge this provider did not issue, or accepted already",
                hint: "derive again: each proof is over a fresh challenge")
        }
    }
}

extension CMPProvider: CertifyingProvider {
    /// A fresh challenge, remembered by this provider until ``certify(_:)`` accepts it once.
    public func challenge(_ request: ProviderRequest) async throws -> [UInt8] {
        try request.check(against: descriptor)
        return try challenges.issue()
    }

    /// Checks the card's proof (its signature over a challenge this provider issued, for the
    /// subject asked for), then asks the CA to certify each public key for that subject, byte for
    /// byte, saying that we verified possession (`raVerified`: the CA must be configured to accept
    /// it from us, RFC 9483 section 4.1.4). Escrow keys cannot be derived.
    public func certify(_ request: CertificationRequest) async throws -> Certification {
        try request.request.check(against: descriptor)
        guard !request.publicKeys.isEmpty else { throw DCError(.usage, "no public keys to certify") }
        if request.publicKeys[.escrow] != nil {
            throw DCError(
                .usage, "escrow keys cannot be derived", hint: "derive authentication, signing and encryption")
        }
        for option in ["subject", "new-key", "tag", "key-algorithm"] where !request.request.values(option).isEmpty {
            throw DCError(
                .usage, "option '\(option)' does not apply to derived credentials",
                hint: "the subject is the card certificate's, the keys are made for the card's tags")
        }
        if try request.request.value("archive-certificate") != nil {
            throw DCError(
                .usage, "option 'archive-certificate' does not apply to derived credentials",
                hint: "a derived key is certified by its public key alone, so there is nothing to archive")
        }
        let configuration = try CMPConfiguration(request.request)
        if configuration.requestType == .kur {
            throw DCError(.usage, "derived keys are certified with ir or cr, not kur")
        }
        try PossessionCheck.verify(request.proof)
        guard request.subject == (try CertificateDetails.subjectDER(of: request.proof.certificate)) else {
            throw DCError(.possessionNotProven, "the subject to certify is not the proven certificate's subject")
        }
        try challenges.redeem(request.proof.challenge)
        var certificates: [CredentialTag: Certificate] = [:]
        var chain: [Certificate] = []
        for tag in CredentialTag.allCases {
            guard let publicKey = request.publicKeys[tag] else { continue }
            try Task.checkCancellation()
            let issued = try await configuration.enroll(
                .vouchedPublicKey(publicKey), subject: DistinguishedName(der: request.subject), tag: tag)
            certificates[tag] = issued.certificate
            for certificate in issued.extraCertificates + issued.caPublications
            where !chain.contains(certificate) && certificate != issued.certificate {
                chain.append(certificate)
            }
        }
        chain.removeAll { certificates.values.contains($0) }
        if let record = try request.request.value("record") {
            // Kept by card, so that terminating the card revokes what was derived from it.
            try CMPRecord(directory: request.request.resolve(record)).keep(
                Array(certificates.values), cardSerial: try CertificateDetails(request.proof.certificate).serialNumber)
        }
        return Certification(certificates: certificates, chain: chain)
    }
}

extension CMPProvider {
    /// Asks the CA to revoke each of `certificates` in one `rr` each, protected as `request`'s
    /// options say (`server`, `trust-anchor` and the protection are used; the rest are ignored);
    /// a certificate the CA refuses to revoke stops the rest.
    public func revoke(_ request: ProviderRequest, certificates: [Certificate], reason: RevocationReason) async throws {
        try request.check(against: descriptor)
        let configuration = try CMPConfiguration(request)
        for certificate in certificates {
            try Task.checkCancellation()
            try await configuration.revoke(certificate, reason: reason.code)
        }
    }
}

/// What the `cmp` provider certified for derived credentials, by card: `DIR/CARD/SERIAL.pem`,
/// one certificate a file (`CARD` and `SERIAL` in hex, as `openssl x509 -serial` prints them), so
/// that terminating a card finds every certificate to revoke. The CA keeps its own record; this
/// one names the certificates a revocation request must carry.
public struct CMPRecord: Sendable {
    /// The record's directory.
    public let directory: String

    /// The record in `directory` (created 0700 when something is kept).
    public init(directory: String) { self.directory = directory }

    /// Keeps `certificates` under `cardSerial`, each file written whole (a temporary file renamed).
    func keep(_ certificates: [Certificate], cardSerial: String) throws {
        let card = directory + "/" + (try CertificateRevocationList.canonicalSerial(cardSerial))
        do {
            try FileManager.default.createDirectory(
                atPath: card, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            for certificate in certificates {
                let serial = try CertificateDetails(certificate).serialNumber
                try Data(PEM.certificate(certificate)).write(
                    to: URL(fileURLWithPath: card + "/" + serial + ".pem"), options: .atomic)
            }
        } catch let error as DCError {
            throw error
        } catch {
            throw DCError(.cannotCreateOutput, "cannot keep the derived certificates", subject: card)
        }
    }

    /// The certificates kept for `cardSerial`; empty when there are none.
    public func certificates(cardSerial: String) throws -> [Certificate] {
        let card = directory + "/" + (try CertificateRevocationList.canonicalSerial(cardSerial))
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: card)) ?? []).filter { $0.hasSuffix(".pem") }
        return try names.sorted().flatMap { try CredentialReader().read(file: card + "/" + $0).certificates }
    }
}
