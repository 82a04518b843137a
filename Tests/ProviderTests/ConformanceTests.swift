import CMPProvider
import CMPTestServer
import CredentialCoding
import DerivedCredentials
import DerivedCredentialsTesting
import ExecProvider
import Foundation
import PEMFileProvider
import SystemSupport
import TestCAProvider
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

/// One test CA for the suite, and a credential issued from it as a PEM folder (for the exec sample).
let issued: (dir: TemporaryDirectory, ca: String, pemFolder: String) = {
    let dir = try! TemporaryDirectory("providers")
    let ca = dir.file("ca")
    let testCA = try! TestCA.initialize(at: ca)
    let provided = try! testCA.issue(TestCAIssueRequest(escrowHistory: 2))
    var files = AtomicFileSet(directory: dir.file("issued"))
    try! ConversionOutputs.add(provided, format: .pem, to: &files)
    try! AtomicFileSet.ensureDirectory(dir.file("issued"))
    try! files.commit()
    return (dir, ca, dir.file("issued"))
}()

/// The sample exec provider in Samples/.
let sampleExecProvider = Repository.root + "/Samples/exec-provider/dcprovider-sample"

@Suite("Conformance kit: every provider", .ownThreads, .timeLimit(.minutes(3)))
struct ConformanceTests {
    @Test("PEM-file provider")
    func pemFiles() async throws {
        let request = ProviderRequest(options: [
            "pem": [
                "authentication=\(f.authentication.certificate),\(f.authentication.key)",
                "signing=\(f.signing.certificate),\(f.signing.key)",
                "escrow=\(f.escrow.certificate),\(f.escrow.key)",
                "escrow=\(f.escrowHistory[0].certificate),\(f.escrowHistory[0].key)",
            ]
        ])
        let report = await ProviderConformance.check(
            PEMFileProvider(), request: request,
            failingRequests: [
                ProviderRequest(options: [:]),
                ProviderRequest(options: ["pem": ["authentication=/nonexistent.pem"]]),
                ProviderRequest(options: ["colour": ["blue"]]),
                ProviderRequest(options: ["pem": ["signing=\(f.signing.certificate),\(f.authentication.key)"]]),
            ])
        #expect(report.isConforming, "\(report)")
    }

    @Test("Test-CA provider")
    func testCA() async throws {
        let report = await ProviderConformance.check(
            TestCAProvider(), request: ProviderRequest(options: ["dir": [issued.ca], "escrow-history": ["3"]]),
            failingRequests: [
                ProviderRequest(options: [:]),
                ProviderRequest(options: ["dir": ["/nonexistent"]]),
                ProviderRequest(options: ["dir": [issued.ca], "algorithm": ["dsa"]]),
                ProviderRequest(options: ["dir": [issued.ca], "escrow-history": ["21"]]),
            ])
        #expect(report.isConforming, "\(report)")
    }

    @Test("cmp provider (the organisation's CA over CMP), with OpenSSL's generic CMP server as that CA")
    func cmp() async throws {
        let directory = try TemporaryDirectory("cmp-conformance")
        defer { directory.remove() }
        let pki = try CMPTestPKI(in: directory)
        // Not the mock (`openssl cmp -port`): it answers one fixed certificate, and the kit asks
        // for fresh keys.
        let ca = try CMPTestServer(
            caCertificate: pki.ca.certificate, caKey: pki.ca.key, reference: pki.reference, secretFile: pki.secretFile)
        defer { ca.stop() }
        let options: [String: [String]] = [
            "server": [ca.url], "trust-anchor": [pki.ca.certificate], "reference": [pki.reference],
            "secret-file": [pki.secretFile], "subject": ["O=Example CMP Test,CN=Alice {tag}"],
        ]
        let wrong = try directory.write("wrong.txt", "not the secret")
        let report = await ProviderConformance.check(
            CMPProvider(), request: ProviderRequest(options: options),
            failingRequests: [
                ProviderRequest(options: [:]),
                ProviderRequest(options: options.merging(["secret-file": [wrong]]) { $1 }),
                ProviderRequest(options: options.merging(["key-algorithm": ["dsa"]]) { $1 }),
                ProviderRequest(options: options.merging(["server": ["ftp://ca.example/"]]) { $1 }),
            ],
            trustAnchors: try CredentialReader().read(file: pki.ca.certificate).certificates)
        #expect(report.isConforming, "\(report)")
        #expect(ca.certified >= 4, "\(ca.certified) issued")
    }

    @Test("Sample exec provider (Python, out of process)")
    func sampleExec() async throws {
        let provider = ExecProvider(path: sampleExecProvider, stderrHandler: { _ in })
        let report = await ProviderConformance.check(
            provider, request: ProviderRequest(options: ["dir": [issued.pemFolder]]),
            failingRequests: [ProviderRequest(options: [:]), ProviderRequest(options: ["dir": ["/nonexistent"]])])
        #expect(report.isConforming, "\(report)")
        let descriptor = try await provider.describe()
        #expect(descriptor.id == "sample")
        #expect(descriptor.options.map(\.name) == ["dir", "name"])
    }

    @Test("The kit catches a provider that lies")
    func catchesLiars() async throws {
        /// A provider that returns a key with someone else's certificate and ignores cancellation:
        /// a fake by design, because no real provider should behave like this.
        struct Liar: CredentialProvider {
            let descriptor = ProviderDescriptor(id: "Liar!", displayName: "", version: "1")
            func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
                let reader = CredentialReader()
                let certificate = try reader.read(file: f.signing.certificate).certificates[0]
                let key = try reader.read(file: f.authentication.key).privateKey!
                return ProvidedCredential(entries: [
                    try CredentialEntry(tag: .signing, certificate: certificate, privateKey: key)
                ])
            }
        }
        let report = await ProviderConformance.check(
            Liar(), request: ProviderRequest(), failingRequests: [ProviderRequest()])
        let failed = Set(report.failures.map(\.check))
        #expect(failed.contains("descriptor id is lowercase letters, digits and '-' (or exec:PATH)"))
        #expect(failed.contains("descriptor has a display name"))
        #expect(failed.contains("certificates are strict DER, keys PKCS#8 that match them, history only on escrow"))
        #expect(failed.contains("a cancelled call throws CancellationError within 5 s"))
        #expect(failed.contains("failing request 0 throws a one-line DCError"))
    }
}
