import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The numbers docs/SECURITY.md promises about the store's key derivation, written out here as the
/// document writes them, never computed from the constant that holds them: a constant changed
/// without the document fails these tests.
@Suite("Documented limits: the store's PBKDF2 iteration count", .ownThreads, .timeLimit(.minutes(1)))
struct DocumentedLimitsTests {
    @Test("An iteration count of 1 to 10 000 000 is run (openssl kdf's bytes at the top), 0 and 10 000 001 are refused")
    func iterationCounts() throws {
        for iterations in [0, 10_000_001] {
            let refused = try #require(throws: DCError.self, "\(iterations)") {
                try AtRest.deriveKey(
                    passphrase: SecretBytes(Array("x".utf8)), salt: Array("s".utf8), iterations: iterations)
            }
            #expect(refused.code == .invalid)
        }
        #expect(throws: Never.self) {
            _ = try AtRest.deriveKey(passphrase: SecretBytes(Array("x".utf8)), salt: Array("s".utf8), iterations: 1)
        }
        // The most a store file may ask for: about 5 s on a loaded core. The bytes are what
        // `openssl kdf -keylen 32 -kdfopt digest:SHA256 -kdfopt pass:x -kdfopt salt:s
        // -kdfopt iter:10000000 PBKDF2` prints.
        let top = try AtRest.deriveKey(
            passphrase: SecretBytes(Array("x".utf8)), salt: Array("s".utf8), iterations: 10_000_000)
        #expect(
            top.withUnsafeBytes { Digests.hex(Array($0)) }
                == "f264f211efd795c786cb3eec98999bb3704c717da0b4d12ed2c6837369fafcf7")
    }
}
