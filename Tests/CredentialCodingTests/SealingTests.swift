import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// A recipient: a key and a self-signed certificate, as a managed client registers them.
private func recipient(_ algorithm: KeyAlgorithm) throws -> (key: PrivateKey, certificate: Certificate) {
    let key = try KeyGeneration.generate(algorithm)
    let certificate = try CertificateSigner(selfSigningWith: key).issue(
        CertificateProfile(
            subject: DistinguishedName([.init("CN", "dcclient")]), notBefore: Date(),
            notAfter: Date().addingTimeInterval(86400),
            keyUsage: algorithm.isEC ? .keyAgreement : .keyEncipherment),
        for: key)
    return (key, certificate)
}

@Suite("Sealing: CMS AuthEnvelopedData", .ownThreads, .timeLimit(.minutes(3)))
struct SealingTests {
    static let message = SecretBytes(Array("{\"requestId\":\"42\",\"entries\":[]}".utf8))

    @Test("Round trip to EC and RSA recipients", arguments: [KeyAlgorithm.p256, .p384, .rsa2048])
    func roundTrip(algorithm: KeyAlgorithm) throws {
        let (key, certificate) = try recipient(algorithm)
        let sealed = try Sealing.seal(Self.message, to: certificate)
        #expect(try Sealing.open(sealed, with: key, certificate: certificate) == Self.message)
        // The plaintext does not appear in the sealed bytes.
        #expect(!sealed.starts(with: Self.message.withUnsafeBytes { Array($0) }))
        #expect(String(decoding: sealed, as: UTF8.self).contains("requestId") == false)
    }

    @Test("The openssl CLI opens what we seal, and we open what it seals")
    func interoperates() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (key, certificate) = try recipient(.p256)
        let keyFile = try dir.write("client.key", PEM.privateKey(key).withUnsafeBytes { Array($0) })
        let certificateFile = try dir.write("client.pem", PEM.certificate(certificate))
        let sealedFile = try dir.write("sealed.cms", try Sealing.seal(Self.message, to: certificate))
        let opened = try OpenSSLFixtures.openssl(
            ["cms", "-decrypt", "-inform", "DER", "-in", sealedFile, "-recip", certificateFile, "-inkey", keyFile])
        #expect(opened == Self.message.withUnsafeBytes { Array($0) })
        let printed = String(
            decoding: try OpenSSLFixtures.openssl(["cms", "-cmsout", "-print", "-inform", "DER", "-in", sealedFile]),
            as: UTF8.self)
        #expect(printed.contains("id-smime-ct-authEnvelopedData"))
        let plain = try dir.write("plain.txt", "from openssl")
        let theirs = try OpenSSLFixtures.openssl(
            ["cms", "-encrypt", "-aes-256-gcm", "-binary", "-recip", certificateFile, "-in", plain, "-outform", "DER"])
        #expect(
            try Sealing.open(theirs, with: key, certificate: certificate) == SecretBytes(Array("from openssl".utf8)))
        // Plain EnvelopedData (CBC, no authentication) is refused.
        let unauthenticated = try OpenSSLFixtures.openssl(
            ["cms", "-encrypt", "-aes-256-cbc", "-binary", "-recip", certificateFile, "-in", plain, "-outform", "DER"])
        #expect(throws: DCError.self) { try Sealing.open(unauthenticated, with: key, certificate: certificate) }
    }

    @Test("Any altered byte, a wrong key, trailing bytes or an oversized message: refused")
    func tampering() throws {
        let (key, certificate) = try recipient(.p256)
        let (otherKey, otherCertificate) = try recipient(.p256)
        let sealed = try Sealing.seal(Self.message, to: certificate)
        var refusedFlips = 0
        for index in stride(from: sealed.count - 60, to: sealed.count, by: 3) {
            var altered = sealed
            altered[index] ^= 0x01
            if (try? Sealing.open(altered, with: key, certificate: certificate)) == nil { refusedFlips += 1 }
        }
        #expect(refusedFlips == 20)
        #expect(throws: DCError.self) { try Sealing.open(sealed, with: otherKey, certificate: otherCertificate) }
        #expect(throws: DCError.self) { try Sealing.open(sealed + [0], with: key, certificate: certificate) }
        #expect(throws: DCError.self) {
            try Sealing.open(sealed, with: key, certificate: certificate, maximumSize: 100)
        }
    }
}
