import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

/// Reads an issued pair (certificate file, key file) as a certified key.
private func certifiedKey(_ pair: IssuedPair) throws -> CertifiedKey {
    let reader = CredentialReader()
    return try KeyMaterial.paired(
        certificates: try reader.read(file: pair.certificate).certificates,
        privateKey: try reader.read(file: pair.key).privateKey!, source: pair.certificate
    ).certifiedKey()
}

/// Reads an issued pair into an entry with `tag`.
private func entry(_ pair: IssuedPair, _ tag: CredentialTag, history: [IssuedPair] = []) throws -> CredentialEntry {
    let current = try certifiedKey(pair)
    return try CredentialEntry(
        tag: tag, certificate: current.certificate, privateKey: current.privateKey,
        keyHistory: try history.map(certifiedKey))
}

private func anchors() throws -> [Certificate] { try CredentialReader().read(file: f.ca.certificate).certificates }

/// A case: a certificate made with these extensions, validated under `tag`, must produce `code`.
struct ProfileCase: Sendable, CustomTestStringConvertible {
    var name: String
    var tag: CredentialTag
    var key: KeySpec = .p256
    var keyUsage: String? = "critical,digitalSignature"
    var extendedKeyUsage: String? = nil
    var basicConstraints: String? = "CA:FALSE"
    var extra: [String] = []
    var digest = "sha256"
    var expected: String
    var severity: Finding.Severity = .error
    /// Other findings the same certificate rightly produces.
    var also: [String] = []
    var testDescription: String { name }

    static let all: [ProfileCase] = [
        ProfileCase(
            name: "authentication without keyUsage", tag: .authentication, keyUsage: nil, expected: "key-usage-missing"),
        ProfileCase(
            name: "authentication with keyEncipherment only", tag: .authentication, key: .rsa2048,
            keyUsage: "critical,keyEncipherment", expected: "key-usage-insufficient", also: ["key-usage-extra"]),
        ProfileCase(name: "signing without nonRepudiation", tag: .signing, expected: "key-usage-insufficient"),
        ProfileCase(
            name: "EC encryption with keyEncipherment instead of keyAgreement", tag: .encryption,
            keyUsage: "critical,keyEncipherment", expected: "key-usage-insufficient", also: ["key-usage-extra"]),
        ProfileCase(
            name: "RSA encryption with keyAgreement instead of keyEncipherment", tag: .encryption, key: .rsa2048,
            keyUsage: "critical,keyAgreement", expected: "key-usage-insufficient", also: ["key-usage-extra"]),
        ProfileCase(
            name: "end entity with keyCertSign", tag: .authentication,
            keyUsage: "critical,digitalSignature,keyCertSign",
            expected: "key-usage-ca"),
        ProfileCase(
            name: "authentication with an extra usage", tag: .authentication,
            keyUsage: "critical,digitalSignature,keyEncipherment", expected: "key-usage-extra", severity: .warning),
        ProfileCase(
            name: "authentication with only emailProtection EKU", tag: .authentication,
            extendedKeyUsage: "emailProtection",
            expected: "eku-mismatch"),
        ProfileCase(
            name: "signing with only clientAuth EKU", tag: .signing,
            keyUsage: "critical,digitalSignature,nonRepudiation",
            extendedKeyUsage: "clientAuth", expected: "eku-mismatch"),
        ProfileCase(
            name: "encryption with serverAuth EKU", tag: .encryption, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "serverAuth", expected: "eku-mismatch"),
        ProfileCase(
            name: "encryption with only clientAuth EKU", tag: .encryption, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "clientAuth", expected: "eku-mismatch"),
        ProfileCase(
            name: "CA:TRUE end entity", tag: .authentication, basicConstraints: "critical,CA:TRUE",
            expected: "ca-certificate"),
        ProfileCase(
            name: "unknown critical extension", tag: .authentication, extra: ["1.3.6.1.4.1.99999.1=critical,ASN1:NULL"],
            expected: "unknown-critical-extension", also: ["chain-untrusted"]),
        ProfileCase(name: "RSA-1024", tag: .authentication, key: .rsa1024, expected: "weak-rsa-key"),
        ProfileCase(name: "secp256k1 curve", tag: .authentication, key: .secp256k1, expected: "unsupported-curve"),
        ProfileCase(name: "SHA-1 signature", tag: .authentication, digest: "sha1", expected: "weak-signature"),
    ]
}

@Suite("Validation: the derived-PIV profiles")
struct ValidationTests {
    @Test("A conforming four-tag credential with escrow history has no findings, chained to its CA")
    func conforming() throws {
        let entries = try [
            entry(f.authentication, .authentication), entry(f.signing, .signing), entry(f.encryption, .encryption),
            entry(f.escrow, .escrow, history: f.escrowHistory),
        ]
        let credential = try Credential(
            name: "Alice", serialNumber: "1", expirationDate: Date().addingTimeInterval(86400), entries: entries)
        let verdict = CredentialValidator(trustAnchors: try anchors()).validate(credential)
        #expect(verdict.findings.isEmpty, "\(verdict.findings)")
        #expect(verdict.passes(strict: true))
    }

