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

/// What `openssl verify -x509_strict -auth_level 2 -purpose PURPOSE` says about a certificate: the
/// second oracle. `-x509_strict` makes OpenSSL refuse keyCertSign on an end entity; `-auth_level 2`
/// (112-bit security) refuses RSA keys under 2048 bits and SHA-1 signatures.
enum OpenSSLVerdict: Sendable, Equatable, CustomStringConvertible {
    case accepts
    /// Refused with this `X509_V_ERR_*` number (26 unsuitable purpose, 34 unhandled critical
    /// extension, 66 EE key too weak, 68 CA signature digest too weak, 82 keyCertSign on a non-CA).
    case refuses(Int)

    var description: String {
        switch self {
        case .accepts: "accepts"
        case .refuses(let error): "refuses (error \(error))"
        }
    }
}

/// A case: a certificate made with these extensions, validated under `tag`, must produce exactly
/// `expected` (nil: no finding at all, the profile accepts it) plus `also`.
struct ProfileCase: Sendable, CustomTestStringConvertible {
    var name: String
    var tag: CredentialTag
    var key: KeySpec = .p256
    var keyUsage: String? = "critical,digitalSignature"
    var extendedKeyUsage: String? = nil
    var basicConstraints: String? = "CA:FALSE"
    var extra: [String] = []
    var digest = "sha256"
    var expected: String?
    var severity: Finding.Severity = .error
    /// Other findings the same certificate rightly produces.
    var also: [String] = []
    /// `openssl verify -purpose` and what it says, where OpenSSL checks the same rule; our verdict
    /// (passes or not) must be the same. Nil where OpenSSL judges by another rule (said why below).
    var openssl: (purpose: String, verdict: OpenSSLVerdict)? = nil
    var testDescription: String { name }

