import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import TestCAProvider
import TestSupport
import Testing

/// Expiry: a credential whose authentication or signing certificate has expired, or is not valid
/// yet, is refused at delivery (by the client itself, whatever the provider let through) and at
/// use; an expired escrow certificate is fine, and old mail stays readable.
@Suite("Expiry: refused at delivery and at use, escrow excepted", .ownThreads, .timeLimit(.minutes(3)))
struct ExpiryTests {
    let day: TimeInterval = 86400

    @Test(
        "The client refuses a delivered credential whose authentication or signing certificate is expired or not valid yet (result invalid, nothing installed), even when the provider let it through; an expired escrow certificate is installed"
    )
    func refusedAtDelivery() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let now = Date()
        // Valid a year ago for a month; valid only from the day after tomorrow.
        let expired = try world.credential(TestCAIssueRequest(validityDays: 30, now: now - 400 * day))
        let early = try world.credential(TestCAIssueRequest(now: now + 2 * day))
        for (credential, then) in [(expired, now - 390 * day), (early, now + 3 * day)] {
            // A provider whose clock is wrong: its validation passes, the client's does not.
            let lax = CredentialValidator(now: then)
            #expect(lax.validate(credential).passes())
            let refused = await thrownCode {
                _ = try await world.service.send(credential, clientScheme: .exampleClient, validator: lax)
            }
            #expect(refused == .invalid)
            #expect(try world.client.installed() == nil)
        }
        // Signing alone expired is enough.
        let fresh = try world.credential()
        let mixed = try Credential(
            name: "mixed", serialNumber: "1", expirationDate: now + day,
            entries: fresh.entries.map { $0.tag == .signing ? expired[.signing]! : $0 })
        #expect(
            await thrownCode {
                _ = try await world.service.send(
                    mixed, clientScheme: .exampleClient, validator: CredentialValidator(now: now - 390 * day))
            } == .invalid)
        // An expired escrow certificate is what escrow is for: installed.
        let oldEscrow = try Credential(
            name: "with old escrow", serialNumber: "2", expirationDate: now + 300 * day,
            entries: fresh.entries.map { $0.tag == .escrow ? expired[.escrow]! : $0 })
        _ = try await world.service.send(oldEscrow, clientScheme: .exampleClient)
        #expect(try world.client.installed()?.name == "with old escrow")
    }

    @Test(
        "At use: usableCredential refuses (credentialExpired, exit 80) once the authentication or signing certificate has ended or before it starts; decrypting is not refused; the lifetime says which certificate and whether a renewal is due"
    )
    func refusedAtUse() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let now = Date()
        let credential = try world.credential(TestCAIssueRequest(escrowHistory: 1, validityDays: 10))
        _ = try await world.service.send(credential, clientScheme: .exampleClient)
        #expect(try world.client.usableCredential(now: now).name == credential.name)
        for (then, words) in [(now + 11 * day, "expired"), (now - day, "is not valid before")] {
            do {
                _ = try world.client.usableCredential(now: then)
                Issue.record("an unusable credential was handed out at \(then)")
            } catch let error as DCError {
                #expect(error.code == .credentialExpired && error.code.category.exitStatus == 80, "\(error)")
                #expect(error.message.contains("the authentication certificate \(words)"), "\(error)")
            }
        }
        // Mail to the encryption certificate still opens (decrypting old mail is not "using").
        let recipient = try world.dir.write("recipient.pem", PEM.certificate(credential[.encryption]!.certificate))
        let message = try world.dir.write("message", "still readable")
        let sealed = try OpenSSLFixtures.openssl([
            "cms", "-encrypt", "-aes256", "-binary", "-in", message, "-outform", "DER", "-recip", recipient,
        ])
        #expect(
            try world.client.decrypt(sealed).withUnsafeBytes { String(decoding: $0, as: UTF8.self) } == "still readable"
        )

        let soon = try #require(try world.client.lifetime(now: now, window: 30 * day))
        #expect(soon.renewalDue && soon.unusable.isEmpty)
        #expect(soon.certificates.filter { $0.historyIndex == nil }.allSatisfy { $0.state == .expiresSoon })
        // The retired escrow pair the test CA issues has expired; it does not matter.
        #expect(soon.certificates.contains { $0.historyIndex == 0 && $0.state == .expired })
        let later = try #require(try world.client.lifetime(now: now, window: 5 * day))
        #expect(!later.renewalDue)
        let ended = try #require(try world.client.lifetime(now: now + 11 * day, window: 0))
        #expect(Set(ended.unusable.map(\.tag)) == [.authentication, .signing])
    }
}
