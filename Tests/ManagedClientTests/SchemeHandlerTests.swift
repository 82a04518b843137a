import ClientWorld
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import ProviderService
import SystemSupport
import TestSupport
import Testing

@Suite(
    "The client's scheme handler answers the provider as the reference app does", .ownThreads, .timeLimit(.minutes(3)))
struct SchemeHandlerTests {
    /// What `handle(url:…)` opens, recorded; an acknowledgement is handed to the provider's
    /// service as its handler would (a result only parsed: these sends gave up waiting for it).
    static func answering(_ world: World, _ sent: Box) -> @Sendable (String) async throws -> Void {
        let service = world.service
        return { url in
            sent.append(url)
            let scheme = URLScheme.exampleProvider
            if url.contains(":/ack?") {
                _ = try service.handleAcknowledgement(try Acknowledgement.parse(url, scheme: scheme))
            } else {
                _ = try DeliveryResult.parse(url, scheme: scheme)
            }
        }
    }

    @Test(
        "A policy is applied, then acknowledged (file I/O when it made the client ready, then the state); locked, the acknowledgement waits; retired, the client is erased"
    )
    func policies() async throws {
        let world = try World(paired: false, handlesPolicies: false)
        defer { world.dir.remove() }
        let client = world.client
        _ = try world.service.pair(clientScheme: .exampleClient)
        var policy = try #require(try world.service.policyRecord(clientId: .exampleClient)).policy
        let sent = Box()
        var reported: [ManagedClient.HandledURL] = []
        let first = try await client.handle(
            url: try world.policyURL(policy), send: Self.answering(world, sent), whenHandled: { reported.append($0) })
        let update = try #require(first.handled.policyUpdate)
        #expect(reported.count == 1 && reported.first?.policyUpdate?.policy == policy)
        #expect(update.becameReady && update.policy == policy)
        #expect(first.answer == .sent && !first.erased)
        #expect(sent.all.map { $0.contains("&of=fileio&") } == [true, false])
        let record = try #require(try world.service.policyRecord(clientId: .exampleClient))
        #expect(record.authAcknowledgement?.state == .applied && record.fileIOAcknowledgement?.state == .applied)
        #expect(!record.isPending)

        // Locked: applied, but the acknowledgement cannot be signed; nothing is sent.
        try client.lock()
        policy.sequence += 1
        policy.state = .unauthorized
        let locked = try await client.handle(url: try world.policyURL(policy), send: Self.answering(world, sent))
        #expect(locked.answer == .awaitsUnlock && !locked.erased)
        #expect(try client.authState == .unauthorized)
        #expect(sent.all.count == 2)

        // Retired, still locked: erased all the same.
        policy.sequence += 1
        policy.state = .retired
        let retired = try await client.handle(url: try world.policyURL(policy), send: Self.answering(world, sent))
        #expect(retired.answer == .awaitsUnlock && retired.erased)
        #expect(client.isRetired)
        #expect(
            !FileManager.default.fileExists(
                atPath: world.locations.dataHome + "/dcclient/apps/dcclient/store/wrapped-key.json"))
        #expect(sent.all.count == 2)
    }

    @Test("With no provider registered, nothing is sent: a retired client is erased all the same")
    func noProvider() async throws {
        let world = try World()
        defer { world.dir.remove() }
        var policy = try #require(try world.client.currentPolicy())
        Registrations.remove(at: world.locations.providerRegistration(.exampleProvider))
        policy.sequence += 1
        policy.state = .retired
        let outcome = try await world.client.handle(url: try world.policyURL(policy))
        #expect(outcome.answer == .noProvider && outcome.erased)
        #expect(world.client.isRetired)
    }

    @Test(
        "A delivery's result goes to the provider; a stale one is answered, then refused (exit 77); chosen by hand, it is installed and nothing more is sent"
    )
    func deliveries() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        let credential = try world.credential()
        for _ in 0..<2 {
            _ = await thrownCode { _ = try await world.service.send(credential, clientScheme: .exampleClient) }
        }
        let urls = world.deliveries.all
        try #require(urls.count == 2)
        let sent = Box()
        let newer = try await world.client.handle(url: urls[1], send: Self.answering(world, sent))
        let installed = try #require(newer.handled.delivery)
        #expect(installed.status == .ok && newer.answer == .sent)
        #expect(sent.all == [installed.resultURL].compactMap { $0 })

        var reported: [ManagedClient.HandledURL] = []
        let refusal = await thrownError {
            _ = try await world.client.handle(
                url: urls[0], send: Self.answering(world, sent), whenHandled: { reported.append($0) })
        }
        #expect(refusal?.code == .refusedMessage && refusal?.remedy == .installStaleDelivery)
        #expect(sent.all.count == 2 && sent.all[1].contains("status=stale"))
        // Reported before the refusal, as handled.
        #expect(reported.count == 1 && reported.first?.delivery?.status == .stale)

        let chosen = try await world.client.handle(url: urls[0], allowOlder: true, send: Self.answering(world, sent))
        #expect(chosen.answer == .notDue && sent.all.count == 2)
        #expect(world.client.installedSequence == 1)
    }

    @Test("A message meant for the provider is refused, and nothing is answered")
    func providerMessages() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let sent = Box()
        let request = try world.client.requestURL().url.replacingOccurrences(
            of: "org.example.provider:", with: "org.example.dcclient:")
        let refused = await thrownError {
            _ = try await world.client.handle(url: request, send: Self.answering(world, sent))
        }
        #expect(refused?.code == .invalid)
        #expect(sent.all.isEmpty)
    }
}

extension ManagedClient.HandledURL {
    /// The policy update, when a policy was handled.
    fileprivate var policyUpdate: ManagedClient.PolicyUpdate? {
        if case .policy(let update) = self { update } else { nil }
    }
    /// The delivery's outcome, when a delivery was handled.
    fileprivate var delivery: ManagedClient.Handled? {
        if case .delivery(let handled) = self { handled } else { nil }
    }
}
