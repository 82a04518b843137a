import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import ProviderService
import SystemSupport
import TestCAProvider
import TestSupport
import Testing

@Suite("Send pipeline: the AppConnect semantics", .ownThreads, .timeLimit(.minutes(3)))
struct SendPipelineTests {
    @Test("support is missingClient / oldClient / present from the registration; canSend needs services available")
    func supportAndCanSend() throws {
        let world = try World()
        defer { world.dir.remove() }
        #expect(try world.service.support(clientScheme: try URLScheme("org.example.nobody")) == .missingClient)
        #expect(try world.service.support(clientScheme: try URLScheme("ORG.Example.DCClient")) == .present)
        #expect(try world.service.canSendCredential(clientScheme: .exampleClient))
        try world.client.lock()
        #expect(try !world.service.canSendCredential(clientScheme: .exampleClient))
        try world.client.unlock(passphrase: world.passphrase)
        #expect(try world.service.canSendCredential(clientScheme: .exampleClient))
        // An older client.
        let path = world.locations.clientRegistration(.exampleClient)
        var registration = try #require(try Registrations.read(ClientRegistration.self, at: path))
        registration.protocolVersion = 0
        try Registrations.publish(registration, at: path)
        #expect(try world.service.support(clientScheme: .exampleClient) == .oldClient)
        #expect(try !world.service.canSendCredential(clientScheme: .exampleClient))
    }

