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

@Suite("PKCS#11 provider: keys to PKCS#8 where the token allows it", .ownThreads, .softHSM, .timeLimit(.minutes(3)))
struct PKCS11ProviderTests {
    /// Swift Testing makes a suite value per test: every test here prepares the SoftHSM fixture
    /// (and SOFTHSM2_CONF) before it can load the module, whatever runs first in the process.
    init() { _ = SoftHSM.shared }

    @Test(
        "Non-sensitive EC and RSA keys are rebuilt, a sensitive extractable one is wrapped: all byte-identical to openssl's PKCS#8"
    )
    func export() async throws {
        let provided = try await PKCS11Provider().provide(
            request([
                "uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02", "encryption=03"],
            ]))
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption])
        // RSA, rebuilt from its CRT components.
        #expect(
            provided.entries[2].privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.encryption.key)))
        #expect(
            provided.entries[0].privateKey.withPKCS8DER { Array($0) }
                == (try HostileInput.pkcs8(of: f.authentication.key)))
        #expect(
            provided.entries[1].privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.signing.key)))
        #expect(provided.entries[1].certificate.derBytes == (try HostileInput.der(of: f.signing.certificate)))
    }

    @Test("A login waiting for a person holds a thread of its own: the concurrency pool stays free meanwhile")
    func loginOffThePool() async throws {
        let person = WaitingPerson()
        let reads = ProcessInfo.processInfo.activeProcessorCount + 2
        // More reads than the pool has threads, each started on the pool, each asking for the PIN.
        let tasks = (0..<reads).map { _ in
            Task.detached {
                try await PKCS11Provider().provide(
                    ProviderRequest(
                        options: [
                            "uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01"], "module": ["softhsm2"],
                        ],
                        passphrase: person))
            }
        }
        // One read asks; the others wait for the token's login lock, which it holds meanwhile.
        #expect(person.asked.wait(timeout: .now() + 30) == .success)
        let pool = DispatchSemaphore(value: 0)
        Task.detached { pool.signal() }
        let poolRan = pool.wait(timeout: .now() + 10) == .success
        person.answer()
        for task in tasks { #expect(try await task.value.entries.map(\.tag) == [.authentication]) }
        #expect(poolRan, "a task on the pool waited for the logins")
    }

    @Test("Concurrent reads of one token all succeed: one call's logout does not end another's login")
    func concurrent() async throws {
        let options = [
            "uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02", "encryption=03"],
        ]
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 { group.addTask { try await PKCS11Provider().provide(request(options)).entries.count } }
            for try await count in group { #expect(count == 3) }
        }
    }

    @Test("The conformance kit passes for the export card")
    func conformance() async {
        let report = await ProviderConformance.check(
            PKCS11Provider(),
            request: request(["uri": ["pkcs11:token=Export%20Card"], "tag": ["authentication=01", "signing=02"]]),
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

@Suite(
    "PKCS#11 provider: choosing certificates (PIV layout, ids, object URIs)", .ownThreads, .softHSM,
    .timeLimit(.minutes(3)))
struct PKCS11SelectionTests {
    /// Swift Testing makes a suite value per test: every test here prepares the SoftHSM fixture
    /// (and SOFTHSM2_CONF) before it can load the module, whatever runs first in the process.
    init() { _ = SoftHSM.shared }

    @Test("The PIV layout gives four tags; the retired slots become escrow's history, newest first by validity")
    func pivLayout() async throws {
        let provided = try await PKCS11Provider().provide(
            request(["uri": ["pkcs11:token=Export%20Card"], "layout": ["piv"]]))
        #expect(provided.entries.map(\.tag) == [.authentication, .signing, .encryption, .escrow])
        let escrow = try #require(provided.entries.last)
        // id 06 holds the newer pair, 05 the older: the validity orders them, not the slot.
        #expect(escrow.certificate.derBytes == (try HostileInput.der(of: f.escrowHistory[0].certificate)))
        #expect(escrow.privateKey.withPKCS8DER { Array($0) } == (try HostileInput.pkcs8(of: f.escrowHistory[0].key)))
        #expect(
            escrow.keyHistory.map(\.certificate.derBytes) == [try HostileInput.der(of: f.escrowHistory[1].certificate)])
        #expect(
            escrow.keyHistory.map { $0.privateKey.withPKCS8DER { Array($0) } } == [
                try HostileInput.pkcs8(of: f.escrowHistory[1].key)
            ])
        // The escrow history does not shorten the credential's life.
        #expect(
            provided.suggestedExpirationDate
                == (try provided.entries.dropLast().compactMap { try CertificateDetails($0.certificate).notAfter }.min())
        )
        _ = try provided.credential()
    }

    @Test("A tag may name its certificate by an object URI; its key is the private key with the same id")
    func objectURI() async throws {
        let byURI = try await PKCS11Provider().provide(
            request([
                "uri": ["pkcs11:token=Export%20Card"],
                "tag": ["authentication=pkcs11:object=Certificate%201;type=cert", "escrow=05", "escrow=06"],
            ]))
        #expect(byURI.entries.map(\.tag) == [.authentication, .escrow])
        #expect(byURI.entries[0].certificate.derBytes == (try HostileInput.der(of: f.authentication.certificate)))
        #expect(byURI.entries[1].keyHistory.count == 1)
        // An explicit tag replaces the layout's choice for that tag.
        let replaced = try await PKCS11Provider().provide(
            request(["uri": ["pkcs11:token=Export%20Card"], "layout": ["piv"], "tag": ["signing=01"]]))
        #expect(replaced.entries[1].certificate == replaced.entries[0].certificate)
    }

    @Test("Bad selections are distinct errors naming the URI: none, several, another token, a repeated tag")
    func badSelections() async throws {
        let cases: [([String], DCError.Code, String)] = [
            (["authentication=pkcs11:object=Nothing"], .noSuchObject, "pkcs11:object=Nothing"),
            (["authentication=pkcs11:type=cert"], .multipleObjects, "pkcs11:type=cert"),
            (["authentication=pkcs11:token=PIV%20Card;id=%01"], .noSuchObject, "pkcs11:token=PIV%20Card;id=%01"),
            (
                ["authentication=pkcs11:object=Key%201;type=private"], .noSuchObject,
                "pkcs11:object=Key%201;type=private"
            ),
            (["signing=01", "signing=02"], .usage, ""),
            (["signing=0"], .usage, "signing=0"),
            (["authentication=pkcs11:id=%01;pin-value=123456"], .usage, ""),
            // Refused for the PIN before any rule that would print the argument back.
            (["nonsense=pkcs11:id=%01;pin-value=123456"], .usage, ""),
            (["authentication=zz;pin-value=123456"], .usage, ""),
            (["authentication=token=Card;PIN-Value=123456"], .usage, ""),
        ]
        for (tags, code, subject) in cases {
            do {
                _ = try await PKCS11Provider().provide(request(["uri": ["pkcs11:token=Export%20Card"], "tag": tags]))
                Issue.record("accepted \(tags)")
            } catch let error as DCError {
                #expect(error.code == code, "\(tags): \(error)")
                if !subject.isEmpty { #expect(error.subject == subject, "\(tags): \(error)") }
                #expect(!error.description.contains("123456"))
            }
        }
    }

    @Test("A text that carries a PIN is refused as such, never echoed, even when it is not a pkcs11: URI at all")
    func pinOutsideAURI() async throws {
        for uri in ["token=Card;pin-value=123456", "PKCS11X:pin-source=file:/tmp/123456", "pin-value=123456"] {
            do {
                _ = try await PKCS11Provider().provide(request(["uri": [uri], "tag": ["authentication=01"]]))
                Issue.record("accepted \(uri)")
            } catch let error as DCError {
                #expect(error.code == .usage && error.description.contains("carries a PIN"), "\(uri): \(error)")
                #expect(!error.description.contains("123456"), "\(uri): \(error)")
            }
        }
    }
}

/// A PIN source that waits, as a person at a prompt or a PIN pad does, until ``answer()``.
final class WaitingPerson: PassphraseSource {
    /// Signalled each time the PIN is asked for.
    let asked = DispatchSemaphore(value: 0)
    private let typed = DispatchGroup()

    init() { typed.enter() }

    func answer() { typed.leave() }

    func passphrase(for subject: String) throws -> SecretBytes? {
        asked.signal()
        typed.wait()
        return SecretBytes(Array(SoftHSM.userPIN.utf8))
    }
}
