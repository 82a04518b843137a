import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
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

@Suite("The delivery answers the request id that `new` carried (docs/PROTOCOL.md)", .timeLimit(.minutes(3)))
struct RequestIdTests {
    @Test("A client's new: the delivery URL carries its request id; the same new again is refused and issues nothing")
    func answersTheRequest() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let (url, providerScheme) = try world.client.requestURL()
        guard case .new(let client, let request) = try DeliveryMessage.parse(url, scheme: providerScheme) else {
            throw DCError(.invalid, "not a new URL", subject: url)
        }
        let issued = Counter()
        let receipt = try await world.service.answer(client: client, request: request) { registration in
            issued.increment()
            #expect(registration.clientId == "dcclient")
            return try world.credential(TestCAIssueRequest(commonName: "Asked for"))
        }
        #expect(receipt.request == request)
        let delivery = try #require(world.deliveries.all.first)
        #expect(delivery.hasPrefix("org.example.dcclient:/deliver?v=1&client=dcclient&request=\(request)&digest="))
        #expect(try world.client.installed()?.name == "Asked for (test CA)")
        #expect(world.service.ledger.record(request)?.outcome == "ok")

        // Replayed: refused before the issuing step, nothing delivered again.
        let replay = try await #require(throws: DCError.self) {
            _ = try await world.service.answer(client: client, request: request) { _ in
                issued.increment()
                return try world.credential()
            }
        }
        #expect(replay.code == .refusedMessage)
        #expect(replay.code.category.exitStatus == 77)
        #expect(replay.hint?.contains("new request id") == true)
        #expect(issued.value == 1)
        #expect(world.deliveries.all.count == 1)
    }

    @Test("A request id the provider used for its own send cannot be answered; an unknown client is missingClient")
    func refusals() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let own = try await world.service.send(try world.credential(), clientScheme: "org.example.dcclient")
        let issued = Counter()
        let reused = await thrownCode {
            _ = try await world.service.answer(client: "dcclient", request: own.request) { _ in
                issued.increment()
                return try world.credential()
            }
        }
        #expect(reused == .refusedMessage)
        let stranger = try await #require(throws: DCError.self) {
            _ = try await world.service.answer(client: "nobody", request: String(repeating: "1", count: 32)) { _ in
                issued.increment()
                return try world.credential()
            }
        }
        #expect(stranger.code == .missingClient)
        #expect(stranger.hint?.contains("dcclient register") == true)
        #expect(issued.value == 0)
    }

    @Test("Issuing fails: the request is marked not-sent, not left pending, and cannot be answered later")
    func issuingFails() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let request = String(repeating: "2", count: 32)
        let failed = await thrownCode {
            _ = try await world.service.answer(client: "dcclient", request: request) { _ in
                throw DCError(.providerFailed, "the CA is down")
            }
        }
        #expect(failed == .providerFailed)
        #expect(world.service.ledger.record(request)?.outcome == RequestLedger.notSent)
        #expect(
            await thrownCode {
                _ = try await world.service.send(
                    try world.credential(), clientScheme: "org.example.dcclient", answering: request)
            } == .usage)
        #expect(world.deliveries.all.isEmpty)
    }

    @Test("A dropped queued send (past the time limit) has its spool file removed")
    func droppedQueueRemovesSpoolFile() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let receipt = try await world.service.send(
            try world.credential(), clientScheme: "org.example.dcclient", queueIfUnavailable: true)
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/spool")
        #expect(FileManager.default.fileExists(atPath: spool.path(request: receipt.request)))
        try world.client.unlock(passphrase: world.passphrase)
        var late = world.service
        late.ledger.timeLimit = -1
        #expect(try await late.deliverQueued(clientId: "dcclient").isEmpty)
        #expect(!FileManager.default.fileExists(atPath: spool.path(request: receipt.request)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.directory).isEmpty)
        #expect(world.deliveries.all.isEmpty)
    }
}
