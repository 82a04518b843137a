import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("Encryption at rest: the key stretched from a passphrase", .ownThreads, .timeLimit(.minutes(2)))
struct AtRestTests {
    /// What `openssl kdf` derives: the peer's PBKDF2-HMAC-SHA-256, 32 bytes.
    static func opensslKey(passphrase: [UInt8], salt: [UInt8], iterations: Int) throws -> [UInt8] {
        try OpenSSLFixtures.openssl([
            "kdf", "-binary", "-keylen", "32", "-kdfopt", "digest:SHA256",
            "-kdfopt", "hexpass:" + Digests.hex(passphrase), "-kdfopt", "hexsalt:" + Digests.hex(salt),
            "-kdfopt", "iter:\(iterations)", "PBKDF2",
        ])
    }

    @Test(
        "PBKDF2-HMAC-SHA-256 gives the bytes openssl kdf gives: passphrases around the HMAC block size, salts, counts",
        arguments: [0, 1, 32, 63, 64, 65, 200])
    func derivesAsOpenSSL(passphraseLength: Int) throws {
        for (saltLength, iterations) in [(0, 1), (16, 2), (16, 3), (7, 1000), (100, 4097)] {
            let passphrase = try Digests.random(passphraseLength).withUnsafeBytes { Array($0) }
            let salt = try Digests.random(saltLength).withUnsafeBytes { Array($0) }
            let ours = try AtRest.deriveKey(passphrase: SecretBytes(passphrase), salt: salt, iterations: iterations)
            #expect(
                ours.withUnsafeBytes { Array($0) }
                    == (try Self.opensslKey(passphrase: passphrase, salt: salt, iterations: iterations)),
                "passphrase \(passphraseLength) bytes, salt \(saltLength) bytes, \(iterations) iterations")
        }
    }

    @Test("The RFC 7914 test vector (PBKDF2-HMAC-SHA-256 of passwd and salt, 1 iteration), and the client's count")
    func knownAnswer() throws {
        let key = try AtRest.deriveKey(
            passphrase: SecretBytes(Array("passwd".utf8)), salt: Array("salt".utf8), iterations: 1)
        #expect(
            key.withUnsafeBytes { Digests.hex(Array($0)) }
                == "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
        let passphrase = Array("correct horse battery staple".utf8)
        let salt = try Digests.random(16).withUnsafeBytes { Array($0) }
        #expect(
            try AtRest.deriveKey(passphrase: SecretBytes(passphrase), salt: salt, iterations: 200_000)
                .withUnsafeBytes { Array($0) }
                == (try Self.opensslKey(passphrase: passphrase, salt: salt, iterations: 200_000)))
    }

    @Test("A count of 0, a negative one, or one past the limit (from an altered store file) is refused, not run")
    func refusesCounts() throws {
        for iterations in [0, -1, Int(Int32.max) + 1, AtRest.maximumIterations + 1] {
            #expect(throws: DCError.self) {
                try AtRest.deriveKey(passphrase: SecretBytes(Array("x".utf8)), salt: [1], iterations: iterations)
            }
        }
    }
}
