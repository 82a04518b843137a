import AuthTokens
import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ProviderService
import SystemSupport
import TestSupport
import Testing

@testable import ManagedClient

/// The names of the `needles` found in any regular file under `roots`: their raw bytes, or any
/// text encoding of them (``SecretEncodings``).
private func search(_ roots: [String], for needles: [(String, [UInt8])]) -> [String] {
    var found: [String] = []
    for root in roots {
        let walker = FileManager.default.enumerator(atPath: root)
        while let relative = walker?.nextObject() as? String {
            let path = root + "/" + relative
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                let data = FileManager.default.contents(atPath: path)
            else { continue }
            for (name, needle) in needles
            where data.range(of: Data(needle)) != nil || !SecretEncodings.found(needle, in: Array(data)).isEmpty {
                found.append(name)
            }
        }
    }
    return found
}

@Suite("The managed-app runtime: ready, authorization, acknowledgements, retire", .ownThreads, .timeLimit(.minutes(5)))
struct AuthorizationTests {
    @Test("Before the first policy nothing answers with a default: not ready, and no credential or file can be read")
    func notReady() async throws {
        let world = try World(paired: false)
        defer { world.dir.remove() }
        let client = world.client
        #expect(!client.ready)
        #expect(await thrownCode { _ = try client.authState } == .policyNotReady)
        #expect(await thrownCode { _ = try client.authMessage } == .policyNotReady)
        #expect(await thrownCode { _ = try client.secureFileIOPolicy } == .policyNotReady)
        #expect(client.secureServicesAvailability == .unavailable)
        #expect(await thrownCode { _ = try client.installed() } == .policyNotReady)
        #expect(await thrownCode { try client.secureFiles.write([1, 2, 3], to: "x") } == .policyNotReady)
        #expect(await thrownCode { try client.pasteboard.copy("x") } == .policyNotReady)
    }

    @Test("Pairing authorizes: the policy goes out before the first credential, and both acknowledgements come back")
    func pairingAuthorizes() async throws {
        let world = try World()
        defer { world.dir.remove() }
        #expect(try world.client.authState == .authorized)
        #expect(try world.client.secureFileIOPolicy == .required)
        #expect(world.client.secureServicesAvailability == .available)
        _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        let record = try #require(try world.service.policyRecord(clientId: .exampleClient))
        #expect(record.authAcknowledgement?.state == .applied)
        #expect(record.authAcknowledgement?.sequence == record.policy.sequence)
        #expect(record.fileIOAcknowledgement?.state == .applied)
        #expect(!record.isPending)
        #expect(try world.client.installed() != nil)
    }

