import AuthTokens
import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import IdentityTokens
import ManagedClient
import TestSupport
import Testing

/// The numbers docs/PROTOCOL.md and docs/SECURITY.md promise about the provider and the client,
/// each written out here as the documents write it, never computed from the constant that holds
/// it: a constant changed without the documents fails these tests.
@Suite(
    "Documented limits: the request window, card requests, auto-lock, delegations", .ownThreads, .timeLimit(.minutes(3))
)
struct DocumentedLimitsTests {
    /// Now, in whole seconds (messages carry whole seconds).
    static func wholeSecond() -> Date { Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)) }

    @Test("A client's new and available are acted on within 600 s of their time either way: 600 s is, 601 s is not")
    func requestWindow() throws {
        let world = try World()
        defer { world.dir.remove() }
        let time = Self.wholeSecond()
        let messages: [any ClientSignedMessage] = [try world.new(now: time), try world.available(now: time)]
        for message in messages {
            let path = type(of: message).path
            for seconds in [-600, -599, 0, 599, 600] {
                #expect(throws: Never.self, "\(path) at \(seconds) s") {
                    _ = try world.service.authenticate(message, now: time.addingTimeInterval(TimeInterval(seconds)))
                }
            }
            for seconds in [-601, 601, 86_400] {
                let refused = try #require(throws: DCError.self, "\(path) at \(seconds) s") {
                    _ = try world.service.authenticate(message, now: time.addingTimeInterval(TimeInterval(seconds)))
                }
                #expect(refused.code == .refusedMessage)
                #expect(refused.message.contains("older than 600 s"))
            }
        }
    }

    @Test("A policy is applied within 600 s of its time at the client: 600 s late it is, 601 s late it is not")
    func policyWindow() throws {
        let world = try World(handlesPolicies: false)
        defer { world.dir.remove() }
        let record = try #require(try world.service.policyRecord(clientId: .exampleClient))
        let time = Self.wholeSecond()
        var next = record.policy
        next.sequence += 1
        let late = try #require(throws: DCError.self) {
            _ = try world.client.handlePolicy(try world.policyURL(next, time: time), now: time.addingTimeInterval(601))
        }
        #expect(late.code == .refusedMessage)
        #expect(
            try world.client.handlePolicy(try world.policyURL(next, time: time), now: time.addingTimeInterval(600))
                .policy == next)
    }

    @Test(
        "Pairing allows 4 card requests an hour by default: the 5th within 3599 s is refused, one 3600 s after the first is answered"
    )
    func cardRequestsAnHour() async throws {
        let world = try World()
        defer { world.dir.remove() }
        _ = try world.service.pair(clientScheme: .exampleClient, allowCardRequests: true)
        #expect(try world.service.pairing(clientId: .exampleClient)?.cardRequestsPerHour == 4)
        let start = Self.wholeSecond()
        func answer(at seconds: TimeInterval) async -> DCError.Code? {
            let now = start.addingTimeInterval(seconds)
            return await thrownCode {
                _ = try await world.service.answer(try world.new(now: now), fromCard: true, now: now) { _ in
                    try world.credential()
                }
            }
        }
        for _ in 1...4 { #expect(await answer(at: 0) == nil) }
        #expect(await answer(at: 3599) == .serviceUnavailable)
        #expect(await answer(at: 3600) == nil)
    }

    @Test("Auto-lock: 900 s from pairing; a policy may set 1 s to 604800 s (a week), not 0 or 604801")
    func autoLockBounds() async throws {
        let world = try World()
        defer { world.dir.remove() }
        #expect(try world.service.policyRecord(clientId: .exampleClient)?.policy.autoLock == 900)
        for seconds in [1, 604_800] {
            #expect(try await world.setPolicy { $0.autoLock = seconds }.policy.autoLock == seconds)
        }
        for seconds in [0, 604_801] {
            #expect(await thrownCode { try await world.setPolicy { $0.autoLock = seconds } } == .usage, "\(seconds) s")
        }
        #expect(try world.service.policyRecord(clientId: .exampleClient)?.policy.autoLock == 604_800)
    }

    @Test("The provider's delegation is valid a day (86400 s) and is sent again while more than half (43200 s) is left")
    func delegationLifetime() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let registration = try #require(
            try Registrations.read(
                ClientRegistration.self, at: world.locations.clientRegistration(.exampleClient)))
        let now = Self.wholeSecond()
        let first = try #require(try await world.service.sendDelegation(to: registration, now: now - 43_202))
        #expect(first.claims.expires - first.claims.notBefore == 86_400)
        #expect(first.claims.notBefore == Int64(now.timeIntervalSince1970) - 43_202)
        // 43201 s left: the same one again.
        let again = try #require(try await world.service.sendDelegation(to: registration, now: now - 3))
        #expect(again.claims.id == first.claims.id)
        // 43200 s left, half its life: a new one.
        let renewed = try #require(try await world.service.sendDelegation(to: registration, now: now - 2))
        #expect(renewed.claims.id != first.claims.id)
        #expect(renewed.claims.expires == Int64(now.timeIntervalSince1970) - 2 + 86_400)
    }

    @Test("An identity JWT is valid an hour (3600 s); its audience and scope are 1 to 200 bytes")
    func identityTokens() async throws {
        let key = try TokenSigningKey.generate()
        func sign(audience: String = "mail-web", scope: String = "openid") async throws -> IdentityToken {
            try IdentityToken.sign(
                issuer: "org.example.provider", userID: "alice@example.com", audience: audience, scope: scope,
                key: key, now: Date(timeIntervalSince1970: 1_795_000_000))
        }
        let token = try await sign()
        #expect(token.claims.issuedAt == Date(timeIntervalSince1970: 1_795_000_000))
        #expect(token.claims.expires == Date(timeIntervalSince1970: 1_795_003_600))
        let longest = String(repeating: "a", count: 200)
        #expect(try await sign(audience: longest, scope: longest).claims.scope == longest)
        for (audience, scope) in [
            (longest + "a", "openid"), ("mail-web", longest + "a"), ("", "openid"), ("mail-web", ""),
        ] {
            let refused = await thrownCode { _ = try await sign(audience: audience, scope: scope) }
            #expect(refused == .usage, "\(audience.count) and \(scope.count) bytes")
        }
    }

    @Test(
        "The client keeps the record of a handled request 7 days (604 800 s), at most the newest 1000, and never one younger than 600 s"
    )
    func handledRecords() throws {
        let world = try World()
        defer { world.dir.remove() }
        let processed = world.locations.dataHome + "/dcclient/apps/dcclient/store/processed"
        try FileManager.default.createDirectory(atPath: processed, withIntermediateDirectories: true)
        let now = Date()
        func record(_ name: String, age: TimeInterval) throws {
            let path = processed + "/" + name
            #expect(FileManager.default.createFile(atPath: path, contents: Data("ok".utf8)))
            try FileManager.default.setAttributes([.modificationDate: now - age], ofItemAtPath: path)
        }
        func kept() -> Set<String> { Set((try? FileManager.default.contentsOfDirectory(atPath: processed)) ?? []) }
        func clear() { for name in kept() { unlink(processed + "/" + name) } }

        // Seven days: a record 604 799 s old stays, one 604 801 s old goes.
        try record("week-minus", age: 604_799)
        try record("week-plus", age: 604_801)
        world.client.prune(now: now)
        #expect(kept() == ["week-minus"])
        clear()

        // The newest 1000: of 1001 records (all past the 600 s window), the oldest goes.
        for index in 0..<1001 { try record(String(format: "r%04d", index), age: 700 + TimeInterval(index)) }
        world.client.prune(now: now)
        #expect(kept().count == 1000)
        #expect(!kept().contains("r1000"))
        clear()

        // Never one younger than 600 s, however many: 1002 records inside the window all stay.
        for index in 0..<1002 { try record(String(format: "y%04d", index), age: 0.5 * TimeInterval(index)) }
        world.client.prune(now: now)
        #expect(kept().count == 1002)
    }
}