    static let all: [ProfileCase] = [
        // OpenSSL: no keyUsage means no restriction; the profile requires one.
        ProfileCase(
            name: "authentication without keyUsage", tag: .authentication, keyUsage: nil, expected: "key-usage-missing"),
        ProfileCase(
            name: "authentication with keyEncipherment only", tag: .authentication, key: .rsa2048,
            keyUsage: "critical,keyEncipherment", expected: "key-usage-insufficient", also: ["key-usage-extra"],
            openssl: ("sslclient", .refuses(26))),
        // OpenSSL's smimesign takes digitalSignature or nonRepudiation; the profile wants both.
        ProfileCase(name: "signing without nonRepudiation", tag: .signing, expected: "key-usage-insufficient"),
        // OpenSSL's smimeencrypt wants keyEncipherment whatever the key; the profile wants
        // keyAgreement for EC keys.
        ProfileCase(
            name: "EC encryption with keyEncipherment instead of keyAgreement", tag: .encryption,
            keyUsage: "critical,keyEncipherment", expected: "key-usage-insufficient", also: ["key-usage-extra"]),
        ProfileCase(
            name: "RSA encryption with keyAgreement instead of keyEncipherment", tag: .encryption, key: .rsa2048,
            keyUsage: "critical,keyAgreement", expected: "key-usage-insufficient", also: ["key-usage-extra"],
            openssl: ("smimeencrypt", .refuses(26))),

        // CA bits on an end entity: keyCertSign or cRLSign, alone or with the tag's own usage.
        ProfileCase(
            name: "end entity with keyCertSign", tag: .authentication,
            keyUsage: "critical,digitalSignature,keyCertSign", expected: "key-usage-ca",
            openssl: ("sslclient", .refuses(82))),
        ProfileCase(
            name: "end entity with keyCertSign alone", tag: .authentication, keyUsage: "critical,keyCertSign",
            expected: "key-usage-ca", also: ["key-usage-insufficient"], openssl: ("sslclient", .refuses(82))),
        ProfileCase(
            name: "end entity with cRLSign alone", tag: .authentication, keyUsage: "critical,cRLSign",
            expected: "key-usage-ca", also: ["key-usage-insufficient"], openssl: ("sslclient", .refuses(26))),
        // OpenSSL, even with -x509_strict, does not look at cRLSign on an end entity.
        ProfileCase(
            name: "end entity with digitalSignature and cRLSign", tag: .authentication,
            keyUsage: "critical,digitalSignature,cRLSign", expected: "key-usage-ca"),
        ProfileCase(
            name: "escrow with keyAgreement and cRLSign", tag: .escrow, keyUsage: "critical,keyAgreement,cRLSign",
            extendedKeyUsage: "emailProtection", expected: "key-usage-ca"),

        ProfileCase(
            name: "authentication with an extra usage", tag: .authentication,
            keyUsage: "critical,digitalSignature,keyEncipherment", expected: "key-usage-extra", severity: .warning,
            openssl: ("sslclient", .accepts)),
        ProfileCase(
            name: "authentication with only emailProtection EKU", tag: .authentication,
            extendedKeyUsage: "emailProtection", expected: "eku-mismatch", openssl: ("sslclient", .refuses(26))),
        ProfileCase(
            name: "signing with only clientAuth EKU", tag: .signing,
            keyUsage: "critical,digitalSignature,nonRepudiation", extendedKeyUsage: "clientAuth",
            expected: "eku-mismatch", openssl: ("smimesign", .refuses(26))),
        ProfileCase(
            name: "encryption with serverAuth EKU", tag: .encryption, key: .rsa2048,
            keyUsage: "critical,keyEncipherment", extendedKeyUsage: "serverAuth", expected: "eku-mismatch",
            openssl: ("smimeencrypt", .refuses(26))),

        // anyExtendedKeyUsage: the profile accepts it for every tag (RFC 5280 4.2.1.12: no
        // restriction). OpenSSL's purposes want the named purpose (which the RFC also allows an
        // application to insist on), so OpenSSL is no oracle here.
        ProfileCase(
            name: "authentication with anyExtendedKeyUsage alone is accepted", tag: .authentication,
            extendedKeyUsage: "anyExtendedKeyUsage", expected: nil),
        ProfileCase(
            name: "signing with anyExtendedKeyUsage alone is accepted", tag: .signing,
            keyUsage: "critical,digitalSignature,nonRepudiation", extendedKeyUsage: "anyExtendedKeyUsage",
            expected: nil),
        ProfileCase(
            name: "encryption with anyExtendedKeyUsage alone is accepted", tag: .encryption, key: .rsa2048,
            keyUsage: "critical,keyEncipherment", extendedKeyUsage: "anyExtendedKeyUsage", expected: nil),
        ProfileCase(
            name: "escrow with anyExtendedKeyUsage alone is accepted", tag: .escrow,
            keyUsage: "critical,keyAgreement", extendedKeyUsage: "anyExtendedKeyUsage", expected: nil),

        // Escrow: keyEncipherment for RSA, keyAgreement for EC, and not the other way round.
        ProfileCase(
            name: "RSA escrow with keyEncipherment is accepted", tag: .escrow, key: .rsa2048,
            keyUsage: "critical,keyEncipherment", extendedKeyUsage: "emailProtection", expected: nil,
            openssl: ("smimeencrypt", .accepts)),
        // (OpenSSL's smimeencrypt refuses keyAgreement alone, whatever the key.)
        ProfileCase(
            name: "EC escrow with keyAgreement is accepted", tag: .escrow, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "emailProtection", expected: nil),
        ProfileCase(
            name: "RSA escrow with keyAgreement only", tag: .escrow, key: .rsa2048, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "emailProtection", expected: "key-usage-insufficient", also: ["key-usage-extra"],
            openssl: ("smimeencrypt", .refuses(26))),
        // (OpenSSL's smimeencrypt accepts keyEncipherment whatever the key.)
        ProfileCase(
            name: "EC escrow with keyEncipherment only", tag: .escrow, keyUsage: "critical,keyEncipherment",
            extendedKeyUsage: "emailProtection", expected: "key-usage-insufficient", also: ["key-usage-extra"]),

        // OpenSSL accepts a CA certificate as a client's.
        ProfileCase(
            name: "encryption with only clientAuth EKU", tag: .encryption, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "clientAuth", expected: "eku-mismatch"),
        ProfileCase(
            name: "CA:TRUE end entity", tag: .authentication, basicConstraints: "critical,CA:TRUE",
            expected: "ca-certificate"),
        ProfileCase(
            name: "CA:TRUE escrow", tag: .escrow, keyUsage: "critical,keyAgreement",
            extendedKeyUsage: "emailProtection", basicConstraints: "critical,CA:TRUE", expected: "ca-certificate"),
        ProfileCase(
            name: "unknown critical extension", tag: .authentication, extra: ["1.3.6.1.4.1.99999.1=critical,ASN1:NULL"],
            expected: "unknown-critical-extension", also: ["chain-untrusted"], openssl: ("sslclient", .refuses(34))),
        ProfileCase(
            name: "RSA-1024", tag: .authentication, key: .rsa1024, expected: "weak-rsa-key",
            openssl: ("sslclient", .refuses(66))),
        // OpenSSL has no list of curves for an end entity's key.
        ProfileCase(name: "secp256k1 curve", tag: .authentication, key: .secp256k1, expected: "unsupported-curve"),
        ProfileCase(
            name: "SHA-1 signature", tag: .authentication, digest: "sha1", expected: "weak-signature",
            openssl: ("sslclient", .refuses(68))),
    ]
}