    @Test("Service creation fails on an empty brand; a scheme is refused when invalid and lowercased")
    func serviceCreation() throws {
        let opener: CredentialService.Opener = { _, _ in }
        #expect(throws: DCError.self) {
            try CredentialService(brand: " ", callbackScheme: try URLScheme("org.example.p"), open: opener)
        }
        for bad in ["", "1abc", "a b", "a_b"] {
            #expect(throws: DCError.self) { try URLScheme(bad) }
        }
        #expect(
            try CredentialService(brand: "B", callbackScheme: try URLScheme("Org.Example.P"), open: opener)
                .callbackScheme.text == "org.example.p")
    }

    @Test(
        "Send errors carry the AppConnect codes: missingClient -1003, oldClient -1004, serviceUnavailable -1002, invalid -1001"
    )
    func sendErrors() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let credential = try world.credential()
        #expect(
            await thrownCode {
                _ = try await world.service.send(credential, clientScheme: try URLScheme("org.example.nobody"))
            }
                == .missingClient)
        try world.client.lock()
        let locked = await thrownCode {
            _ = try await world.service.send(credential, clientScheme: .exampleClient)
        }
        #expect(locked == .serviceUnavailable)
        #expect(locked?.appConnectValue == -1002)
        #expect(world.deliveries.all.isEmpty)  // refused before anything was sealed or sent
        try world.client.unlock(passphrase: world.passphrase)
        let expired = try world.credential(TestCAIssueRequest(tags: [.authentication], negative: .expired))
        let invalid = await thrownCode {
            _ = try await world.service.send(expired, clientScheme: .exampleClient)
        }
        #expect(invalid == .invalid)
        #expect(invalid?.appConnectValue == -1001)
        let path = world.locations.clientRegistration(.exampleClient)
        var registration = try #require(try Registrations.read(ClientRegistration.self, at: path))
        registration.protocolVersion = 0
        try Registrations.publish(registration, at: path)
        #expect(
            await thrownCode { _ = try await world.service.send(credential, clientScheme: .exampleClient) }?
                .appConnectValue == -1004)
    }

    @Test(
        "A send installs the credential; a newer one replaces it, keeping only the old encryption pairs (in the key history); nothing of the payload is left in the spool"
    )
    func installAndReplace() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let first = try world.credential(TestCAIssueRequest(commonName: "First", escrowHistory: 2))
        let receipt = try await world.service.send(
            first, clientScheme: .exampleClient, validator: world.validator())
        #expect(receipt.steps.last?.contains("confirmed") == true)
        #expect(try world.client.installed() == first)
        let second = try world.credential(TestCAIssueRequest(commonName: "Second"))
        _ = try await world.service.send(second, clientScheme: .exampleClient)
        let installed = try #require(try world.client.installed())
        #expect(
            installed.serialNumber == second.serialNumber
                && installed.entries.map(\.certifiedKey) == second.entries.map(\.certifiedKey))
        // The old authentication and signing keys are gone; its encryption pairs are history.
        let firstEscrow = try #require(first[.escrow])
        #expect(
            installed[.escrow]?.keyHistory
                == [try #require(first[.encryption]).certifiedKey, firstEscrow.certifiedKey] + firstEscrow.keyHistory)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: world.locations.dataHome + "/dcclient/apps/dcclient/spool"
            ).isEmpty)
        #expect(world.service.ledger.recent().map(\.outcome) == [.ok, .ok])
        // Locked: the installed credential cannot be read (the store key is gone).
        try world.client.lock()
        #expect(throws: DCError.self) { try world.client.installed() }
    }

    @Test(
        "Replays: a delivery URL handled again is not reinstalled; the same result again changes nothing; another, forged or late is refused"
    )
    func replays() async throws {
        let world = try World()
        defer { world.dir.remove() }
        _ = try await world.service.send(
            try world.credential(TestCAIssueRequest(commonName: "Once")), clientScheme: .exampleClient)
        let url = try #require(world.deliveries.all.first)
        let again = try world.client.handleDelivery(url)
        #expect(again.replay)
        #expect(again.status == .ok)
        let result = try #require(again.resultURL)
        // The identical authenticated result (a retry) is acknowledged, and nothing changes.
        let before = try #require(world.service.ledger.recent().first)
        let provider = try URLScheme("org.example.provider")
        #expect(try world.service.handleResult(try DeliveryResult.parse(result, scheme: provider)).outcome == .ok)
        #expect(try #require(world.service.ledger.recent().first).completed == before.completed)
        // Any other result for the completed request is refused.
        var other = try DeliveryResult.parse(result, scheme: provider)
        other.status = .invalid
        #expect(await thrownCode { _ = try world.service.handleResult(other) } == .refusedMessage)
        // A forged result for a pending request.
        let pending = World.Pending(world)
        let request = try pending.start()
        let forged = DeliveryResult(
            request: request, status: .ok, mac: try SHA256Hex(String(repeating: "0", count: 64)))
        #expect(await thrownCode { _ = try world.service.handleResult(forged) } == .refusedMessage)
        // The right MAC after the time limit.
        var late = world.service.ledger
        late.timeLimit = -1
        let mac = DeliveryPayload.resultMAC(key: pending.resultKey, request: request, status: .ok)
        #expect(await thrownCode { _ = try late.complete(request: request, status: .ok, mac: mac) } == .refusedMessage)
        #expect(try world.service.ledger.complete(request: request, status: .ok, mac: mac).outcome == .ok)
    }

    @Test(
        "A spool file with one byte flipped, a URL with one digest digit changed, or a swapped spool file: refused as altered (exit 77), nothing installed; the untouched delivery then installs"
    )
    func tamperedSpool() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        let credentials = try [
            world.credential(TestCAIssueRequest(commonName: "First")),
            world.credential(TestCAIssueRequest(commonName: "Second")),
        ]
        for credential in credentials {
            // Nobody delivers: the client never confirms.
            #expect(
                await thrownCode { _ = try await world.service.send(credential, clientScheme: .exampleClient) }
                    == .notReady)
        }
        let urls = world.deliveries.all
        try #require(urls.count == 2)
        let first = try #require(
            try DeliveryMessage.parse(urls[0], scheme: try URLScheme("org.example.dcclient")).deliverParts)
        let second = try #require(
            try DeliveryMessage.parse(urls[1], scheme: try URLScheme("org.example.dcclient")).deliverParts)
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool")
        let processed = world.locations.dataHome + "/dcclient/apps/dcclient/store/processed"

        /// Handles `url` and expects the digest check's refusal of `request`'s spool file, with
        /// nothing installed or recorded.
        func expectRefused(_ url: String, request: RequestID, _ what: String, bySignature: Bool = false) {
            do {
                let handled = try world.client.handleDelivery(url)
                Issue.record("\(what): accepted (\(handled.status))")
            } catch let error as DCError {
                #expect(error.code == .refusedMessage, "\(what): \(error)")
                if bySignature {
                    #expect(error.subject == request.text, "\(what): \(error)")
                    #expect(error.description.contains("not signed by the pinned provider"), "\(what): \(error)")
                } else {
                    #expect(error.subject == spool.path(request: request), "\(what): \(error)")
                    #expect(error.description.contains("does not match the digest in the URL"), "\(what): \(error)")
                }
            } catch {
                Issue.record("\(what): \(error)")
            }
            #expect((try? world.client.installed()) == .some(nil), "\(what): something was installed")
            #expect(!FileManager.default.fileExists(atPath: processed + "/\(request)"), "\(what): recorded as handled")
        }

        // One byte of the first spool file flipped in place (same file, owner and mode); the URL and
        // its digest untouched, nothing recomputed.
        let firstPath = spool.path(request: first.request)
        var bytes = try readBytes(firstPath)
        bytes[bytes.count / 2] ^= 0x01
        let fd = open(firstPath, O_WRONLY | O_CLOEXEC)
        try #require(fd >= 0)
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        close(fd)
        try #require(written == bytes.count)
        expectRefused(urls[0], request: first.request, "a flipped byte in the spool file")

        // One hex digit of the second URL's digest changed; its spool file untouched.
        let digit = second.digest.last == "0" ? "1" : "0"
        let wrongDigest = String(second.digest.dropLast()) + digit
        try #require(wrongDigest != second.digest)
        let tamperedURL = urls[1].replacingOccurrences(of: second.digest, with: wrongDigest)
        try #require(tamperedURL != urls[1])
        expectRefused(tamperedURL, request: second.request, "a changed digit in the URL's digest", bySignature: true)
        // The same change, signed again by the provider (as if its key were stolen): the spool
        // file's digest no longer matches, so the file check refuses it on its own.
        let clientScheme = try URLScheme("org.example.dcclient")
        let resigned = try DeliveryNotice.parse(tamperedURL, scheme: clientScheme)
        let resignedURL = try DeliveryNotice(
            client: try ClientID(second.client), request: second.request,
            digest: try SHA256Hex(wrongDigest), sequence: second.sequence
        ).signed(with: try world.service.signingKey(), scheme: clientScheme).url(scheme: clientScheme)
        #expect(resigned.signature != nil)
        expectRefused(resignedURL, request: second.request, "a changed digest, signed again")

        // Swapped: the second request's file under the first request's name, with the digest
        // recomputed for it: the digest matches, the payload is bound to the other request.
        let secondBytes = try readBytes(spool.path(request: second.request))
        unlink(firstPath)
        _ = try spool.write(secondBytes, request: first.request)
        let swappedURL = try DeliveryNotice(
            client: .exampleClient, request: first.request,
            digest: try SHA256Hex(Digests.hex(Digests.sha256(secondBytes))), sequence: 1000
        ).signed(with: try world.service.signingKey(), scheme: clientScheme).url(scheme: clientScheme)
        #expect(throws: DCError.self) { try world.client.handleDelivery(swappedURL) }
        #expect(try world.client.installed() == nil)

        // The control: the untouched second delivery is accepted, so the refusals above were the
        // checks', not a broken set-up's.
        #expect(try world.client.handleDelivery(urls[1]).status == .ok)
        #expect(try world.client.installed() == credentials[1])
    }

    @Test("serviceUnavailable sends can be queued, and go out when the client announces availability")
    func queuedWhileLocked() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let credential = try world.credential(TestCAIssueRequest(commonName: "Queued"))
        let receipt = try await world.service.send(
            credential, clientScheme: .exampleClient, queueIfUnavailable: true)
        #expect(receipt.steps.last?.hasPrefix("queued:") == true)
        #expect(world.deliveries.all.isEmpty)
        #expect(world.service.ledger.recent().first?.queuedURL != nil)
        try world.client.unlock(passphrase: world.passphrase)
        #expect(
            try world.client.availabilityURL()?.hasPrefix("org.example.provider:/available?v=2&client=dcclient&time=")
                == true)
        let sent = try await world.service.deliverQueued(try world.available())
        #expect(sent == [receipt.request])
        #expect(try world.client.installed() == credential)
        #expect(world.service.ledger.recent().first?.outcome == .ok)
        // Not sent twice (a newer notice finds the queue empty).
        #expect(try await world.service.deliverQueued(try world.available(now: Date().addingTimeInterval(1))).isEmpty)
        // An entry older than the time limit is dropped, not delivered.
        try world.client.lock()
        _ = try await world.service.send(
            try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        try world.client.unlock(passphrase: world.passphrase)
        let later = Date().addingTimeInterval(world.service.ledger.timeLimit + 60)
        #expect(try await world.service.deliverQueued(try world.available(now: later), now: later).isEmpty)
        #expect(try world.client.installed() == credential)
    }

    @Test("A ledger record that cannot be read back while queueing is an ioError, not a crash")
    func unreadableLedgerRecord() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let ledger = world.service.ledger.directory
        // Once the delivery is signed, the send reads its record back to queue it: swap the
        // record for a directory there, which the file system refuses to read (EISDIR), root or not.
        let code = await thrownCode {
            _ = try await world.service.send(
                try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true,
                progress: { step in
                    guard step.hasPrefix("signed:") else { return }
                    for name in (try? FileManager.default.contentsOfDirectory(atPath: ledger)) ?? []
                    where name.hasSuffix(".json") {
                        unlink(ledger + "/" + name)
                        mkdir(ledger + "/" + name, 0o700)
                    }
                })
        }
        #expect(code == .ioError)
        #expect(world.deliveries.all.isEmpty)
    }

    @Test(
        "Twenty concurrent sends are each delivered exactly once; the client ends with the highest-numbered one, never rolled back"
    )
    func concurrentSends() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let credentials = try (0..<20).map {
            try world.credential(TestCAIssueRequest(commonName: "User \($0)", tags: [.authentication]))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for credential in credentials {
                group.addTask {
                    do {
                        _ = try await world.service.send(credential, clientScheme: .exampleClient)
                    } catch let error as DCError where error.code == .refusedMessage {
                        // Arrived after a higher-numbered delivery: kept out, answered `stale`.
                    }
                }
            }
            try await group.waitForAll()
        }
        let records = world.service.ledger.recent(limit: 100)
        #expect(records.count == 20)
        #expect(records.allSatisfy { $0.outcome == .ok || $0.outcome == .stale })
        #expect(records.contains { $0.outcome == .ok })
        #expect(Set(world.deliveries.all).count == 20)
        let processed = try FileManager.default.contentsOfDirectory(
            atPath: world.locations.dataHome + "/dcclient/apps/dcclient/store/processed")
        #expect(processed.count == 20)
        // The installed credential is the one delivered with the highest number.
        let numbered = try world.deliveries.all.map { url in
            try #require(try DeliveryMessage.parse(url, scheme: try URLScheme("org.example.dcclient")).deliverParts)
        }
        let highest = try #require(numbered.max { $0.sequence < $1.sequence })
        #expect(world.client.installedSequence == highest.sequence)
        #expect(world.service.ledger.record(highest.request)?.outcome == .ok)
        #expect(credentials.contains(try #require(try world.client.installed())))
    }
}

extension World {
    /// A request recorded in the ledger as a send would, without delivering it.
    struct Pending {
        let world: World
        let resultKey: SecretBytes
        init(_ world: World) {
            self.world = world
            resultKey = try! Digests.random(32)
        }
        func start() throws -> RequestID {
            let request = RequestID.random()
            try world.service.ledger.create(
                RequestLedger.Record(
                    request: request, clientScheme: .exampleClient, credentialName: "pending", created: Date(),
                    resultKey: resultKey.withUnsafeBytes { Data($0).base64EncodedString() }))
            return request
        }
    }
}

extension DeliveryMessage {
    /// The parts of a `deliver` message (the client and digest as text), or nil for another
    /// message (for `#require`).
    var deliverParts: (client: String, request: RequestID, digest: String, sequence: UInt64)? {
        if case .deliver(let notice) = self {
            return (notice.client.text, notice.request, notice.digest.text, notice.sequence)
        }
        return nil
    }
}
