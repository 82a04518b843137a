import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import TestSupport
import Testing

/// The credential's own expiration date in the library: the send pipeline refuses a credential
/// past it before sealing, and the client's one rule (`CredentialLifetime`) refuses to use one
/// past it while its certificates are still valid. The tools' side is `CredentialExpiryCommandTests`.
@Suite("The credential's expiration date in the send pipeline and the client", .ownThreads, .timeLimit(.minutes(3)))
struct CredentialExpirationTests {
    @Test(
        "Attack: a credential past its expiration date is refused before sealing (invalid, exit 65): nothing spooled, nothing installed"
    )
    func refusedAtSend() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let fresh = try world.credential()
        let lapsed = try Credential(
            name: "lapsed", serialNumber: "1", expirationDate: Date() - 60, entries: fresh.entries)
        let error = try #require(
            await thrownError { _ = try await world.service.send(lapsed, clientScheme: .exampleClient) })
        #expect(error.code == .invalid && error.code.category.exitStatus == 65, "\(error)")
        #expect(error.message.contains("expiration date"), "\(error)")
        let spool = world.locations.dataHome + "/dcclient/apps/dcclient/spool"
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).isEmpty)
        #expect(world.deliveries.all.isEmpty)
        #expect(try world.client.installed() == nil)
    }

    @Test(
        "At use: past the credential's expiration date, with every certificate valid, usableCredential refuses (credentialExpired, exit 80) naming the date; the lifetime is not usable and a renewal is due"
    )
    func refusedAtUse() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let fresh = try world.credential()
        let expires = Date() + 86400
        let credential = try Credential(
            name: "a day", serialNumber: "2", expirationDate: expires, entries: fresh.entries)
        _ = try await world.service.send(credential, clientScheme: .exampleClient)
        #expect(try world.client.usableCredential().name == "a day")
        let before = try #require(try world.client.lifetime(window: 0))
        #expect(before.usable && before.credentialState == .valid && !before.renewalDue)
        #expect(try #require(try world.client.lifetime(window: 2 * 86400)).renewalDue)

        let later = expires + 60
        let error = try #require(await thrownError { _ = try world.client.usableCredential(now: later) })
        #expect(error.code == .credentialExpired && error.code.category.exitStatus == 80, "\(error)")
        #expect(error.message.contains("the credential expired"), "\(error)")
        let after = try #require(try world.client.lifetime(now: later, window: 0))
        #expect(!after.usable && after.unusable.isEmpty && after.credentialState == .expired && after.renewalDue)
    }

    @Test(
        "Attack: a delivery handled after the credential's expiration date (a provider clock behind, a late handler) is refused by the client (invalid) and nothing is installed"
    )
    func refusedOnDelivery() async throws {
        // The provider sends a credential that ends in a minute; the client handles the delivery
        // two minutes later by its clock (its handler is run by hand here, with that `now`).
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        let fresh = try world.credential()
        let credential = try Credential(
            name: "a minute", serialNumber: "3", expirationDate: Date() + 60, entries: fresh.entries)
        _ = try? await world.service.send(credential, clientScheme: .exampleClient)
        let url = try #require(world.deliveries.all.first)
        let handled = try world.client.handleDelivery(url, now: Date() + 120)
        #expect(handled.status == .invalid, "\(handled.status)")
        #expect(try world.client.installed() == nil, "the client installed a lapsed credential")
    }

}
