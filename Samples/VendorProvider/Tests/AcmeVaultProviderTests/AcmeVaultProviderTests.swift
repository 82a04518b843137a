import AcmeVaultProvider
import CredentialCoding
import DerivedCredentials
import DerivedCredentialsTesting
import Foundation
import TestCAProvider
import Testing

/// A vault for "alice" made from a test-CA credential: each entry exported as PKCS#12 with the
/// openssl CLI under the vault passphrase.
private let vault: String = {
    let root = NSTemporaryDirectory() + "acme-vault-\(UUID().uuidString)"
    let ca = try! TestCA.initialize(at: root + "/ca")
    let issued = try! ca.issue(TestCAIssueRequest(commonName: "Alice", tags: [.authentication, .signing]))
    try! FileManager.default.createDirectory(atPath: root + "/vault/alice", withIntermediateDirectories: true)
    try! Data("vault secret\n".utf8).write(to: URL(fileURLWithPath: root + "/pass"))
    for entry in issued.entries {
        let pem = root + "/\(entry.tag).pem"
        var text = PEM.certificate(entry.certificate)
        PEM.privateKey(entry.privateKey).withUnsafeBytes { text += $0 }
        try! Data(text).write(to: URL(fileURLWithPath: pem))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = [
            "pkcs12", "-export", "-in", pem, "-out", root + "/vault/alice/\(entry.tag).p12", "-passout",
            "file:\(root)/pass",
        ]
        try! process.run()
        process.waitUntilExit()
    }
    return root
}()

private func request(_ options: [String: [String]], passphrase: String? = "vault secret") -> ProviderRequest {
    ProviderRequest(
        options: options,
        passphrase: passphrase.map { FixedPassphrase(SecretBytes(Array($0.utf8))) } ?? NoPassphrase())
}

@Test("The Acme vault provider passes the toolkit's conformance kit")
func conformance() async {
    let report = await ProviderConformance.check(
        AcmeVaultProvider(), request: request(["vault": [vault + "/vault"], "user": ["alice"]]),
        failingRequests: [
            request([:]),
            request(["vault": [vault + "/vault"], "user": ["bob"]]),
            request(["vault": [vault + "/vault"], "user": ["../etc"]]),
            request(["vault": [vault + "/vault"], "user": ["alice"]], passphrase: nil),
            request(["vault": [vault + "/vault"], "user": ["alice"]], passphrase: "wrong"),
        ])
    #expect(report.isConforming, "\(report)")
}

@Test("A wrong vault passphrase is refused with the toolkit's code")
func wrongPassphrase() async {
    do {
        _ = try await AcmeVaultProvider().provide(
            request(["vault": [vault + "/vault"], "user": ["alice"]], passphrase: "wrong"))
        Issue.record("accepted a wrong passphrase")
    } catch let error as DCError {
        #expect(error.code == .wrongPassphrase)
    } catch {
        Issue.record("unexpected \(error)")
    }
}
