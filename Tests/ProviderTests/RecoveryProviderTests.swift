import CredentialCoding
import DerivedCredentials
import ExecProvider
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// The recovery step of the provider protocol: the test CA answers it in process, and a vendor's
/// CA plug-in over the exec protocol (the sample, which opens the test CA's archive with
/// `openssl cms -decrypt`) gives the same pairs.
@Suite("Key recovery through providers: the test CA and an exec plug-in agree", .ownThreads, .timeLimit(.minutes(3)))
struct RecoveryProviderTests {
    @Test(
        "recover: the test CA and the sample exec CA return the same archived pairs for a subject, newest first; another subject gets only its own; a wrong recovery key is refused"
    )
    func recoverAgrees() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try OpenSSLFixtures.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            dir.file("recovery.key"), "-out", dir.file("recovery.pem"), "-subj", "/CN=Key Recovery Officer",
        ])
        let recovery = try CredentialReader().read(file: dir.file("recovery.pem")).certificates[0]
        try TestCA.initialize(at: dir.file("ca"), recoveryCertificate: recovery)
        let provider = TestCAProvider()
        var options: [String: [String]] = ["dir": [dir.file("ca")], "escrow-history": ["2"]]
        let first = try await provider.provide(ProviderRequest(options: options))
        let second = try await provider.provide(ProviderRequest(options: options))
        options["common-name"] = ["Somebody Else"]
        let stranger = try await provider.provide(ProviderRequest(options: options))

        let subject = try CertificateDetails.subjectDER(
            of: try #require(first.entries.first { $0.tag == .escrow }).certificate)
        let request = ProviderRequest(options: ["dir": [dir.file("ca")], "recovery-key": [dir.file("recovery.key")]])
        let ours = try await provider.recover(request, subject: subject)
        // Two credentials, each an encryption pair, an escrow pair and two retired: eight pairs.
        #expect(ours.count == 8)
        let issued = [first, second].flatMap { credential in
            credential.entries.filter { $0.tag == .encryption || $0.tag == .escrow }.flatMap {
                [$0.certifiedKey] + $0.keyHistory
            }
        }
        #expect(Set(ours.map(\.certificate.derBytes)) == Set(issued.map(\.certificate.derBytes)))
        let starts = try ours.map { try #require(try CertificateDetails($0.certificate).notBefore) }
        #expect(starts == starts.sorted(by: >))
        for pair in ours {
            #expect(try pair.privateKey.subjectPublicKeyInfo() == pair.certificate.subjectPublicKeyInfo())
        }
        #expect(
            try await provider.recover(
                request,
                subject: try CertificateDetails.subjectDER(
                    of: try #require(stranger.entries.first { $0.tag == .escrow }).certificate)
            ).count == 4)

        let sample = Repository.root + "/Samples/exec-ca/dcprovider-sample-ca"
        let theirs = try await ExecProvider(path: sample, id: "sample-ca").recover(request, subject: subject)
        #expect(theirs.map(\.certificate) == ours.map(\.certificate))

        _ = try OpenSSLFixtures.openssl([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", dir.file("other.key"),
        ])
        do {
            _ = try await provider.recover(
                ProviderRequest(options: ["dir": [dir.file("ca")], "recovery-key": [dir.file("other.key")]]),
                subject: subject)
            Issue.record("another key opened the archive")
        } catch let error as DCError {
            #expect(error.code == .noMatchingKey, "\(error)")
        }
    }
}
