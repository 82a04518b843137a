import CredentialCoding
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// OpenSSL's display names (`openssl x509 -ext`) of the keyUsage bits: the test's own table, not
/// the code's names, so that a bit mapped to the wrong name in our code cannot hide.
private let opensslKeyUsageNames: [KeyUsage: String] = [
    .digitalSignature: "Digital Signature", .nonRepudiation: "Non Repudiation",
    .keyEncipherment: "Key Encipherment", .dataEncipherment: "Data Encipherment", .keyAgreement: "Key Agreement",
    .keyCertSign: "Certificate Sign", .cRLSign: "CRL Sign",
]

/// OpenSSL's display names of the purposes it knows; the others it prints as dotted OIDs.
private let opensslPurposeNames: [ExtendedKeyUsage: String] = [
    .clientAuth: "TLS Web Client Authentication", .emailProtection: "E-mail Protection",
    .smartcardLogon: "Microsoft Smartcard Login", .pkinitClientAuth: "PKINIT Client Auth",
    .anyExtendedKeyUsage: "Any Extended Key Usage",
]

/// The `openssl verify -purpose` that covers each tag, where OpenSSL has one. EC encryption keys
/// have keyAgreement, which OpenSSL's `smimeencrypt` does not accept (it wants keyEncipherment).
private func opensslPurpose(_ tag: CredentialTag, _ algorithm: KeyAlgorithm) -> String? {
    switch tag {
    case .authentication: "sslclient"
    case .signing: "smimesign"
    case .encryption, .escrow: algorithm.isEC ? nil : "smimeencrypt"
    }
}

@Suite("Tag profile table: the test CA issues what the table says", .ownThreads, .timeLimit(.minutes(3)))
struct TagProfileTests {
    @Test(
        "Every tag's certificate from the test CA has the table's keyUsage, EKU and algorithm, as openssl reads it",
        arguments: KeyAlgorithm.allCases)
    func testCAFollowsTable(algorithm: KeyAlgorithm) throws {
        let dir = try TemporaryDirectory("tagprofile")
        defer { dir.remove() }
        let ca = try TestCA.initialize(at: dir.file("ca"), algorithm: .p256)
        let issued = try ca.issue(TestCAIssueRequest(algorithm: algorithm, escrowHistory: 1))
        let root = try dir.write("root.der", ca.rootCertificate.derBytes)
        let rootPEM = dir.file("root.pem")
        try OpenSSLFixtures.openssl(["x509", "-inform", "DER", "-in", root, "-out", rootPEM])
        let issuing = dir.file("issuing.pem")
        try OpenSSLFixtures.openssl([
            "x509", "-inform", "DER", "-in", try dir.write("issuing.der", ca.issuingCertificate.derBytes), "-out",
            issuing,
        ])
        #expect(issued.entries.map(\.tag) == CredentialTag.allCases)
        for entry in issued.entries {
            let profile = TagProfile.of(entry.tag)
            #expect(profile.tag == entry.tag)
            #expect(profile.allows(algorithm))
            for (index, pair) in ([entry.certifiedKey] + entry.keyHistory).enumerated() {
                let file = dir.file("\(entry.tag)-\(index).pem")
                try OpenSSLFixtures.openssl([
                    "x509", "-inform", "DER", "-in",
                    try dir.write("\(entry.tag)-\(index).der", pair.certificate.derBytes),
                    "-out", file,
                ])
                let text = String(
                    decoding: try OpenSSLFixtures.openssl([
                        "x509", "-in", file, "-noout", "-ext", "keyUsage,extendedKeyUsage",
                    ]),
                    as: UTF8.self)
                let required = profile.requiredKeyUsage(for: algorithm)
                let keyUsage = opensslKeyUsageNames.filter { required.contains($0.key) }
                    .sorted { $0.key.rawValue > $1.key.rawValue }.map(\.value)
                let purposes = profile.issuedPurposes.map { opensslPurposeNames[$0] ?? $0.rawValue }
                #expect(
                    text == """
                        X509v3 Key Usage: critical
                            \(keyUsage.joined(separator: ", "))
                        X509v3 Extended Key Usage: \("")
                            \(purposes.joined(separator: ", "))

                        """, "\(entry.tag) \(algorithm)")
                #expect(Set(profile.issuedPurposes).isSubset(of: profile.purposes))
                #expect(required.isDisjoint(with: TagProfile.caKeyUsage))

                // The key, as openssl reads it: an allowed curve, or an RSA modulus large enough.
                let key = String(
                    decoding: try OpenSSLFixtures.openssl(["x509", "-in", file, "-noout", "-text"]), as: UTF8.self)
                if algorithm.isEC {
                    let curve = try #require(key.firstMatch(of: /ASN1 OID: (\S+)/)).1
                    #expect(profile.curves.contains(String(curve)))
                } else {
                    let match = try #require(key.firstMatch(of: /Public-Key: \((\d+) bit\)/))
                    let bits = try #require(Int(match.1))
                    #expect(bits >= profile.minimumRSABits)
                }

                // openssl's own purpose check, where it has one for the tag (escrow pairs are
                // retired and expired: checked at a time inside their validity).
                if let purpose = opensslPurpose(entry.tag, algorithm), index == 0 {
                    let verified = try OpenSSLFixtures.openssl([
                        "verify", "-x509_strict", "-purpose", purpose, "-CAfile", rootPEM, "-untrusted", issuing, file,
                    ])
                    #expect(String(decoding: verified, as: UTF8.self) == "\(file): OK\n", "\(entry.tag) \(purpose)")
                }
            }
        }
    }
}
