import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("CertificateSummary: a token listing's fields without decoding the key", .ownThreads, .timeLimit(.minutes(3)))
struct CertificateSummaryTests {
    /// Self-signed certificates the openssl CLI makes for each kind of key: the named curves, RSA
    /// of two sizes, a curve given by explicit parameters and Ed25519 (the last two are read the
    /// long way).
    static let keys: [(name: String, options: [String])] = [
        ("P-256", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
        ("P-384", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]),
        ("P-521", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-521"]),
        ("brainpool", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:brainpoolP256r1"]),
        ("explicit", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-pkeyopt", "ec_param_enc:explicit"]),
        ("RSA 2048", ["-newkey", "rsa:2048"]),
        ("RSA 3072", ["-newkey", "rsa:3072"]),
        ("Ed25519", ["-newkey", "ed25519"]),
    ]

    @Test(
        "Subject and key algorithm are what CertificateDetails reads with the whole certificate parsed",
        arguments: keys.map(\.name))
    func sameAsDetails(name: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let options = try #require(Self.keys.first { $0.name == name }).options
        let out = dir.file("c.der")
        _ = try OpenSSLFixtures.openssl(
            ["req", "-x509"] + options + [
                "-nodes", "-keyout", dir.file("k.pem"), "-subj", "/O=Example, Inc./CN=Ünïcode \(name)", "-days", "2",
                "-outform", "DER", "-out", out,
            ])
        let certificate = Certificate(derBytes: try readBytes(out))
        let summary = try CertificateSummary(certificate)
        let details = try CertificateDetails(certificate)
        #expect(summary.subject == details.subject)
        #expect(summary.keyAlgorithm == details.keyAlgorithm)
        #expect(!summary.keyAlgorithm.isEmpty && summary.keyAlgorithm != "unknown")
    }

    @Test("Malformed certificates are refused as CertificateDetails refuses them")
    func refusesMalformed() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try OpenSSLFixtures.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            dir.file("k.pem"), "-subj", "/CN=x", "-days", "2", "-outform", "DER", "-out", dir.file("c.der"),
        ])
        let der = try readBytes(dir.file("c.der"))
        for bad in [Array(der.dropLast()), der + [0], Array(der.prefix(40)), [0x30, 0x00], [0x04, 0x01, 0x00]] {
            #expect(throws: DCError.self) { try CertificateSummary(Certificate(derBytes: bad)) }
            #expect(throws: DCError.self) { try CertificateDetails(Certificate(derBytes: bad)) }
        }
    }
}
