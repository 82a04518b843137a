import CredentialCoding
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// One CA for the suite (RSA generation is slow); tests that need their own make one.
private let shared: (dir: TemporaryDirectory, ca: TestCA) = {
    let dir = try! TemporaryDirectory("testca")
    let ca = try! TestCA.initialize(at: dir.file("ca"))
    return (dir, ca)
}()

private func validator(_ ca: TestCA) -> CredentialValidator {
    CredentialValidator(trustAnchors: [ca.rootCertificate], intermediates: [ca.issuingCertificate])
}

@Suite("Test CA", .ownThreads, .timeLimit(.minutes(3)))
struct TestCATests {
    @Test("init makes a private directory with 0600 keys and refuses to overwrite")
    func initialize() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("ca")
        try TestCA.initialize(at: path)
        var info = stat()
        stat(path, &info)
        #expect(info.st_mode & 0o777 == 0o700)
        for key in ["root.key", "issuing.key"] {
            stat(path + "/" + key, &info)
            #expect(info.st_mode & 0o777 == 0o600)
        }
        #expect(dir.contents() == ["ca"])
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: path).sorted() == [
                "issuing.key", "issuing.pem", "root.key", "root.pem", "testca.json",
            ])
        let before = try readBytes(path + "/root.key")
        #expect(throws: DCError.self) { try TestCA.initialize(at: path) }
        #expect(try readBytes(path + "/root.key") == before)
    }

    @Test("Issued credentials validate cleanly, strictly, for every algorithm", arguments: KeyAlgorithm.allCases)
    func validates(algorithm: KeyAlgorithm) throws {
        let issued = try shared.ca.issue(TestCAIssueRequest(algorithm: algorithm, escrowHistory: 2))
        let credential = try issued.credential()
        #expect(credential.tags == CredentialTag.allCases)
        #expect(credential[.escrow]?.keyHistory.count == 2)
        let verdict = validator(shared.ca).validate(credential)
        #expect(verdict.passes(strict: true), "\(verdict.findings)")
        // Only information: the retired escrow pairs are expired.
        #expect(verdict.findings.allSatisfy { $0.severity == .info && $0.code == "expired" && $0.tag == .escrow })
        #expect(PrivateKeyDetails.describe(credential[.signing]!.privateKey) == algorithm.description)
    }

    @Test("Profiles: key usage, EKU, CA:FALSE, a UUID SAN, test policies, unique serials, validity within the CA's")
    func profiles() throws {
        let issued = try shared.ca.issue(TestCAIssueRequest(commonName: "Alice", validityDays: 100_000))
        let details = try issued.entries.map { try CertificateDetails($0.certificate) }
        #expect(
            details.map { $0.keyUsage?.names } == [
                ["digitalSignature"], ["digitalSignature", "nonRepudiation"], ["keyAgreement"], ["keyAgreement"],
            ])
        #expect(
            details[0].extendedKeyUsage == [
                ExtendedKeyUsage.clientAuth, ExtendedKeyUsage.smartcardLogon, ExtendedKeyUsage.pkinitClientAuth,
            ])
        #expect(details.allSatisfy { $0.subject == "CN=Alice,OU=Derived PIV,O=Derived Credentials Test" })
        #expect(Set(details.map(\.serialNumber)).count == 4)
        let caNotAfter = try CertificateDetails(shared.ca.issuingCertificate).notAfter!
        #expect(details.allSatisfy { $0.notAfter! <= caNotAfter })
        // The extensions, as the openssl CLI reads them.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let text = String(
            decoding: try OpenSSLFixtures.openssl(
                [
                    "x509", "-inform", "DER", "-in", try dir.write("a.der", issued.entries[0].certificate.derBytes),
                    "-noout", "-text",
                ]),
            as: UTF8.self)
        #expect(text.contains("CA:FALSE"))
        #expect(text.contains("URI:urn:uuid:"))
        #expect(text.contains("Policy: 2.16.840.1.101.3.2.1.48.1"))
        #expect(text.contains("X509v3 Subject Key Identifier"))
        #expect(text.contains("X509v3 Authority Key Identifier"))
    }

    @Test(
        "A batch issued on two threads: credentials in request order, each validating strictly, with the profile issue(_:) gives, as the openssl CLI prints it"
    )
    func batch() throws {
        let requests = (1...12).map { TestCAIssueRequest(commonName: "User \($0)", escrowHistory: $0 % 3) }
        let issued = try shared.ca.issue(requests, width: 2)
        #expect(issued.map(\.suggestedName) == requests.map { "\($0.commonName) (test CA)" })
        for (request, credential) in zip(requests, issued) {
            let verdict = validator(shared.ca).validate(try credential.credential())
            #expect(verdict.errors.isEmpty, "\(request.commonName): \(verdict.findings)")
            #expect(credential.entries.first { $0.tag == .escrow }?.keyHistory.count == request.escrowHistory)
        }
        #expect(Set(issued.flatMap { $0.entries.map(\.certificate.derBytes) }).count == 48)
        // The profile: openssl's reading of each certificate, without what differs by design (keys,
        // serial, dates, key identifiers, the person's UUID, the name), equals a lone issue's.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        func profile(_ credential: ProvidedCredential) throws -> [String] {
            try credential.entries.flatMap { entry in
                let text = String(
                    decoding: try OpenSSLFixtures.openssl([
                        "x509", "-inform", "DER", "-in", try dir.write("c.der", entry.certificate.derBytes), "-noout",
                        "-text", "-certopt", "no_pubkey,no_sigdump,no_serial,no_validity",
                    ]),
                    as: UTF8.self)
                var lines = text.split(separator: "\n").map(String.init)
                if let identifier = lines.firstIndex(where: { $0.contains("Subject Key Identifier") }) {
                    lines.remove(at: identifier + 1)
                }
                return lines.map {
                    $0.replacing(/CN = User \d+/, with: "CN = …").replacing(/urn:uuid:[0-9a-f-]+/, with: "urn:uuid:…")
                }
            }
        }
        let lone = try profile(try shared.ca.issue(TestCAIssueRequest(commonName: "User 0")))
        for credential in issued { #expect(try profile(credential) == lone) }
    }

    @Test(
        "Negative profiles are only made on request and fail validation as named",
        arguments: [
            (NegativeProfile.expired, "expired"), (.wrongKeyUsage, "key-usage-insufficient"),
            (.mismatchedKey, "key-mismatch"), (.caCertificate, "ca-certificate"),
        ])
    func negative(profile: NegativeProfile, code: String) throws {
        let issued = try shared.ca.issue(TestCAIssueRequest(tags: [.authentication], negative: profile))
        let verdict = validator(shared.ca).validate(entries: issued.entries)
        #expect(verdict.errors.map(\.code.rawValue).contains(code), "\(verdict.findings)")
    }

    @Test("Bad requests are usage errors")
    func badRequests() throws {
        #expect(throws: DCError.self) { try shared.ca.issue(TestCAIssueRequest(escrowHistory: 21)) }
        #expect(throws: DCError.self) { try shared.ca.issue(TestCAIssueRequest(tags: [.signing], escrowHistory: 1)) }
        #expect(throws: DCError.self) { try shared.ca.issue(TestCAIssueRequest(validityDays: 0)) }
        #expect(throws: DCError.self) { try TestCA(directory: "/nonexistent") }
    }
}
