import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The reader as `FuzzTesting/Sources/FuzzCredentialReader` builds it: a passphrase at hand, so
/// that encrypted inputs reach the decrypting paths.
private let fuzzReader = CredentialReader(passphrase: FixedPassphrase(SecretBytes(Array("fuzz".utf8))))

/// The libFuzzer harnesses' inputs replayed in the ordinary suite, so that a seed or a kept crasher
/// that breaks the code fails `swift test`, not only a fuzz run nobody started.
@Suite("Fuzz seeds and crashers replayed: the credential reader", .ownThreads, .timeLimit(.minutes(3)))
struct FuzzSeedTests {
    @Test("Every harness in FuzzTesting/Sources has its seeds replayed here or in CredentialDeliveryTests")
    func everyHarnessReplayed() throws {
        let sources = Repository.root + "/FuzzTesting/Sources"
        // FuzzMessageHarness is the library the per-message harnesses share, not a harness.
        let harnesses = try FileManager.default.contentsOfDirectory(atPath: sources).filter {
            !$0.hasPrefix(".") && $0 != "FuzzMessageHarness"
        }
        #expect(
            harnesses.sorted() == [
                "FuzzAckMessage", "FuzzAvailableMessage", "FuzzCredentialReader", "FuzzDelegationMessage",
                "FuzzDeliverMessage",
                "FuzzDeliveryPayload", "FuzzDeliveryURL", "FuzzNewMessage", "FuzzPolicyMessage", "FuzzResultMessage",
            ])
        for harness in harnesses {
            #expect(FuzzInputs.all(harness).contains { !$0.isCrasher }, "\(harness) has no seeds")
        }
        // The seed directory replayed here is the one fuzz.sh gives the reader harness.
        let script = try String(contentsOfFile: Repository.root + "/FuzzTesting/fuzz.sh", encoding: .utf8)
        #expect(script.contains("seeds=(../Samples/credential)"))
    }

    @Test(
        "FuzzCredentialReader: a seed or crasher is read or refused with a DCError, and whatever is read describes itself",
        arguments: FuzzInputs.all("FuzzCredentialReader"))
    func reader(input: FuzzInput) throws {
        let material: KeyMaterial
        do {
            material = try fuzzReader.read(bytes: input.bytes, source: input.path)
        } catch is DCError {
            // Refused cleanly. The sample credential's PEM files must not be refused.
            #expect(!input.name.hasSuffix(".pem") || input.isCrasher, "a sample credential file was refused")
            return
        }
        for certificate in material.certificates {
            let details = try CertificateDetails(certificate)
            #expect(!details.subject.isEmpty)
        }
        if input.name.hasSuffix(".pem") && !input.isCrasher {
            // Each sample file is one certificate with its key (ca.pem: the CA certificate alone).
            #expect(!material.certificates.isEmpty)
            #expect((material.privateKey != nil) == (input.name != "ca.pem"))
        }
    }
}