    @Test(arguments: ProfileCase.all)
    func profileViolation(_ profile: ProfileCase) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pair = try OpenSSLFixtures.issue(
            name: "case", key: profile.key, by: f.ca, keyUsage: profile.keyUsage,
            extendedKeyUsage: profile.extendedKeyUsage,
            basicConstraints: profile.basicConstraints, extra: profile.extra, digest: profile.digest, in: dir)
        let verdict = CredentialValidator(trustAnchors: try anchors()).validate(entries: [try entry(pair, profile.tag)])
        let matching = verdict.findings.filter { $0.code.rawValue == profile.expected }
        #expect(matching.count == 1, "\(verdict.findings)")
        #expect(matching.first?.severity == profile.severity)
        #expect(matching.first?.tag == profile.tag)
        // Nothing else is wrong with these certificates.
        #expect(verdict.findings.map(\.code.rawValue).sorted() == ([profile.expected] + profile.also).sorted())
    }

    @Test("A key from another certificate is a mismatch")
    func keyMismatch() throws {
        let good = try entry(f.authentication, .authentication)
        let other = try entry(f.escrow, .escrow)
        let mixed = try CredentialEntry(
            tag: .authentication, certificate: good.certificate, privateKey: other.privateKey)
        let verdict = CredentialValidator().validate(entries: [mixed])
        #expect(verdict.findings.map(\.code) == ["key-mismatch"])
    }

    @Test("Validity: not yet valid, expired, expiring soon; escrow may be expired")
    func validity() throws {
        let authentication = try entry(f.authentication, .authentication)
        let escrow = try entry(f.escrow, .escrow, history: f.escrowHistory)
        let past = CredentialValidator(now: Date().addingTimeInterval(-86400 * 2))
        #expect(past.validate(entries: [authentication]).findings.map(\.code) == ["not-yet-valid"])
        let future = CredentialValidator(now: Date().addingTimeInterval(86400 * 400))
        let verdict = future.validate(entries: [authentication, escrow])
        #expect(verdict.findings(for: .authentication).map(\.code) == ["expired"])
        #expect(verdict.findings(for: .authentication).first?.severity == .error)
        // The escrow pair and both history pairs are expired, which is only information.
        #expect(verdict.findings(for: .escrow).map(\.code) == ["expired", "expired", "expired"])
        #expect(verdict.findings(for: .escrow).allSatisfy { $0.severity == .info })
        #expect(verdict.findings(for: .escrow).compactMap(\.historyIndex) == [0, 1])
        let soon = CredentialValidator(now: Date().addingTimeInterval(86400 * 350))
        let soonVerdict = soon.validate(entries: [authentication])
        #expect(soonVerdict.findings.map(\.code) == ["expires-soon"])
        #expect(soonVerdict.passes() && !soonVerdict.passes(strict: true))
    }

    @Test("Without the issuing CA as trust anchor the chain check fails")
    func chain() throws {
        let other = try CredentialReader().read(file: f.otherCA.certificate).certificates
        let verdict = CredentialValidator(trustAnchors: other).validate(entries: [try entry(f.signing, .signing)])
        #expect(verdict.findings.map(\.code) == ["chain-untrusted"])
        #expect(CredentialValidator().validate(entries: [try entry(f.signing, .signing)]).findings.isEmpty)
    }

    @Test("A credential that outlives a certificate gets a warning")
    func credentialOutlivesCertificate() throws {
        let credential = try Credential(
            name: "Alice", serialNumber: "1", expirationDate: Date().addingTimeInterval(86400 * 3650),
            entries: [try entry(f.signing, .signing)])
        #expect(CredentialValidator().validate(credential).findings.map(\.code) == ["credential-outlives-certificate"])
    }

    @Test("The report lists every row and encodes to JSON")
    func report() throws {
        let entries = [
            try entry(f.authentication, .authentication), try entry(f.escrow, .escrow, history: f.escrowHistory),
        ]
        let verdict = CredentialValidator().validate(entries: entries)
        let report = try InspectionReport(entries: entries, verdict: verdict, strict: false)
        #expect(report.rows.map(\.tag) == [.authentication, .escrow, .escrow, .escrow])
        #expect(report.rows.map(\.historyIndex) == [nil, nil, 0, 1])
        #expect(report.rows[0].certificate.keyAlgorithm == "EC P-256")
        #expect(report.rows[0].privateKey == "EC P-256")
        #expect(report.rows[0].certificate.subject == "CN=Alice authentication,O=Derived Credentials Test")
        let json = try JSONSerialization.jsonObject(with: Data(try report.json().utf8)) as? [String: Any]
        #expect(json?["valid"] as? Bool == true)
        #expect((json?["rows"] as? [Any])?.count == 4)
    }
}

@Suite("Certificate details")
struct CertificateDetailsTests {
    @Test("The SHA-256 fingerprint, subject and serial are openssl's", arguments: ["authentication", "encryption"])
    func matchesOpenSSL(_ name: String) throws {
        let pair = name == "authentication" ? f.authentication : f.encryption
        let details = try CertificateDetails(Certificate(derBytes: try HostileInput.der(of: pair.certificate)))
        let printed = String(
            decoding: try OpenSSLFixtures.openssl([
                "x509", "-in", pair.certificate, "-noout", "-fingerprint", "-sha256", "-serial",
            ]),
            as: UTF8.self)
        #expect(printed.contains("sha256 Fingerprint=\(details.sha256Fingerprint)\n"), "\(printed)")
        #expect(printed.contains("serial=\(details.serialNumber)"), "\(printed) vs \(details.serialNumber)")
    }

    @Test("Hex digits: lower case by default, upper case with a separator on request")
    func hex() {
        #expect(Digests.hex([]) == "")
        #expect(Digests.hex([0x00, 0x0F, 0xA0, 0xFF]) == "000fa0ff")
        #expect(Digests.hex([0x00, 0x0F, 0xA0, 0xFF], uppercase: true, separator: ":") == "00:0F:A0:FF")
    }
}
