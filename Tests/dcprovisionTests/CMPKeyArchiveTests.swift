import CMPTestServer
import Foundation
import TestSupport
import Testing

/// Key archival over CMP (RFC 4211 6.4, `pkiArchiveOptions`): with `archive-certificate`, the
/// encryption and escrow keys travel to the CA enveloped to its key-archive certificate. The CA is
/// OpenSSL's generic CMP server (``CMPTestServer``, which checks the MAC and the proof of
/// possession over the request, control included); what reached it is judged by the openssl CLI:
/// `asn1parse` names the control, and `cms -decrypt` opens the envelope with the archive's key.
@Suite("CMP key archival through dcprovision send", .ownThreads, .timeLimit(.minutes(3)))
struct CMPKeyArchiveTests {
    /// id-regCtrl-pkiArchiveOptions (1.3.6.1.5.5.7.5.1.4), the content of its OID.
    static let archiveControl: [UInt8] = [0x2B, 0x06, 0x01, 0x05, 0x05, 0x07, 0x05, 0x01, 0x04]
    /// envelopedData (1.2.840.113549.1.7.3), the content of its OID.
    static let envelopedData: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x03]

    /// The archive control's envelope in a DER `CertReqMsg`, as a CMS `ContentInfo` that `openssl
    /// cms` reads (the control carries the `EnvelopedData` under two [0] tags), or nil when the
    /// request has no such control.
    static func envelope(in request: [UInt8]) throws -> [UInt8]? {
        let message = try DERTree(parsing: request)
        guard case .constructed(_, let fields) = message[[0]], fields.count == 3,
            case .constructed(_, let controls) = fields[2]
        else { return nil }
        for control in controls {
            guard case .constructed(0x30, let parts) = control, parts.count == 2,
                parts[0] == .primitive(0x06, archiveControl),
                case .constructed(0xA0, let encryptedKey) = parts[1], encryptedKey.count == 1,
                case .constructed(0xA0, let envelope) = encryptedKey[0]
            else { continue }
            return DERTree.constructed(
                0x30, [.primitive(0x06, envelopedData), .constructed(0xA0, [.constructed(0x30, envelope)])]
            ).encoded
        }
        return nil
    }

    @Test(
        "send --provider cmp with archive-certificate: the encryption and escrow keys reach the CA in pkiArchiveOptions (openssl asn1parse), and openssl cms -decrypt opens each with the archive's key to the very key the client installed; authentication and signing keys are not sent; another key opens nothing"
    )
    func archivesEncryptionKeys() throws {
        let world = try CMPEnrollmentCommandTests.World("cmp-archive")
        defer { world.tools.sandbox.remove() }
        let archive = try world.pki.archiveRecipient()
        let ca = try CMPTestServer(
            caCertificate: world.pki.ca.certificate, caKey: world.pki.ca.key, reference: world.pki.reference,
            secretFile: world.pki.secretFile)
        defer { ca.stop() }
        let sent = try world.send([
            "server=\(ca.url)", "trust-anchor=\(world.pki.ca.certificate)", "reference=\(world.pki.reference)",
            "secret-file=\(world.pki.secretFile)", "subject=O=Example CMP Test,CN=Alice {tag}",
            "archive-certificate=\(archive.certificate)",
        ])
        #expect(sent.status == 0, "\(sent.stdoutText)\(sent.stderrText)")
        #expect(!sent.stderrText.contains("archive"), "\(sent.stderrText)")
        let requests = ca.requests
        try #require(requests.count == 4, "\(requests.count) requests")
        let openssl = OpenSSLFixtures.openssl
        let sandbox = world.tools.sandbox.directory
        // The requests come in the tags' order: authentication, signing, encryption, escrow.
        for (index, tag) in ["authentication", "signing", "encryption", "escrow"].enumerated() {
            let request = try sandbox.write("request-\(tag).der", requests[index])
            let parsed = try run(openssl, ["asn1parse", "-inform", "DER", "-in", request]).stdoutText
            let envelope = try Self.envelope(in: requests[index])
            guard tag == "encryption" || tag == "escrow" else {
                #expect(!parsed.contains("id-regCtrl-pkiArchiveOptions"), "\(tag): \(parsed)")
                #expect(envelope == nil, "\(tag) was sent for archival")
                continue
            }
            #expect(parsed.contains("id-regCtrl-pkiArchiveOptions"), "\(tag): \(parsed)")
            let sealed = try sandbox.write("archived-\(tag).cms", try #require(envelope, "\(tag): no envelope"))
            let printed = try run(openssl, ["cms", "-cmsout", "-print", "-inform", "DER", "-in", sealed]).stdoutText
            #expect(printed.contains("2.16.840.1.101.2.1.2.78.5"), "\(tag): not a key package: \(printed)")
            let package = sandbox.file("package-\(tag).der")
            let opened = try run(
                openssl,
                [
                    "cms", "-decrypt", "-inform", "DER", "-in", sealed, "-recip", archive.certificate, "-inkey",
                    archive.key, "-binary", "-out", package,
                ])
            try #require(opened.status == 0, "\(tag): \(opened.stderrText)")
            // An AsymmetricKeyPackage: one OneAsymmetricKey, a PKCS#8 key.
            let key = try sandbox.write(
                "archived-\(tag).key", try DERTree(parsing: try sandbox.read("package-\(tag).der"))[[0]].encoded)
            let archivedPublic = try run(openssl, ["pkey", "-inform", "DER", "-in", key, "-pubout"]).stdoutText
            let installed = try sandbox.write(
                "\(tag).pem", try world.tools.check("dcclient", ["show", tag, "--format", "pem"]).stdoutText)
            let certifiedPublic = try run(openssl, ["x509", "-in", installed, "-noout", "-pubkey"]).stdoutText
            #expect(!archivedPublic.isEmpty && archivedPublic == certifiedPublic, "\(tag): another key was archived")
            // Only the archive's key opens it.
            let other = try run(
                openssl,
                [
                    "cms", "-decrypt", "-inform", "DER", "-in", sealed, "-recip", world.pki.server.certificate,
                    "-inkey", world.pki.server.key, "-binary", "-out", sandbox.file("other-\(tag).der"),
                ])
            #expect(other.status != 0, "\(tag): the server's key opened the archived key")
        }
    }

    @Test(
        "Attack: an archive certificate that no trust anchor vouches for (exit 77), whose key usage does not allow what CMS does with its key (key agreement for EC, key transport for RSA), a CA certificate (exit 64), or one whose key cannot take an envelope (Ed25519, exit 65) is refused in one line before any request reaches the CA; a CA that answers grantedWithMods gets the credential with a warning that the key may not be archived"
    )
    func refusedArchiveCertificates() throws {
        let world = try CMPEnrollmentCommandTests.World("cmp-archive-bad")
        defer { world.tools.sandbox.remove() }
        let ca = try CMPTestServer(
            caCertificate: world.pki.ca.certificate, caKey: world.pki.ca.key, reference: world.pki.reference,
            secretFile: world.pki.secretFile)
        defer { ca.stop() }
        let options = [
            "server=\(ca.url)", "trust-anchor=\(world.pki.ca.certificate)", "reference=\(world.pki.reference)",
            "secret-file=\(world.pki.secretFile)", "subject=O=Example CMP Test,CN=Alice {tag}", "tag=encryption",
        ]
        let pki = world.pki
        for (recipient, status, words) in [
            (
                try pki.archiveRecipient(issuedBy: pki.rogue).certificate, Int32(77),
                "does not chain to the trust anchors"
            ),
            (try pki.archiveRecipient(keyUsage: "critical,digitalSignature").certificate, 64, "not for key agreement"),
            (try pki.archiveRecipient(key: .rsa2048).certificate, 64, "not for key transport (its key usage)"),
            (pki.ca.certificate, 64, "it is a CA certificate"),
            (try pki.archiveRecipient(key: .ed25519).certificate, 65, "cannot be enveloped"),
        ] {
            let result = try world.send(options + ["archive-certificate=\(recipient)"])
            #expect(result.status == status, "\(result.status) \(result.stdoutText)\(result.stderrText)")
            #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
            #expect(result.stderrText.contains(words), "\(result.stderrText)")
            #expect(world.spool.isEmpty, "something was spooled")
        }
        #expect(ca.requests.isEmpty, "a request reached the CA")

        let modifying = try CMPTestServer(
            caCertificate: world.pki.ca.certificate, caKey: world.pki.ca.key, reference: world.pki.reference,
            secretFile: world.pki.secretFile, grantsWithModifications: true)
        defer { modifying.stop() }
        let archive = try world.pki.archiveRecipient()
        let granted = try world.send(
            options.map { $0.hasPrefix("server=") ? "server=\(modifying.url)" : $0 }
                + ["archive-certificate=\(archive.certificate)"])
        #expect(granted.status == 0, "\(granted.stdoutText)\(granted.stderrText)")
        #expect(
            granted.stderrText.contains(
                "granted the encryption certificate with modifications: it may not have archived the key"),
            "\(granted.stderrText)")
        #expect(try Self.envelope(in: try #require(modifying.requests.first)) != nil)
    }
}
