import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import ProviderService
import TestCAProvider
import TestSupport
import Testing

/// Counts how often the issuing step ran.
final class Counter: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

@Suite(
    "The delivery answers the request id that `new` carried (docs/PROTOCOL.md)", .ownThreads, .timeLimit(.minutes(3)))
struct RequestIdTests {
    @Test("A client's new: the delivery URL carries its request id; the same new again is refused and issues nothing")
    func answersTheRequest() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let message = try world.new()
        let request = message.request
        let issued = Counter()
        let receipt = try await world.service.answer(message) { registration in
            issued.increment()
            #expect(registration.clientId == .exampleClient)
            return try world.credential(TestCAIssueRequest(commonName: "Asked for"))
        }
        #expect(receipt.request == request)
        let delivery = try #require(world.deliveries.all.first)
        #expect(delivery.hasPrefix("org.example.dcclient:/deliver?v=2&client=dcclient&request=\(request)&digest="))
        #expect(try world.client.installed()?.name == "Asked for (test CA)")
        #expect(world.service.ledger.record(request)?.outcome == .ok)

        // Replayed: refused before the issuing step, nothing delivered again.
        let replay = try await #require(throws: DCError.self) {
            _ = try await world.service.answer(message) { _ in
                issued.increment()
                return try world.credential()
            }
        }
        #expect(replay.code == .refusedMessage)
        #expect(replay.code.category.exitStatus == 77)
        #expect(replay.remedy == .askWithNewRequest)
        #expect(issued.value == 1)
        #expect(world.deliveries.all.count == 1)
    }

    @Test(
        "A request id the provider used for its own send cannot be answered; a client that was never paired, a forged signature, a late or early new, a registration changed since pairing: refused, nothing issued"
    )
    func refusals() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let own = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        let issued = Counter()
        func answer(_ message: CredentialRequest, _ service: CredentialService? = nil) async -> DCError.Code? {
            await thrownCode {
                _ = try await (service ?? world.service).answer(message) { _ in
                    issued.increment()
                    return try world.credential()
                }
            }
        }
        #expect(await answer(try world.new(request: own.request)) == .refusedMessage)
        // Forged: every value of a genuine request, with one bit of the signature changed.
        let fresh = try world.new()
        let (client, request, time) = (fresh.client, fresh.request, fresh.time)
        let signature = try #require(fresh.signature).text
        var flipped = fresh
        flipped.signature = try SignatureHex(String(signature.dropLast()) + (signature.hasSuffix("0") ? "1" : "0"))
        #expect(await answer(flipped) == .refusedMessage)
        // Signed by another key (a program that made its own key pair).
        let stranger = try CredentialRequest(client: client, request: request, time: time)
            .signed(with: try MessageSigningKey.generate(), scheme: try URLScheme("org.example.provider"))
        #expect(await answer(stranger) == .refusedMessage)
        // Late and early.
        let limit = world.service.ledger.timeLimit
        #expect(await answer(try world.new(now: Date().addingTimeInterval(-limit - 60))) == .refusedMessage)
        #expect(await answer(try world.new(now: Date().addingTimeInterval(limit + 60))) == .refusedMessage)
        // A client id nobody paired.
        let unpaired = try CredentialRequest(client: try ClientID("nobody"), request: request, time: time)
            .signed(with: try MessageSigningKey.generate(), scheme: try URLScheme("org.example.provider"))
        let nobody = await thrownError {
            _ = try await world.service.answer(unpaired) { _ in try world.credential() }
        }
        #expect(nobody?.code == .refusedMessage)
        #expect(nobody?.remedy == .pairIfYours)
        // The registration now shows another key than the one paired (a program replaced it).
        let path = world.locations.clientRegistration(.exampleClient)
        var registration = try #require(try Registrations.read(ClientRegistration.self, at: path))
        let genuine = registration
        registration.signingKey = PinnedKeys.encode(try MessageSigningKey.generate().publicKey)
        try Registrations.publish(registration, at: path)
        #expect(await answer(try world.new()) == .refusedMessage)
        try Registrations.publish(genuine, at: path)
        #expect(issued.value == 0)
        #expect(world.deliveries.all.count == 1)
        // The control: the same client's genuine request is answered.
        #expect(await answer(try world.new()) == nil)
        #expect(issued.value == 1)
    }

    @Test("A provider that never paired with the client answers none of its requests")
    func unpairedProvider() async throws {
        let world = try World(paired: false)
        defer { world.dir.remove() }
        let refused = await thrownError {
            _ = try await world.service.answer(try world.new()) { _ in try world.credential() }
        }
        #expect(refused?.code == .refusedMessage)
        #expect(world.deliveries.all.isEmpty)
        #expect(world.service.ledger.recent().isEmpty)
    }

    @Test("Card sources: refused unless the operator allowed this client, then at most N an hour")
    func cardRequests() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let issued = Counter()
        func answer(_ message: CredentialRequest? = nil) async -> DCError.Code? {
            await thrownCode {
                _ = try await world.service.answer(try message ?? world.new(), fromCard: true) { _ in
                    issued.increment()
                    return try world.credential()
                }
            }
        }
        let refusedOnce = try world.new()
        #expect(await answer(refusedOnce) == .refusedMessage)
        #expect(await answer() == .refusedMessage)
        #expect(issued.value == 0)
        _ = try world.service.pair(
            clientScheme: .exampleClient, allowCardRequests: true, cardRequestsPerHour: 2)
        // A request refused before is not answered once the policy would allow it: its id is spent.
        #expect(await answer(refusedOnce) == .refusedMessage)
        #expect(await answer() == nil)
        #expect(await answer() == nil)
        #expect(await answer() == .serviceUnavailable)
        #expect(issued.value == 2)
    }

    @Test("Issuing fails: the request is marked not-sent, not left pending, and cannot be answered later")
    func issuingFails() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let request = try RequestID(String(repeating: "2", count: 32))
        let failed = await thrownCode {
            _ = try await world.service.answer(try world.new(request: request)) { _ in
                throw DCError(.providerFailed, "the CA is down")
            }
        }
        #expect(failed == .providerFailed)
        #expect(world.service.ledger.record(request)?.outcome == RequestLedger.notSent)
        #expect(
            await thrownCode {
                _ = try await world.service.send(
                    try world.credential(), clientScheme: .exampleClient, answering: request)
            } == .usage)
        #expect(world.deliveries.all.isEmpty)
    }

    @Test("A dropped queued send (past the time limit) has its spool file removed")
    func droppedQueueRemovesSpoolFile() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let receipt = try await world.service.send(
            try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool")
        #expect(FileManager.default.fileExists(atPath: spool.path(request: receipt.request)))
        try world.client.unlock(passphrase: world.passphrase)
        let later = Date().addingTimeInterval(world.service.ledger.timeLimit + 60)
        #expect(try await world.service.deliverQueued(try world.available(now: later), now: later).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: spool.path(request: receipt.request)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.directory).isEmpty)
        #expect(world.deliveries.all.isEmpty)
    }
}
