import CredentialCoding
import DerivedCredentials
import DerivedCredentialsTesting
import Foundation
import PKCS11Provider
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

private func request(_ options: [String: [String]], pin: String? = SoftHSM.userPIN) -> ProviderRequest {
    _ = SoftHSM.shared  // SOFTHSM2_CONF before any module is loaded
    return ProviderRequest(
        options: options.merging(["module": ["softhsm2"]]) { a, _ in a },
        passphrase: pin.map { FixedPassphrase(SecretBytes(Array($0.utf8))) } ?? NoPassphrase())
}

@Suite("PKCS#11 provider: keys to PKCS#8 where the token allows it")
struct PKCS11ProviderTests {
    @Test("Non-sensitive EC and RSA keys are rebuilt, a sensitive extractable one is wrapped: all byte-identical to openssl's PKCS#8")
    func export() async throws {
        let provided = try await PKCS11Provider().provide(
            request(["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02", "encryption=03"]]))
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption])
        // RSA, rebuilt from its CRT components.
        #expect(provided.entries[2].privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.encryption.key)))
        #expect(provided.entries[0].privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.authentication.key)))
        #expect(provided.entries[1].privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.signing.key)))
        #expect(provided.entries[1].certificate.derBytes == (try HostileInput.der(of: f.signing.certificate)))
    }

    @Test("Concurrent reads of one token all succeed: one call's logout does not end another's login")
    func concurrent() async throws {
        let options = ["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02", "encryption=03"]]
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 { group.addTask { try await PKCS11Provider().provide(request(options)).entries.count } }
            for try await count in group { #expect(count == 3) }
        }
    }

    @Test("The conformance kit passes for the export card")
    func conformance() async {
        let report = await ProviderConformance.check(
            PKCS11Provider(), request: request(["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02"]]),
            failingRequests: [
                request([:]), request(["uri": ["pkcs11:token=Nobody"], "layout": ["piv"]]),
                request(["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=09"]]),
                request(["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01"]], pin: nil),
            ])
        #expect(report.isConforming, "\(report)")
    }

    @Test("A PIV card's keys cannot leave it: an error naming the object and pointing at derivation")
    func notExtractable() async throws {
        do {
            _ = try await PKCS11Provider().provide(request(["uri": ["pkcs11:token=PIV%20Card"], "layout": ["piv"]]))
            Issue.record("exported a non-extractable key")
        } catch let error as DCError {
            #expect(error.code == .keyNotExtractable)
            #expect(error.subject == "pkcs11:token=PIV%20Card;id=%01")
            #expect(error.description.contains("derive new keys"))
        }
    }
}
