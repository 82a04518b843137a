import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ProviderService
import SystemSupport
import TestCAProvider
import TestSupport
import Testing

@testable import ManagedClient

/// The attacks of docs/SECURITY.md on the delivery boundary, tried against the library: each test
/// makes the attack and checks that it fails and changed nothing, then runs the honest control.
@Suite("Trust at the delivery boundary (docs/SECURITY.md)", .ownThreads, .timeLimit(.minutes(3)))
struct BoundaryTests {
    @Test("A delivery older than the installed credential is kept out (stale), unless the user allows it")
    func noRollback() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        let older = try world.credential(TestCAIssueRequest(commonName: "Older"))
        let newer = try world.credential(TestCAIssueRequest(commonName: "Newer"))
        for credential in [older, newer] {
            #expect(
                await thrownCode { _ = try await world.service.send(credential, clientScheme: .exampleClient) }
                    == .notReady)
        }
        let urls = world.deliveries.all
        try #require(urls.count == 2)
        #expect(try world.client.handleDelivery(urls[1]).status == .ok)
        let stale = try world.client.handleDelivery(urls[0])
        #expect(stale.status == .stale)
        #expect(try world.client.installed() == newer)
        // The provider learns of it through the authenticated result.
        let record = try world.service.handleResult(
            try DeliveryResult.parse(try #require(stale.resultURL), scheme: world.service.callbackScheme))
        #expect(record.outcome == .stale)
        // The control: the user may choose the older one, by hand.
        let third = try world.credential(TestCAIssueRequest(commonName: "Older still"))
        _ = await thrownCode { _ = try await world.service.send(third, clientScheme: .exampleClient) }
        let before = try #require(world.client.installedSequence)
        let replayed = try #require(world.deliveries.all.last)
        let sequence = try DeliveryNotice.parse(replayed, scheme: try URLScheme("org.example.dcclient")).sequence
        #expect(sequence > before)
        #expect(try world.client.handleDelivery(replayed).status == .ok)
        #expect(try world.client.installed()?.entries.map(\.certifiedKey) == third.entries.map(\.certifiedKey))
    }

    @Test(
        "Attack: a stale delivery replayed gets the same answer (stale, the same refusal); its spool file is kept so that --allow-older installs it; at most 10 are kept, for a day"
    )
    func staleIsKeptAndAnsweredAlike() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        let spool = world.locations.dataHome + "/dcclient/apps/dcclient/spool"
        func kept() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".stale") }.sorted()
        }
        // One credential sent 13 times: deliveries number 1 to 13; the newest is installed first.
        let credential = try world.credential()
        for _ in 0..<13 {
            _ = await thrownCode { _ = try await world.service.send(credential, clientScheme: .exampleClient) }
        }
        let urls = world.deliveries.all
        try #require(urls.count == 13)
        let requests = try urls.map {
            try DeliveryNotice.parse($0, scheme: try URLScheme("org.example.dcclient")).request.text
        }
        #expect(try world.client.handleDelivery(urls[12]).status == .ok)
        // Eleven kept out: never more than the documented 10 kept, the most recently kept out.
        for url in urls[1...11] {
            #expect(try world.client.handleDelivery(url).status == .stale)
            #expect(try kept().count <= 10)
        }
        #expect(try kept() == requests[2...11].map { $0 + ".stale" }.sorted())
        // The first stale answer, and the same URL again: stale both times, with the same refusal.
        let first = try world.client.handleDelivery(urls[0])
        #expect(first.status == .stale && !first.replay)
        let refusal = try #require(first.staleRefusal)
        #expect(refusal.code == .refusedMessage && refusal.code.category.exitStatus == 77)
        #expect(refusal.message.contains("(number 1)") && refusal.message.contains("(number 13)"), "\(refusal)")
        let again = try world.client.handleDelivery(urls[0])
        #expect(again.replay && again.status == .stale)
        #expect(again.staleRefusal?.message == refusal.message && again.resultURL == first.resultURL)
        #expect(try kept().contains(requests[0] + ".stale") && kept().count == 10)
        // The user chooses it by hand: installed, its kept file gone; the provider, answered once
        // already, is sent nothing new.
        let chosen = try world.client.handleDelivery(urls[0], allowOlder: true)
        #expect(chosen.status == .ok && chosen.resultURL == nil && chosen.sequence == 1)
        #expect(world.client.installedSequence == 1)
        #expect(try !kept().contains(requests[0] + ".stale"))
        // Past the request time limit they stay, for the documented day: the user may choose one
        // later that day. Past it they go. A URL whose file went still answers stale, and says so.
        world.client.prune(now: Date().addingTimeInterval(86_400 - 60))
        #expect(try kept().count == 9)
        world.client.prune(now: Date().addingTimeInterval(86_400 + 60))
        #expect(try kept().isEmpty)
        #expect(try world.client.handleDelivery(urls[5]).staleRefusal?.message.contains("(number 6)") == true)
        let gone = await thrownError { _ = try world.client.handleDelivery(urls[5], allowOlder: true) }
        #expect(
            gone?.code == .notReady && gone?.message.contains("no longer kept") == true, "\(String(describing: gone))")
        #expect(world.client.installedSequence == 1)
    }

    @Test("A copy of the home directory taken while unlocked reads as locked; the key is in no file under HOME")
    func homeCopyIsLocked() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let credential = try world.credential()
        _ = try await world.service.send(credential, clientScheme: .exampleClient)
        #expect(try world.client.installed() == credential)
        // The unlocked key is in the session keyring (or the runtime directory), outside HOME,
        // and nowhere under HOME.
        let key = try world.client.storeKey().withUnsafeBytes { Array($0) }
        #expect(key.count == 32)
        for path in try FileManager.default.subpathsOfDirectory(atPath: world.locations.home) {
            let full = world.locations.home + "/" + path
            var info = stat()
            guard lstat(full, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            let bytes = try readBytes(full)
            #expect(
                SecretEncodings.found(key, in: String(decoding: bytes, as: UTF8.self)).isEmpty
                    && !Self.contains(bytes, key), "the store key is in \(path)")
        }
        // A copy of HOME, opened elsewhere with an empty runtime directory: locked.
        let copy = world.dir.file("copy")
        let copied = try run("/bin/cp", ["-a", world.locations.home, copy])
        try #require(copied.status == 0, "\(copied.stderrText)")
        let otherRuntime = world.dir.file("other-run")
        try #require(mkdir(otherRuntime, 0o700) == 0)
        let thief = ManagedClient(
            locations: XDGDirectories(environment: ["HOME": copy, "XDG_RUNTIME_DIR": otherRuntime]))
        #expect(!thief.isUnlocked)
        let error = try #require(throws: DCError.self) { try thief.installed() }
        #expect(error.code == .serviceUnavailable)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains {
            haystack[$0..<($0 + needle.count)].elementsEqual(needle)
        }
    }

    @Test(
        "A runtime directory inside HOME, or one others can read: unlocking is refused; with none, the kernel keyring alone holds the key"
    )
    func runtimeDirectoryChecked() throws {
        let world = try World()
        defer { world.dir.remove() }
        let home = world.dir.file("home")
        let inside = home + "/run"
        try #require(mkdir(inside, 0o700) == 0)
        let open = world.dir.file("open-run")
        try #require(mkdir(open, 0o755) == 0)
        chmod(open, 0o755)
        for environment in [["HOME": home, "XDG_RUNTIME_DIR": inside], ["HOME": home, "XDG_RUNTIME_DIR": open]] {
            let client = ManagedClient(locations: XDGDirectories(environment: environment))
            let error = try #require(throws: DCError.self) { try client.unlock(passphrase: world.passphrase) }
            #expect(error.code == .serviceUnavailable, "\(environment): \(error)")
        }
        // No runtime directory at all (an SSH login without logind, a container): the session
        // keyring the suite runs in holds the key, and nothing is written anywhere else.
        let keyringOnly = ManagedClient(locations: XDGDirectories(environment: ["HOME": home]))
        try keyringOnly.lock()
        #expect(!keyringOnly.isUnlocked)
        try keyringOnly.unlock(passphrase: world.passphrase)
        #expect(keyringOnly.isUnlocked)
        #expect(try FileManager.default.contentsOfDirectory(atPath: inside).isEmpty)
        try keyringOnly.lock()
        #expect(!keyringOnly.isUnlocked)
    }

    @Test("The handler check runs before sealing: a hijacked scheme gets nothing spooled, nothing queued")
    func hijackBeforeSealing() async throws {
        let world = try World(checkHandler: { _ in
            throw DCError(.invalid, "another handler claims org.example.dcclient:")
        })
        defer { world.dir.remove() }
        try world.client.lock()
        let error = await thrownCode {
            _ = try await world.service.send(
                try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        }
        #expect(error == .invalid)
        let spool = world.locations.dataHome + "/dcclient/apps/dcclient/spool"
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
        #expect(world.service.ledger.recent().isEmpty)
    }

    @Test("A forged or foreign availability notice changes no queue; the genuine one delivers")
    func forgedAvailable() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let receipt = try await world.service.send(
            try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        try world.client.unlock(passphrase: world.passphrase)
        let notice = try world.available()
        let signature = try #require(notice.signature).text
        let flipped = String(signature.dropLast()) + (signature.hasSuffix("0") ? "1" : "0")
        var unsigned = notice
        unsigned.signature = nil
        let foreign = try unsigned.signed(
            with: try MessageSigningKey.generate(), scheme: try URLScheme("org.example.provider"))
        var flippedNotice = notice
        flippedNotice.signature = try SignatureHex(flipped)
        for forged in [flippedNotice, foreign] {
            #expect(await thrownCode { _ = try await world.service.deliverQueued(forged) } == .refusedMessage)
            #expect(world.service.ledger.record(receipt.request)?.queuedURL != nil)
        }
        #expect(world.deliveries.all.isEmpty)
        #expect(try await world.service.deliverQueued(try world.available()) == [receipt.request])
    }

    @Test("A delivery signed by anyone but the pinned provider is refused; so is one when the registration changed")
    func forgedDelivery() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        _ = await thrownCode {
            _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        }
        let url = try #require(world.deliveries.all.first)
        let clientScheme = try URLScheme("org.example.dcclient")
        let parts = try DeliveryNotice.parse(url, scheme: clientScheme)
        let impostor = try MessageSigningKey.generate()
        let forged = try DeliveryNotice(
            client: parts.client, request: parts.request, digest: parts.digest, sequence: parts.sequence
        ).signed(with: impostor, scheme: clientScheme).url(scheme: clientScheme)
        #expect(throws: DCError.self) { try world.client.handleDelivery(forged) }
        // The impostor also replaces the provider's registration: the pin holds.
        let path = world.locations.providerRegistration(.exampleProvider)
        var registration = try #require(try Registrations.read(ProviderRegistration.self, at: path))
        let genuine = registration
        registration.signingKey = PinnedKeys.encode(impostor.publicKey)
        try Registrations.publish(registration, at: path)
        let refused = try #require(throws: DCError.self) { try world.client.handleDelivery(forged) }
        #expect(refused.code == .refusedMessage)
        #expect(try world.client.installed() == nil)
        try Registrations.publish(genuine, at: path)
        #expect(try world.client.handleDelivery(url).status == .ok)
    }

    @Test("The ledger and the spool stay bounded: expired requests close, old records go, none within the time limit")
    func pruning() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        let queued = try await world.service.send(
            try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool")
        #expect(FileManager.default.fileExists(atPath: spool.path(request: queued.request)))
        let recent = try RequestID(String(repeating: "c", count: 32))
        try world.service.ledger.reserve(request: recent, clientScheme: .exampleClient)
        // Now: nothing past its time limit, nothing removed.
        world.service.prune()
        #expect(world.service.ledger.recent().count == 2)
        // Past the time limit: both close; the queued one's sealed file goes.
        let later = Date().addingTimeInterval(world.service.ledger.timeLimit + 60)
        world.service.prune(now: later)
        #expect(world.service.ledger.record(queued.request)?.outcome == CredentialService.expired)
        #expect(!FileManager.default.fileExists(atPath: spool.path(request: queued.request)))
        // Past the retention: the finished records go.
        world.service.prune(now: later.addingTimeInterval(world.service.ledger.retention))
        #expect(world.service.ledger.recent().isEmpty)
    }

    @Test("A client given its own trust anchors installs only credentials that chain to them")
    func clientTrustAnchors() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let stranger = try CredentialReader().read(file: OpenSSLFixtures.shared.otherCA.certificate).certificates
        try world.client.trust(anchors: stranger)
        #expect(try world.client.trustAnchors() == stranger)
        let refused = await thrownCode {
            _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        }
        #expect(refused == .invalid)
        #expect(try world.client.installed() == nil)
        // The control: the test CA's root and issuing CA as anchors.
        try world.client.trust(anchors: [world.ca.rootCertificate, world.ca.issuingCertificate])
        let credential = try world.credential()
        _ = try await world.service.send(credential, clientScheme: .exampleClient)
        #expect(try world.client.installed() == credential)
    }

    @Test("Two deliveries handled at once: the higher number wins whatever the order (one handler at a time)")
    func concurrentHandlersNeverRollBack() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        for round in 0..<8 {
            for name in ["Older \(round)", "Newer \(round)"] {
                _ = await thrownCode {
                    _ = try await world.service.send(
                        try world.credential(TestCAIssueRequest(commonName: name, tags: [.authentication])),
                        clientScheme: .exampleClient)
                }
            }
            let urls = Array(world.deliveries.all.suffix(2))
            let client = world.client
            await withTaskGroup(of: Void.self) { group in
                for url in urls.reversed() { group.addTask { _ = try? client.handleDelivery(url) } }
            }
            let newest = try DeliveryNotice.parse(urls[1], scheme: try URLScheme("org.example.dcclient"))
            #expect(world.client.installedSequence == newest.sequence, "round \(round)")
            #expect(try world.client.installed()?.name.hasPrefix("Newer") == true, "round \(round)")
        }
    }

    @Test("A replayed or premature availability notice leaves the queue as it was")
    func availabilityReplay() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let first = try world.available()
        #expect(try await world.service.deliverQueued(first).isEmpty)
        // Made while unlocked (a locked client cannot sign), presented while locked.
        let early = try world.available(now: Date().addingTimeInterval(1))
        try world.client.lock()
        let queued = try await world.service.send(
            try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        // The captured notice again: refused, the delivery still queued.
        #expect(await thrownCode { _ = try await world.service.deliverQueued(first) } == .refusedMessage)
        #expect(world.service.ledger.record(queued.request)?.queuedURL != nil)
        // A genuine, newer notice while the client is locked: nothing leaves the queue.
        #expect(await thrownCode { _ = try await world.service.deliverQueued(early) } == .serviceUnavailable)
        #expect(world.service.ledger.record(queued.request)?.queuedURL != nil)
        #expect(world.deliveries.all.isEmpty)
        try world.client.unlock(passphrase: world.passphrase)
        let later = try world.available(now: Date().addingTimeInterval(2))
        #expect(try await world.service.deliverQueued(later) == [queued.request])
    }

    @Test("A registration whose client id is not an id names no file of the provider's")
    func hostileClientIdInRegistration() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let signingKey = world.locations.stateHome + "/dcprovision/signing-key"
        let before = try readBytes(signingKey)
        let path = world.locations.clientRegistration(.exampleClient)
        let genuine = try readBytes(path)
        for hostile in ["../signing-key", "../config", "a/b", ""] {
            // Written as the file's text: the typed registration cannot hold such an id.
            var object = try #require(try JSONSerialization.jsonObject(with: Data(genuine)) as? [String: Any])
            object["clientId"] = hostile
            try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
            #expect(
                await thrownCode {
                    _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
                } == .invalid, "\(hostile)")
            #expect(throws: DCError.self) { try world.service.pair(clientScheme: .exampleClient) }
        }
        #expect(try readBytes(signingKey) == before)
        #expect(world.deliveries.all.isEmpty)
    }

    @Test("With nothing pinned yet, a forged delivery pins nothing; the first genuine one pins the registered key")
    func firstDeliveryPinsOnlyWhenGenuine() async throws {
        let world = try World(deliver: false)
        defer { world.dir.remove() }
        _ = await thrownCode {
            _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        }
        // The policy that went first pinned the provider; forget it again.
        try world.client.forgetProvider()
        let url = try #require(world.deliveries.all.first)
        let clientScheme = try URLScheme("org.example.dcclient")
        let parts = try DeliveryNotice.parse(url, scheme: clientScheme)
        let forged = DeliveryNotice(
            client: parts.client, request: parts.request, digest: parts.digest, sequence: parts.sequence,
            signature: try SignatureHex(String(repeating: "0", count: 128))
        ).url(scheme: clientScheme)
        let pin = world.locations.dataHome + "/dcclient/apps/dcclient/store/provider.json"
        #expect(throws: DCError.self) { try world.client.handleDelivery(forged) }
        #expect(!FileManager.default.fileExists(atPath: pin))
        #expect(try world.client.handleDelivery(url).status == .ok)
        #expect(FileManager.default.fileExists(atPath: pin))
    }

    @Test("Locking finds the unlocked key however the data directory is spelled")
    func lockWhateverTheSpelling() throws {
        let world = try World()
        defer { world.dir.remove() }
        let runtime = try #require(world.locations.runtimeDirectory)
        let spelled = ManagedClient(
            locations: XDGDirectories(environment: [
                "HOME": world.dir.file("home"), "XDG_DATA_HOME": world.dir.file("home") + "/.local//share/",
                "XDG_RUNTIME_DIR": runtime,
            ]))
        #expect(spelled.isUnlocked)
        try spelled.lock()
        #expect(!world.client.isUnlocked)
        #expect(try FileManager.default.contentsOfDirectory(atPath: runtime + "/dcclient").isEmpty)
    }
}