    @Test(
        "Unauthorized: reads refused (notAuthorized, exit 77) with the provider's message; sends refused before sealing; authorize and unlock again and all is back"
    )
    func unauthorize() async throws {
        let world = try World()
        defer { world.dir.remove() }
        _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        try world.client.secureFiles.write(Array("kept".utf8), to: "note")
        try world.client.pasteboard.copy("copied")
        try await world.setPolicy {
            $0.state = .unauthorized
            $0.message = "Device out of compliance"
        }
        #expect(try world.client.authState == .unauthorized)
        #expect(try world.client.authMessage == "Device out of compliance")
        #expect(world.client.secureServicesAvailability == .unavailable)
        #expect(!world.client.isUnlocked)  // acknowledged, then locked
        for read in [
            { _ = try world.client.installed() }, { _ = try world.client.secureFiles.read("note") },
            { _ = try world.client.pasteboard.paste() }, { _ = try world.client.secureFiles.list() },
        ] as [() throws -> Void] {
            #expect(await thrownCode(read) == .notAuthorized)
        }
        #expect(DCError.Code.notAuthorized.category.exitStatus == 77)
        // The provider sends nothing, not even a credential, and seals nothing.
        let before = world.deliveries.all.count
        await #expect(throws: DCError.self) {
            _ = try await world.service.send(
                try world.credential(), clientScheme: .exampleClient, queueIfUnavailable: true)
        }
        #expect(world.deliveries.all.count == before)
        #expect(
            try FileManager.default.contentsOfDirectory(
                atPath: world.locations.dataHome + "/dcclient/apps/dcclient/spool"
            ).isEmpty)
        // Unlocking works (acknowledgements need the signing key) but services stay unavailable.
        try world.client.unlock(passphrase: world.passphrase)
        #expect(await thrownCode { _ = try world.client.secureFiles.read("note") } == .notAuthorized)
        try await world.setPolicy { $0.state = .authorized }
        #expect(try world.client.secureFiles.read("note").withUnsafeBytes { Array($0) } == Array("kept".utf8))
        #expect(try world.client.pasteboard.paste() == "copied")
    }

    @Test(
        "A forged, altered, replayed, older, late or misaddressed policy changes nothing (refusedMessage, exit 77)")
    func forgedPolicies() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let client = world.client
        let current = try #require(try client.currentPolicy())
        var next = current
        next.sequence += 1
        next.state = .unauthorized
        let genuine = try world.policyURL(next)
        var refused: [String] = []
        // Signed by another key.
        let stranger = try MessageSigningKey.generate()
        let clientScheme = try URLScheme("org.example.dcclient")
        refused.append(
            try PolicyNotice(
                client: try ClientID("dcclient"), policy: next, time: Int64(Date().timeIntervalSince1970)
            )
            .signed(with: stranger, scheme: clientScheme).url(scheme: clientScheme))
        // Altered after signing: another state, another message, another number.
        refused.append(genuine.replacingOccurrences(of: "state=unauthorized", with: "state=retired"))
        refused.append(genuine.replacingOccurrences(of: "message=&", with: "message=SGk&"))
        refused.append(genuine.replacingOccurrences(of: "seq=\(next.sequence)&", with: "seq=\(next.sequence + 5)&"))
        // Late, and for another client.
        refused.append(try world.policyURL(next, time: Date().addingTimeInterval(-3600)))
        var other = try PolicyNotice.parse(genuine, scheme: clientScheme)
        other.client = try ClientID("someone-else")
        other = try other.signed(with: try world.service.signingKey(), scheme: clientScheme)
        refused.append(other.url(scheme: clientScheme))
        for url in refused {
            #expect(await thrownCode { _ = try client.handlePolicy(url) } == .refusedMessage, "\(url)")
            #expect(try client.currentPolicy() == current)
        }
        // The genuine one applies once; once acknowledged, the same URL again, or an older policy,
        // is refused (before, the provider may send it again: it had no answer).
        #expect(try client.handlePolicy(genuine).policy == next)
        #expect(try client.handlePolicy(genuine).repeated)
        try await client.authStateApplied(.applied) { _ in }
        #expect(await thrownCode { _ = try client.handlePolicy(genuine) } == .refusedMessage)
        #expect(await thrownCode { _ = try client.handlePolicy(try world.policyURL(current)) } == .refusedMessage)
        #expect(try client.authState == .unauthorized)
    }

    @Test(
        "Attack: an edited, replaced, older, foreign, unsigned or removed policy record reads as damaged (notAuthorized, exit 77): nothing can be read; the provider's next policy repairs it"
    )
    func damagedPolicyRecord() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let client = world.client
        _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        try client.secureFiles.write(Array("kept".utf8), to: "note")
        try client.pasteboard.copy("copied")
        let record = world.locations.dataHome + "/dcclient/apps/dcclient/store/policy.json"
        let older = try readBytes(record)  // authorized, genuine
        let authorized = try #require(try client.currentPolicy())
        try await world.setPolicy {
            $0.state = .unauthorized
            $0.message = "Device out of compliance"
        }
        try client.unlock(passphrase: world.passphrase)  // only the authorization stands in the way
        let genuine = try readBytes(record)
        let text = String(decoding: genuine, as: UTF8.self)
        #expect(text.contains("state=unauthorized"))
        var foreignPolicy = authorized
        foreignPolicy.sequence += 10
        let foreign = try world.service.policyURL(
            foreignPolicy, clientId: try ClientID("someone-else"), clientScheme: .exampleClient)
        let clientScheme = try URLScheme("org.example.dcclient")
        let stranger = try PolicyNotice(
            client: try ClientID("dcclient"), policy: foreignPolicy, time: Int64(Date().timeIntervalSince1970)
        ).signed(with: try MessageSigningKey.generate(), scheme: clientScheme).url(scheme: clientScheme)
        func stored(_ url: String) throws -> [UInt8] {
            Array(try JSONSerialization.data(withJSONObject: ["url": url, "acknowledged": true]))
        }
        let attacks: [(String, [UInt8]?)] = [
            (
                "the state edited",
                Array(text.replacingOccurrences(of: "state=unauthorized", with: "state=authorized").utf8)
            ),
            (
                "the unsigned record of the previous version, state 1",
                Array(
                    "{\"policy\":{\"state\":1,\"message\":\"\",\"autoLock\":900,\"sequence\":\(authorized.sequence + 1)},\"signed\":\(Int(Date().timeIntervalSince1970))}"
                        .utf8)
            ),
            ("an older genuine policy", older),
            ("another client's genuine policy", try stored(foreign)),
            ("a policy signed by another key", try stored(stranger)),
            ("removed", nil),
        ]
        for (attack, bytes) in attacks {
            unlink(record)
            if let bytes { try Data(bytes).write(to: URL(fileURLWithPath: record)) }
            #expect(!client.ready, "\(attack)")
            #expect(client.secureServicesAvailability == .unavailable, "\(attack)")
            for read in [
                { _ = try client.authState }, { _ = try client.installed() },
                { _ = try client.secureFiles.read("note") },
                { _ = try client.pasteboard.paste() }, { _ = try client.secureFiles.list() },
                { try client.secureFiles.write([1], to: "x") },
            ] as [() throws -> Void] {
                let error = await thrownError(read)
                #expect(error?.code == .notAuthorized, "\(attack): \(String(describing: error))")
                #expect(error?.message.contains("the policy record is damaged") == true, "\(attack)")
            }
            // Unlocking still works: the repairing policy is acknowledged with the sealed signing key.
            try client.unlock(passphrase: world.passphrase)
        }
        // The genuine record back: unauthorized, with the provider's message.
        try Data(genuine).write(to: URL(fileURLWithPath: record))
        #expect(try client.authState == .unauthorized && client.authMessage == "Device out of compliance")
        // Damaged again, then the provider authorizes: its next policy replaces the record.
        try Data(older).write(to: URL(fileURLWithPath: record))
        #expect(await thrownCode { _ = try client.authState } == .notAuthorized)
        try await world.setPolicy { $0.state = .authorized }
        #expect(try client.authState == .authorized)
        #expect(try client.secureFiles.read("note").withUnsafeBytes { Array($0) } == Array("kept".utf8))
        #expect(try client.pasteboard.paste() == "copied")
        // An older genuine URL cannot repair it either: a record damaged, a replay refused.
        try Data(older).write(to: URL(fileURLWithPath: record))
        #expect(await thrownCode { _ = try client.handlePolicy(try world.policyURL(authorized)) } == .refusedMessage)
        #expect(await thrownCode { _ = try client.authState } == .notAuthorized)
    }

    @Test("An unknown state, an overlong message or control characters in it: refused by the parser (exit 65)")
    func hostilePolicyValues() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let genuine = try world.policyURL(ClientPolicy(state: .authorized, message: "fine", sequence: 9))
        func encoded(_ bytes: [UInt8]) -> String {
            Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let fine = "message=" + encoded(Array("fine".utf8))
        for hostile in [
            genuine.replacingOccurrences(of: "state=authorized", with: "state=suspended"),
            genuine.replacingOccurrences(of: "state=authorized", with: "state=1"),
            genuine.replacingOccurrences(of: fine, with: "message=" + encoded(Array(repeating: 0x41, count: 201))),
            genuine.replacingOccurrences(of: fine, with: "message=" + encoded(Array("a\u{1b}[2Jb".utf8))),
            genuine.replacingOccurrences(of: fine, with: "message=" + encoded(Array("a\u{202e}b".utf8))),
            genuine.replacingOccurrences(of: fine, with: "message=" + encoded([0xff, 0xfe])),
            genuine.replacingOccurrences(of: fine, with: "message=Zm9v%0A"),
            genuine.replacingOccurrences(of: "autolock=900", with: "autolock=0"),
            genuine.replacingOccurrences(of: "autolock=900", with: "autolock=99999999"),
        ] {
            #expect(hostile != genuine)
            #expect(await thrownCode { _ = try world.client.handlePolicy(hostile) } == .invalid, "\(hostile)")
        }
        // The provider refuses such a message before anything is signed.
        await #expect(throws: DCError.self) {
            try await world.setPolicy { $0.message = "line one\nline two" }
        }
        await #expect(throws: DCError.self) {
            try await world.setPolicy { $0.message = String(repeating: "x", count: 201) }
        }
    }

    @Test(
        "Acknowledgements: .unsupported is refused for the authorization state; a forged, replayed or unsent-policy ack is refused; the file I/O answer is unsupported until given"
    )
    func acknowledgements() async throws {
        let world = try World()
        defer { world.dir.remove() }
        await #expect(throws: DCError.self) { try await world.client.authStateApplied(.unsupported) { _ in } }
        var record = try #require(try world.service.policyRecord(clientId: .exampleClient))
        #expect(record.fileIOAcknowledgement == nil)  // shown as unsupported by dcprovision status
        var sent: [String] = []
        try await world.client.authStateApplied(.error, message: "could not hide the inbox") { sent.append($0) }
        let ack = try #require(sent.first)
        let providerScheme = try URLScheme("org.example.provider")
        record = try world.service.handleAcknowledgement(try Acknowledgement.parse(ack, scheme: providerScheme))
        #expect(record.authAcknowledgement?.state == .error)
        #expect(record.authAcknowledgement?.message == "could not hide the inbox")
        // The same acknowledgement again: a replay.
        #expect(
            await thrownCode {
                _ = try world.service.handleAcknowledgement(try Acknowledgement.parse(ack, scheme: providerScheme))
            } == .refusedMessage)
        // Altered: another answer under the same signature.
        let altered = ack.replacingOccurrences(of: "policy=error", with: "policy=applied")
        #expect(
            await thrownCode {
                _ = try world.service.handleAcknowledgement(try Acknowledgement.parse(altered, scheme: providerScheme))
            } == .refusedMessage)
        // An acknowledgement of a policy the provider never sent.
        do {
            let future = try Acknowledgement.parse(ack, scheme: providerScheme)
            let signer = try world.client.signingKey()
            let unsent = try Acknowledgement(
                client: future.client, sequence: future.sequence + 10, subject: future.subject, state: future.state,
                message: future.message, time: future.time + 1
            ).signed(with: signer, scheme: providerScheme)
            #expect(await thrownCode { _ = try world.service.handleAcknowledgement(unsent) } == .refusedMessage)
        }
        #expect(try world.service.policyRecord(clientId: .exampleClient)?.authAcknowledgement?.state == .error)
    }

    @Test(
        "A locked client applies each policy at once (its message shows without an unlock); the newest is acknowledged when it announces availability"
    )
    func newestWins() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try world.client.lock()
        try await world.setPolicy { $0.message = "first" }
        #expect(try world.client.authMessage == "first")
        try await world.setPolicy { $0.message = "second" }
        let newest = try await world.setPolicy { $0.autoLock = 120 }
        // Applied while locked; the acknowledgement needs the signing key, sealed in the store.
        #expect(newest.isPending)
        #expect(try world.client.currentPolicy() == newest.policy)
        #expect(try world.client.authMessage == "second")
        try world.client.unlock(passphrase: world.passphrase)
        _ = try await world.service.deliverQueued(try world.available())
        #expect(try world.service.policyRecord(clientId: .exampleClient)?.isPending == false)
    }

    @Test("Events: ready, state changes (also when only the message changes), availability, deliveries")
    func events() async throws {
        let world = try World(paired: false)
        defer { world.dir.remove() }
        let stream = world.client.events(interval: .milliseconds(20))
        let seen = Box()
        let watcher = Task {
            for await event in stream { seen.append("\(event)") }
        }
        defer { watcher.cancel() }
        func waitFor(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await eventually(sourceLocation: sourceLocation) { seen.all.contains(text) }
        }
        _ = try world.service.pair(clientScheme: .exampleClient)
        _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        // The first events say where things stand.
        try await waitFor("ready")
        try await waitFor("secureFileIOPolicyChanged(required)")
        try await waitFor("authStateChanged(authorized, message: \"\")")
        try await waitFor("secureServicesAvailabilityChanged(available)")
        // Then what changes.
        _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        try await waitFor("credentialDelivered(sequence: 2)")
        try await world.setPolicy { $0.message = "reviewed" }
        try await waitFor("authStateChanged(authorized, message: \"reviewed\")")
        try world.client.lock()
        try await waitFor("secureServicesAvailabilityChanged(unavailable)")
    }

    @Test(
        "Retire crypto-erases: after it, no byte of the store key, the sealed store key, any private key or any sealed file is anywhere under HOME or the runtime directory"
    )
    func retireErases() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let credential = try world.credential()
        _ = try await world.service.send(credential, clientScheme: .exampleClient)
        try world.client.secureFiles.write(Array(repeating: 0x5a, count: 100_000), to: "mail.db")
        try world.client.pasteboard.copy("pasted secret")
        // What must not survive: the plaintext secrets, and every sealed byte the store holds.
        var needles: [(String, [UInt8])] = []
        needles.append(("store key", try world.client.storeKey().withUnsafeBytes { Array($0) }))
        for entry in credential.entries {
            needles.append(("\(entry.tag) key", entry.privateKey.withPKCS8DER { Array($0) }))
        }
        let store = world.locations.dataHome + "/dcclient/apps/dcclient/store"
        for name in ["wrapped-key.json", "client-key", "signing-key", "credential", "pasteboard"] {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: store + "/" + name)))
            needles.append((name, Array(bytes.suffix(64))))
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: store + "/files") {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: store + "/files/" + name)))
            needles.append(("secure file", Array(bytes.suffix(64))))
        }
        // The search finds the sealed bytes before (it finds what it looks for); the plaintext
        // keys are in no file even then.
        let roots = [world.dir.file("home"), world.dir.file("run")]
        let sealed = Set(needles.map(\.0).filter { !$0.hasSuffix("key") || $0 == "client-key" || $0 == "signing-key" })
        #expect(sealed.isSubset(of: Set(search(roots, for: needles))))
        try await world.setPolicy {
            $0.state = .retired
            $0.message = "Employee left"
        }
        #expect(try world.client.authState == .retired)
        #expect(try world.client.authMessage == "Employee left")
        #expect(search(roots, for: needles).isEmpty, "\(search(roots, for: needles))")
        // The acknowledgement went out before the keys were gone, and ended the pairing.
        let record = try #require(try world.service.policyRecord(clientId: .exampleClient))
        #expect(record.authAcknowledgement?.sequence == record.policy.sequence)
        #expect(try world.service.pairing(clientId: .exampleClient) == nil)
        #expect(await thrownCode { try world.client.unlock(passphrase: world.passphrase) } == .notAuthorized)
        // Nothing more is sent; the same client cannot simply be paired again.
        await #expect(throws: DCError.self) {
            _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        }
    }

    @Test(
        "Pairing pins the client's auth-token key from its registration; its private half is sealed in the store and usable only while unlocked"
    )
    func tokenKeyPinned() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let registration = try #require(
            try Registrations.read(
                ClientRegistration.self, at: world.locations.clientRegistration(.exampleClient)))
        let published = try #require(try registration.tokenPublicKey())
        let pairing = try #require(try world.service.pairing(clientId: .exampleClient))
        #expect(pairing.tokenKey == Data(published.uncompressedPoint).base64EncodedString())
        let key = try world.client.tokenKey()
        #expect(key.publicKey == published)
        // Sealed: the store file does not hold the private key's PKCS#8.
        let sealed = try #require(
            FileManager.default.contents(atPath: world.locations.dataHome + "/dcclient/apps/dcclient/store/token-key"))
        let pkcs8 = key.privateKey.withPKCS8DER { Array($0) }
        #expect(Array(sealed).firstRange(of: pkcs8.suffix(32)) == nil)
        try world.client.lock()
        #expect(throws: DCError.self) { try world.client.tokenKey() }
        // A registration whose token key is not a P-256 point is not paired.
        var broken = registration
        broken.tokenKey = Data([4] + [UInt8](repeating: 7, count: 64)).base64EncodedString()
        #expect(throws: DCError.self) { try broken.tokenPublicKey() }
    }

    @Test(
        "Retiring a client revokes its auth tokens at once: the provider's revocation list retires its container, under the issuing key a verifier trusts"
    )
    func retireRevokesTokens() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let service = world.service
        let issuing = try service.issuingKey()
        // The trust files exist before any token does, so a verification service can start.
        #expect(try TrustedIssuers.load(from: service.issuersPath) == TrustedIssuers([issuing.publicKey]))
        #expect(try RevocationList.load(from: service.revocationsPath).retiredContainers.isEmpty)
        #expect(try service.issuingKey().publicKey == issuing.publicKey)  // made once
        // A token for this client's container, issued with the provider's key.
        let tokenKey = try TokenSigningKey.generate()
        let delegation = try Delegation.issue(
            issuer: "org.example.provider", userID: "alice", appID: "org.example.dcclient", containerID: "dcclient",
            tokenKey: tokenKey.publicKey, issuingKey: issuing, now: Date())
        let token = try AuthToken.make(
            challenge: "c", serverName: "s", delegation: delegation, tokenKey: tokenKey, now: Date())
        func verdict() throws -> String {
            let verifier = AuthTokenVerifier(
                issuers: try TrustedIssuers.load(from: service.issuersPath),
                revocations: try RevocationList.load(from: service.revocationsPath))
            return verifier.verify(token.compact, now: Date()).responseCode
        }
        #expect(try verdict() == "100 OK")
        try await world.setPolicy { $0.state = .unauthorized }
        try await world.setPolicy { $0.state = .authorized }
        #expect(try verdict() == "100 OK")  // only retire is for good
        try await world.setPolicy { $0.state = .retired }
        #expect(try verdict() == "103 Revoked")
        // The key never reaches a verifier: only its public half is in the files it reads.
        let published = try String(contentsOfFile: service.issuersPath, encoding: .utf8)
        #expect(!published.contains("\"d\""))
    }

    @Test(
        "A shorter auto-lock in a new policy applies to the key already unlocked; a longer one waits for the next unlock"
    )
    func shorterAutoLockApplies() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let before = try #require(world.client.autoLockDate)
        #expect(before > Date() + 800)
        try await world.setPolicy { $0.autoLock = 60 }
        let after = try #require(world.client.autoLockDate)
        #expect(after <= Date() + 60.5)
        try await world.setPolicy { $0.autoLock = 3600 }
        #expect(world.client.autoLockDate == after)
        // A second's auto-lock ends the key a second later (the kernel ends it: nothing polls).
        try await world.setPolicy { $0.autoLock = 1 }
        try await eventually { !world.client.isUnlocked }
        #expect(await thrownCode { try world.client.requireSecureServices() } == .serviceUnavailable)
    }

    @Test("The provider records no `unsupported` answer to the authorization state")
    func noUnsupportedAuthAcknowledgement() async throws {
        let world = try World(handlesPolicies: false)
        defer { world.dir.remove() }
        let sent = try #require(try world.service.policyRecord(clientId: .exampleClient)).policy
        let unsupported = try world.client.acknowledgementURL(.authState, .unsupported, "", policy: sent, now: Date())
        #expect(
            await thrownCode {
                _ = try world.service.handleAcknowledgement(
                    try Acknowledgement.parse(unsupported, scheme: world.service.callbackScheme))
            } == .refusedMessage)
        #expect(try world.service.policyRecord(clientId: .exampleClient)?.authAcknowledgement == nil)
    }

    @Test("A handler that acknowledged a retire and died before erasing: the next use of the client erases it")
    func retireFinishedLater() async throws {
        let world = try World(handlesPolicies: false)
        defer { world.dir.remove() }
        try world.client.secureFiles.write(Array(repeating: 0x5a, count: 1000), to: "mail.db")
        _ = try await world.setPolicy { $0.state = .retired }
        let update = try world.client.handlePolicy(try #require(world.policies.all.last))
        // The acknowledgement goes out, and the handler dies (killed, or crashed writing its output).
        _ = try world.service.handleAcknowledgement(
            try Acknowledgement.parse(
                try world.client.acknowledgementURL(.authState, .applied, "", policy: update.policy, now: Date()),
                scheme: world.service.callbackScheme))
        #expect(try world.service.pairing(clientId: .exampleClient) == nil)
        let store = world.locations.dataHome + "/dcclient/apps/dcclient/store"
        #expect(FileManager.default.fileExists(atPath: store + "/wrapped-key.json"))
        #expect(await thrownCode { _ = try world.client.secureFiles.read("mail.db") } == .notAuthorized)
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: store)) == [
                ".lock", "client.json", "policy.json", "policy.sequence", "provider.json",
            ])
        #expect(!world.client.isUnlocked)
    }

    @Test(
        "Retired while locked: everything is erased at once, without waiting for an unlock; the provider shows the retire unacknowledged and sends nothing"
    )
    func retiredWhileLocked() async throws {
        let world = try World(handlesPolicies: false)
        defer { world.dir.remove() }
        try world.client.secureFiles.write(Array(repeating: 0x5a, count: 1000), to: "mail.db")
        // The provider sends the retire while the client is unlocked; it reaches the client after
        // the client locked (auto-lock, say).
        let record = try await world.setPolicy { $0.state = .retired }
        let url = try #require(world.policies.all.last)
        try world.client.lock()
        #expect(try world.client.handlePolicy(url).policy.state == .retired)
        // The acknowledgement cannot be signed while locked; the erasure does not wait for it.
        #expect(await thrownCode { try await world.client.authStateApplied(.applied) { _ in } } == .serviceUnavailable)
        let store = world.locations.dataHome + "/dcclient/apps/dcclient/store"
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: store)) == [
                ".lock", "client.json", "policy.json", "policy.sequence", "provider.json",
            ])
        #expect(await thrownCode { try world.client.unlock(passphrase: world.passphrase) } == .notAuthorized)
        // The provider did not hear back: the retire stays unacknowledged, and nothing is sent.
        let after = try #require(try world.service.policyRecord(clientId: .exampleClient))
        #expect(after.policy == record.policy && after.authAcknowledgement?.sequence != record.policy.sequence)
        // (The client's registration is gone with the rest, so a send fails before it asks.)
        await #expect(throws: DCError.self) {
            _ = try await world.service.send(try world.credential(), clientScheme: .exampleClient)
        }
        #expect(world.deliveries.all.isEmpty)
    }

    @Test(
        "Auto-lock: the unlocked key's lifetime is the policy's, bounded where the key is kept (the kernel or the file's deadline) with no process running; the event says so"
    )
    func autoLock() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await world.setPolicy { $0.autoLock = 2 }
        try world.client.lock()
        try world.client.unlock(passphrase: world.passphrase)
        let deadline = try #require(world.client.autoLockDate)
        #expect(deadline.timeIntervalSinceNow <= 2.5)
        #expect(world.client.secureServicesAvailability == .available)
        let key = try world.client.unlockedKey
        let inKernel = try run("keyctl", ["search", "@s", "user", key.keyDescription]).status == 0
        #expect(inKernel || FileManager.default.fileExists(atPath: key.runtimeFile))
        // Nothing of ours runs while the lifetime ends.
        try await Task.sleep(for: .seconds(3.5))
        if inKernel {
            // The kernel's word, not ours: the key is gone.
            #expect(try run("keyctl", ["search", "@s", "user", key.keyDescription]).status != 0)
        }
        #expect(!world.client.isUnlocked)
        #expect(world.client.secureServicesAvailability == .unavailable)
        #expect(await thrownCode { _ = try world.client.secureFiles.list() } == .serviceUnavailable)
        // A provider reading the client's status sees it locked, and queues.
        #expect(try !world.service.canSendCredential(clientScheme: .exampleClient))
    }
}
