import CredentialCoding
import DerivedCredentials
import Foundation
import PEMFileProvider
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

private func provide(_ options: [String: [String]], in directory: String? = nil) async throws -> ProvidedCredential {
    try await PEMFileProvider().provide(
        ProviderRequest(options: options, workingDirectory: directory ?? FileManager.default.currentDirectoryPath))
}

/// A certificate with an explicit validity window, issued by the fixture CA through our signer,
/// written with its key as one PEM file. (`openssl x509 -req` in OpenSSL 3.0 cannot backdate.)
private func dated(
    _ dir: TemporaryDirectory, _ name: String, daysAgo: Double, lifetime: Double, keyUsage: KeyUsage,
    extendedKeyUsage: [ExtendedKeyUsage] = [.emailProtection]
) throws -> String {
    let reader = CredentialReader()
    let signer = try CertificateSigner(
        certificate: try reader.read(file: f.ca.certificate).certificates[0],
        privateKey: try reader.read(file: f.ca.key).privateKey!)
    let key = try KeyGeneration.generate(.p256)
    let start = Date().addingTimeInterval(-daysAgo * 86400)
    let certificate = try signer.issue(
        CertificateProfile(
            subject: DistinguishedName([.init("CN", name)]), notBefore: start,
            notAfter: start.addingTimeInterval(lifetime * 86400), keyUsage: keyUsage, extendedKeyUsage: extendedKeyUsage
        ),
        for: key)
    var text = PEM.certificate(certificate)
    PEM.privateKey(key).withUnsafeBytes { text += $0 }
    return try dir.write("\(name).pem", text)
}

private func der(_ path: String) throws -> [UInt8] { try CredentialReader().read(file: path).certificates[0].derBytes }

@Suite("PEM-file provider", .ownThreads, .timeLimit(.minutes(3)))
struct PEMFileProviderTests {
    @Test("Escrow files form the key history, ordered by validity whatever the order given")
    func escrowOrdering() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let middle = try dated(dir, "middle", daysAgo: 400, lifetime: 365, keyUsage: .keyAgreement)
        let newest = try dated(dir, "newest", daysAgo: 10, lifetime: 365, keyUsage: .keyAgreement)
        let oldest = try dated(dir, "oldest", daysAgo: 800, lifetime: 365, keyUsage: .keyAgreement)
        let provided = try await provide(["pem": [middle, newest, oldest].map { "escrow=\($0)" }])
        let escrow = try #require(provided.entries.first)
        #expect(escrow.certificate.derBytes == (try der(newest)))
        #expect(escrow.keyHistory.map(\.certificate.derBytes) == [try der(middle), try der(oldest)])
    }

    @Test("A manifest names files relative to itself; unknown keys and versions are refused")
    func manifest() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for (name, pair) in [("auth", f.authentication), ("enc", f.encryption)] {
            _ = try dir.write("\(name).crt", try readBytes(pair.certificate))
            _ = try dir.write("\(name).key", try readBytes(pair.key))
        }
        let manifest = try dir.write(
            "manifest.json",
            """
            {"version": 1, "name": "Alice", "serialNumber": "0042", "entries": [
              {"tag": "authentication", "certificate": "auth.crt", "key": "auth.key"},
              {"certificate": "enc.crt", "key": "enc.key"}
            ]}
            """)
        let provided = try await provide(["manifest": [manifest]])
        #expect(provided.entries.map(\.tag) == [.authentication, .encryption])
        #expect(provided.suggestedName == "Alice")
        #expect(provided.suggestedSerialNumber == "0042")
        let typo = try dir.write("typo.json", #"{"version": 1, "entries": [{"tag": "signing", "certifcate": "a"}]}"#)
        #expect(await thrownCode { _ = try await provide(["manifest": [typo]]) } == .malformedInput)
        let future = try dir.write("v2.json", #"{"version": 2, "entries": []}"#)
        #expect(await thrownCode { _ = try await provide(["manifest": [future]]) } == .unsupportedFormat)
        #expect(await thrownCode { _ = try await provide(["manifest": [dir.file("none.json")]]) } == .fileNotFound)
    }

    @Test("--classify reads the tag from key usage; the newest encryption certificate wins, the rest go to escrow")
    func classify() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let older = try dated(dir, "enc-older", daysAgo: 200, lifetime: 365, keyUsage: .keyAgreement)
        let newer = try dated(dir, "enc-newer", daysAgo: 5, lifetime: 365, keyUsage: .keyAgreement)
        let oldest = try dated(dir, "enc-oldest", daysAgo: 600, lifetime: 365, keyUsage: .keyEncipherment)
        let upn = try OpenSSLFixtures.issue(
            name: "upn", key: .p256, by: f.ca, keyUsage: "critical,digitalSignature", extendedKeyUsage: nil,
            extra: ["subjectAltName=otherName:1.3.6.1.4.1.311.20.2.3;UTF8:alice@example.com"], in: dir)
        let files = [
            older, "\(f.signing.certificate),\(f.signing.key)", oldest, newer, "\(upn.certificate),\(upn.key)",
        ]
        let provided = try await provide(["classify": files])
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption, .escrow])
        #expect(provided.entries[0].certificate.derBytes == (try HostileInput.der(of: upn.certificate)))
        #expect(provided.entries[2].certificate.derBytes == (try der(newer)))
        #expect(provided.entries[3].certificate.derBytes == (try der(older)))
        #expect(provided.entries[3].keyHistory.map(\.certificate.derBytes) == [try der(oldest)])
    }

    @Test("An ambiguous file is an error that names it")
    func ambiguous() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // A dual-use S/MIME certificate could be signing or encryption.
        let both = try OpenSSLFixtures.issue(
            name: "both", key: .rsa2048, by: f.ca, keyUsage: "critical,digitalSignature,keyEncipherment",
            extendedKeyUsage: "emailProtection", in: dir)
        let nothing = try OpenSSLFixtures.issue(
            name: "nothing", key: .p256, by: f.ca, keyUsage: "critical,digitalSignature", extendedKeyUsage: nil, in: dir
        )
        for pair in [both, nothing] {
            do {
                _ = try await provide(["classify": ["\(pair.certificate),\(pair.key)"]])
                Issue.record("classified an ambiguous certificate")
            } catch let error as DCError {
                #expect(error.code == .invalid)
                #expect(error.subject == "\(pair.certificate),\(pair.key)")
                #expect(error.remedy == .tagExplicitly("\(pair.certificate),\(pair.key)"))
            }
        }
    }

    @Test("Two authentication certificates are refused, naming both files")
    func duplicates() async throws {
        do {
            _ = try await provide([
                "pem": ["authentication=\(f.authentication.certificate),\(f.authentication.key)"],
                "classify": ["\(f.authentication.certificate),\(f.authentication.key)"],
            ])
            Issue.record("accepted two authentication certificates")
        } catch let error as DCError {
            #expect(error.code == .duplicateTag)
            #expect(error.subject?.contains(" and ") == true)
        }
    }

    @Test("Relative paths resolve against the request's working directory")
    func relativePaths() async throws {
        let directory = (f.signing.certificate as NSString).deletingLastPathComponent
        let provided = try await provide(["pem": ["signing=signing.pem,signing.key"]], in: directory)
        #expect(provided.entries.map(\.tag) == [.signing])
        #expect(provided.suggestedName == "Alice signing")
    }
}