/// Runs `openssl verify -x509_strict -auth_level 2 -purpose` on `certificate` against the fixture CA.
private func opensslVerdict(_ certificate: String, purpose: String, in sandbox: Sandbox) throws -> OpenSSLVerdict {
    let result = try sandbox.run(
        OpenSSLFixtures.openssl,
        ["verify", "-x509_strict", "-auth_level", "2", "-purpose", purpose, "-CAfile", f.ca.certificate, certificate])
    if result.status == 0 && result.stdoutText.hasSuffix(": OK\n") { return .accepts }
    // "error 26 at 0 depth lookup: unsuitable certificate purpose"; the first error is the one.
    let text = result.stdoutText + result.stderrText
    guard let range = text.range(of: #"error (\d+) at 0 depth"#, options: .regularExpression),
        let number = Int(text[range].split(separator: " ")[1])
    else {
        throw ProcessFailure(command: ["openssl", "verify", certificate], result: result)
    }
    return .refuses(number)
}

@Suite("Validation: the derived-PIV profiles", .ownThreads, .timeLimit(.minutes(5)))
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
    func profile(_ profile: ProfileCase) throws {
        let sandbox = try Sandbox("profile")
        defer { sandbox.remove() }
        let pair = try OpenSSLFixtures.issue(
            name: "case", key: profile.key, by: f.ca, keyUsage: profile.keyUsage,
            extendedKeyUsage: profile.extendedKeyUsage,
            basicConstraints: profile.basicConstraints, extra: profile.extra, digest: profile.digest,
            in: sandbox.directory)
        let verdict = CredentialValidator(trustAnchors: try anchors()).validate(entries: [try entry(pair, profile.tag)])
        if let expected = profile.expected {
            let matching = verdict.findings.filter { $0.code.rawValue == expected }
            #expect(matching.count == 1, "\(verdict.findings)")
            #expect(matching.first?.severity == profile.severity)
            #expect(matching.first?.tag == profile.tag)
        }
        // Nothing else is wrong with these certificates.
        #expect(
            verdict.findings.map(\.code.rawValue).sorted()
                == ((profile.expected.map { [$0] } ?? []) + profile.also).sorted(),
            "\(verdict.findings)")
        // The second oracle, where OpenSSL checks the same rule.
        if let (purpose, stated) = profile.openssl {
            let said = try opensslVerdict(pair.certificate, purpose: purpose, in: sandbox)
            #expect(said == stated, "openssl verify -purpose \(purpose)")
            #expect(
                verdict.passes() == (said == .accepts),
                "openssl \(said) under -purpose \(purpose), and our verdict is \(verdict.findings)")
        }
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

@Suite("Certificate details", .ownThreads, .timeLimit(.minutes(3)))
struct CertificateDetailsTests {
    @Test(
        "The SHA-256 fingerprint, subject, issuer and serial are openssl's (subject and issuer as -nameopt RFC2253 prints them)",
        arguments: ["authentication", "encryption", "awkward subject"])
    func matchesOpenSSL(_ name: String) throws {
        let sandbox = try Sandbox("details")
        defer { sandbox.remove() }
        let pair =
            switch name {
            case "authentication": f.authentication
            case "encryption": f.encryption
            default:
                // RFC 4514 specials: a leading '#', quotes, '+', ',', ';', '<', '>', '=', a backslash,
                // trailing spaces, and bytes above 0x7F. (In -subj, a backslash escapes the next character.)
                try OpenSSLFixtures.issue(
                    name: "awkward", key: .p256, by: f.ca,
                    subject: "/O=Derived Credentials Test/OU=#1 R&D \"lab\" <x>; a\\+b=c \\\\ d /CN=M\u{FC}ller, Anna ",
                    keyUsage: "critical,digitalSignature", extendedKeyUsage: nil, in: sandbox.directory)
            }
        let details = try CertificateDetails(Certificate(derBytes: try HostileInput.der(of: pair.certificate)))
        let printed = try sandbox.run(
            OpenSSLFixtures.openssl,
            [
                "x509", "-in", pair.certificate, "-noout", "-fingerprint", "-sha256", "-serial", "-subject", "-issuer",
                "-nameopt", "RFC2253,-esc_msb",
            ])
        try #require(printed.status == 0, "\(printed.stderrText)")
        let lines = printed.stdoutText.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.contains("sha256 Fingerprint=\(details.sha256Fingerprint)"), "\(lines)")
        #expect(lines.contains("serial=\(details.serialNumber)"), "\(lines) vs \(details.serialNumber)")
        #expect(lines.contains("subject=\(details.subject)"), "\(lines) vs \(details.subject)")
        #expect(lines.contains("issuer=\(details.issuer)"), "\(lines) vs \(details.issuer)")
        if name == "awkward subject" { #expect(details.subject.contains("\\,")) }  // the escapes are there
    }

    @Test("Hex digits: lower case by default, upper case with a separator on request")
    func hex() {
        #expect(Digests.hex([]) == "")
        #expect(Digests.hex([0x00, 0x0F, 0xA0, 0xFF]) == "000fa0ff")
        #expect(Digests.hex([0x00, 0x0F, 0xA0, 0xFF], uppercase: true, separator: ":") == "00:0F:A0:FF")
    }
}
