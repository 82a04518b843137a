import AuthTokens
import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import IdentityTokens
import ManagedClient
import ProviderService
import SystemSupport
import TestSupport
import Testing

/// Auth tokens on the client side, in-process (``World``): the provider's delegation reaches the
/// client with each availability notice, the client makes tokens under it, and the verifier the
/// verification service runs (``AuthTokenVerifier``) judges them from the provider's files. The
/// same path through real processes and a running dcverify is in VerificationServiceTests.
@Suite("Auth tokens: the client's delegation and tokens", .ownThreads, .timeLimit(.minutes(3)))
struct AuthTokenClientTests {
    /// The code of the DCError `body` throws; nil when it throws none.
    func failure(_ body: () async throws -> some Any) async -> DCError.Code? {
        do {
            _ = try await body()
            return nil
        } catch {
            return (error as? DCError)?.code
        }
    }

    func failureNow(_ body: () throws -> some Any) -> DCError.Code? {
        do {
            _ = try body()
            return nil
        } catch {
            return (error as? DCError)?.code
        }
    }
    /// What a verification service pointed at the provider's files answers for `token` now.
    func verdict(_ token: AuthToken, _ world: World, now: Date = Date()) throws -> TokenVerdict {
        let verifier = AuthTokenVerifier(
            issuers: try TrustedIssuers.load(from: world.service.issuersPath),
            revocations: try RevocationList.load(from: world.service.revocationsPath))
        return verifier.verify(token.compact, now: now)
    }

    /// The client announces availability and the provider answers it (policy, delegation).
    func announce(_ world: World) async throws {
        _ = try await world.service.deliverQueued(try world.available())
    }

    @Test("Each availability notice brings a fresh delegation; the token it makes verifies with the identity it names")
    func tokenVerifies() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await announce(world)
        #expect(world.delegations.all.count == 1)
        let token = try await world.client.authToken(challenge: "one-use 42", serverName: "app.example.com")
        let identity = try #require(try verdict(token, world).identity)
        #expect(identity.challenge == "one-use 42")
        #expect(identity.serverName == "app.example.com")
        #expect(identity.userID == ClientPairing.defaultUserID)
        #expect(identity.appID == "org.example.dcclient")
        #expect(identity.containerID == "dcclient")
        #expect(identity.version == 1)
        #expect(abs(Double(identity.creationTime) - Date().timeIntervalSince1970) < 60)
        // An empty challenge is allowed, and verifying does not consume a token.
        let empty = try await world.client.authToken(challenge: "")
        #expect(try verdict(empty, world).identity?.challenge == "")
        #expect(try verdict(empty, world).identity?.challenge == "")
        try await announce(world)
        #expect(world.delegations.all.count == 2)
    }

    @Test("Unauthorizing revokes every delegation the client holds (103 at once); authorizing again brings a new one")
    func unauthorizeRevokes() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await announce(world)
        try await announce(world)
        let token = try await world.client.authToken(challenge: "c")
        #expect(try verdict(token, world).responseCode == "100 OK")
        try await world.setPolicy { $0.state = .unauthorized }
        #expect(try verdict(token, world).responseCode == "103 Revoked")
        // The second notice re-sent the same delegation (more than half its life was left): one id.
        #expect(Set(world.delegations.all.map { $0.split(separator: "&")[2] }).count == 1)
        #expect(try RevocationList.load(from: world.service.revocationsPath).revokedDelegations.count == 1)
        #expect(await failure { try await world.client.authToken(challenge: "c") } == .notAuthorized)
        // Applying `unauthorized` locked the store: the new policy and a new delegation come when
        // the client unlocks and announces availability.
        try await world.setPolicy { $0.state = .authorized }
        try world.client.unlock(passphrase: world.passphrase)
        try await announce(world)
        let again = try await world.client.authToken(challenge: "c")
        #expect(try verdict(again, world).responseCode == "100 OK")
        #expect(try verdict(token, world).responseCode == "103 Revoked")
    }

    @Test("Refused: a locked client (serviceUnavailable), a challenge or server name outside printable ASCII")
    func refusals() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await announce(world)
        for bad in ["café", "line\nbreak", "tab\there", " leading", "trailing ", String(repeating: "a", count: 1025)] {
            #expect(await failure { try await world.client.authToken(challenge: bad) } == .invalidChallenge)
        }
        #expect(
            await failure {
                try await world.client.authToken(challenge: "c", serverName: "bad\u{7F}")
            } == .invalidChallenge)
        try world.client.lock()
        let error = await #expect(throws: DCError.self) { try await world.client.authToken(challenge: "c") }
        #expect(error?.code == .serviceUnavailable)
        #expect(error?.message.contains("locked") == true)
    }

    @Test("No delegation yet: the client asks its provider (an availability notice) and then makes the token")
    func renewsThroughProvider() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let sent = Box()
        let service = world.service
        // Asked a few seconds before the provider signs: the token is made no earlier than the
        // delegation it names (a renewal that crosses a second once failed here).
        let token = try await world.client.authToken(challenge: "c", now: Date(timeIntervalSinceNow: -3)) { url in
            sent.append(url)
            _ = try await service.deliverQueued(try AvailabilityNotice.parse(url, scheme: service.callbackScheme))
        }
        #expect(sent.all.count == 1 && sent.all[0].contains(":/available?"))
        #expect(try verdict(token, world).responseCode == "100 OK")
        // A provider that cannot be reached: a clear error, no token.
        let fresh = try World()
        defer { fresh.dir.remove() }
        let error = await #expect(throws: DCError.self) {
            try await fresh.client.authToken(challenge: "c") { _ in throw DCError(.notReady, "unreachable") }
        }
        #expect(error?.code == .delegationNotValid)
        #expect(error?.message.contains("unreachable") == true)
    }

    /// A delegation URL for `delegation`, its spool file written, signed with `key` (the provider's
    /// by default): what the provider's ``CredentialService/sendDelegation(to:now:progress:)`` sends.
    func delegationURL(_ delegation: Delegation, _ world: World, key: MessageSigningKey? = nil) throws -> String {
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool")
        let id = try RequestID(delegation.claims.id)
        let digest = try spool.write(Array(delegation.compact.utf8), request: id, kind: .delegation)
        let clientScheme = try URLScheme("org.example.dcclient")
        return try DelegationNotice(
            client: try ClientID("dcclient"), id: id, digest: try SHA256Hex(digest),
            time: Int64(Date().timeIntervalSince1970)
        ).signed(with: key ?? world.service.signingKey(), scheme: clientScheme).url(scheme: clientScheme)
    }

    func issue(
        _ world: World, tokenKey: TokenPublicKey? = nil, appID: String = "org.example.dcclient", at: Date = Date()
    )
        throws -> Delegation
    {
        let registration = try #require(
            try Registrations.read(
                ClientRegistration.self, at: world.locations.clientRegistration(.exampleClient)))
        return try Delegation.issue(
            issuer: "org.example.provider", userID: "mallory", appID: appID, containerID: "dcclient",
            tokenKey: try tokenKey ?? #require(try registration.tokenPublicKey()),
            issuingKey: try world.service.issuingKey(), now: at)
    }

    @Test(
        "Attacks on the delegation URL change nothing: another signer, an altered spool file, another token key or client, a replay, an older delegation"
    )
    func forgedDelegations() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await announce(world)
        let kept = try await world.client.authToken(challenge: "c").delegation
        func keptNow() async throws -> Delegation { try await world.client.authToken(challenge: "c").delegation }

        // Signed by a key that is not the pinned provider's.
        let forged = try delegationURL(try issue(world), world, key: try MessageSigningKey.generate())
        #expect(failureNow { try world.client.handleDelegation(forged) } == .refusedMessage)
        // The right URL, the spool file swapped for another delegation after it was signed.
        let swapped = try issue(world)
        let url = try delegationURL(swapped, world)
        let other = try issue(world)
        unlink(
            Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool").path(
                request: try RequestID(swapped.claims.id), kind: .delegation))
        _ = try Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool").write(
            Array(other.compact.utf8), request: try RequestID(swapped.claims.id), kind: .delegation)
        #expect(failureNow { try world.client.handleDelegation(url) } == .refusedMessage)
        // Certifying another key than the client's own token key.
        let stranger = try issue(world, tokenKey: try TokenSigningKey.generate().publicKey)
        #expect(
            failureNow {
                try world.client.handleDelegation(try delegationURL(stranger, world))
            } == .delegationNotValid)
        // For another app.
        let elsewhere = try issue(world, appID: "org.example.other")
        #expect(
            failureNow {
                try world.client.handleDelegation(try delegationURL(elsewhere, world))
            } == .refusedMessage)
        #expect(try await keptNow() == kept)
        // A genuine one is kept; replaying its URL finds no spool file; an older one does not replace it.
        let older = try issue(world, at: Date(timeIntervalSinceNow: -120))
        let newer = try issue(world)
        let newerURL = try delegationURL(newer, world)
        #expect(try world.client.handleDelegation(newerURL) == newer)
        #expect(failureNow { try world.client.handleDelegation(newerURL) } == .notReady)
        #expect(try world.client.handleDelegation(try delegationURL(older, world)) == newer)
        #expect(try await keptNow() == newer)
        // A delegation kept while the clock was ahead (valid then, not now) does not block a valid one.
        let ahead = Date(timeIntervalSinceNow: 7200)
        #expect(
            try world.client.handleDelegation(try delegationURL(try issue(world, at: ahead), world), now: ahead).claims
                .notBefore > Int64(Date().timeIntervalSince1970))
        let current = try issue(world)
        #expect(try world.client.handleDelegation(try delegationURL(current, world)) == current)
    }

    @Test(
        "The shared user id: the same for the same user, secret and device; different for another user, OS user or device; empty without a delegation"
    )
    func sharedUserID() async throws {
        let first = try World()
        defer { first.dir.remove() }
        let second = try World()
        defer { second.dir.remove() }
        #expect(first.client.sharedUserID() == "")
        try await announce(first)
        try await announce(second)
        let machine = try first.dir.write("machine-id", "0123456789abcdef0123456789abcdef\n")
        let value = first.client.sharedUserID(machineIDFile: machine)
        #expect(value.count == 43)
        #expect(!value.contains(ClientPairing.defaultUserID))
        #expect(first.client.sharedUserID(machineIDFile: machine) == value)
        // Another app of the same OS user: the same secret (copied here, as both apps would find
        // it in the same home) and the same user from the provider → the same id.
        #expect(second.client.sharedUserID(machineIDFile: machine) != value)  // another OS user's secret
        try FileManager.default.removeItem(atPath: second.client.sharedUserIDSecretFile)
        try FileManager.default.copyItem(
            atPath: first.client.sharedUserIDSecretFile, toPath: second.client.sharedUserIDSecretFile)
        #expect(second.client.sharedUserID(machineIDFile: machine) == value)
        // Another device.
        let device = try first.dir.write("other-machine-id", "fedcba9876543210fedcba9876543210\n")
        #expect(first.client.sharedUserID(machineIDFile: device) != value)
        // Another user: a delegation naming someone else.
        _ = try second.client.handleDelegation(try delegationURL(try issue(second), second))
        #expect(second.client.sharedUserID(machineIDFile: machine) != value)
        #expect(first.client.sharedUserID(machineIDFile: first.dir.file("no-such-file")) == "")
        var info = stat()
        #expect(stat(first.client.sharedUserIDSecretFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }

    @Test(
        "Identity JWTs: only the paired, authorized client's fresh signed request is answered (a replay, another signer, an unauthorized client get nothing); cached sealed until refresh"
    )
    func identityTokens() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let service = world.service
        let requests = Box()
        let send: @Sendable (String) async throws -> Void = { url in
            requests.append(url)
            try await service.issueIdentityToken(try IdentityRequest.parse(url, scheme: service.callbackScheme))
        }
        let token = try await world.client.identityToken(clientID: "mail-web", scope: "openid", send: send)
        #expect(token.claims.subject == ClientPairing.defaultUserID)
        #expect(token.claims.audience == "mail-web")
        #expect(token.keyID == (try service.identityKey()).publicKey.thumbprint)
        #expect(
            try TrustedIssuers.load(from: service.jwksPath).key(for: token.keyID) != nil,
            "the JWKS a verification service serves holds the key")
        #expect("\(token)" == "IdentityToken(<redacted>)")
        // Cached (no second request), sealed: the cache file does not hold the token in the clear.
        #expect(try await world.client.identityToken(clientID: "mail-web", scope: "openid", send: send) == token)
        #expect(requests.all.count == 1)
        let cache = world.locations.dataHome + "/dcclient/apps/dcclient/store/identity-tokens"
        for name in try FileManager.default.contentsOfDirectory(atPath: cache) {
            let bytes = try #require(FileManager.default.contents(atPath: cache + "/" + name))
            #expect(!String(decoding: bytes, as: UTF8.self).contains(token.compact.prefix(20)))
        }
        let refreshed = try await world.client.identityToken(
            clientID: "mail-web", scope: "openid", refresh: true, send: send)
        #expect(requests.all.count == 2 && refreshed != token)

        // The provider's side of the attacks.
        let replayed = try IdentityRequest.parse(requests.all[0], scheme: service.callbackScheme)
        #expect(await failure { try await service.issueIdentityToken(replayed) } == .refusedMessage)
        let forged = try IdentityRequest(
            client: replayed.client, request: try RequestID(String(repeating: "ab", count: 16)),
            audience: replayed.audience, scope: replayed.scope, time: replayed.time + 100
        ).signed(with: try MessageSigningKey.generate(), scheme: service.callbackScheme)
        #expect(await failure { try await service.issueIdentityToken(forged) } == .refusedMessage)
        // A client that has not heard yet that it was unauthorized asks anyway: the provider refuses.
        let unheard = try World(handlesPolicies: false)
        defer { unheard.dir.remove() }
        try await unheard.setPolicy { $0.state = .unauthorized }
        let unheardService = unheard.service
        #expect(
            await failure {
                try await unheard.client.identityToken(clientID: "mail-web", scope: "openid") { url in
                    try await unheardService.issueIdentityToken(
                        try IdentityRequest.parse(url, scheme: unheardService.callbackScheme))
                }
            } == .notAuthorized)
        // A client that knows refuses by itself.
        try await world.setPolicy { $0.state = .unauthorized }
        #expect(
            await failure { try await world.client.identityToken(clientID: "x", scope: "y", send: send) }
                == .notAuthorized)
        #expect(
            await failure { try await world.client.identityToken(clientID: "mail-web", scope: "openid", send: send) }
                == .notAuthorized)
        for (clientID, scope) in [("", "openid"), ("mail", ""), ("caf\u{E9}", "openid"), ("mail", " padded")] {
            #expect(
                await failure { try await world.client.identityToken(clientID: clientID, scope: scope, send: send) }
                    == .usage)
        }
    }

    @Test(
        "Revocation loses nothing: a revocation list that cannot be written fails the unauthorize, and the next one still revokes every delegation; revoked ids leave the list once expired"
    )
    func revocationIsKept() async throws {
        let world = try World()
        defer { world.dir.remove() }
        try await announce(world)
        let token = try await world.client.authToken(challenge: "c")
        let list = world.service.revocationsPath
        let good = try #require(FileManager.default.contents(atPath: list))
        try Data("broken".utf8).write(to: URL(fileURLWithPath: list))
        #expect(await failure { try await world.setPolicy { $0.state = .unauthorized } } != nil)
        try good.write(to: URL(fileURLWithPath: list))
        try await world.setPolicy { $0.message = "again" }
        #expect(try verdict(token, world).responseCode == "103 Revoked")
        // A day later (the provider's record of expiries moved back, since a test cannot wait a
        // day): the next change of the list drops the expired id; a verifier refuses the
        // delegation as expired anyway.
        let expiries = world.locations.stateHome + "/dcprovision/revoked-delegation-expiries.json"
        var recorded = try JSONDecoder().decode(
            [String: Int64].self, from: try #require(FileManager.default.contents(atPath: expiries)))
        #expect(recorded.keys.contains(token.delegation.claims.id))
        recorded = recorded.mapValues { $0 - 86_400 - 3600 }
        try JSONEncoder().encode(recorded).write(to: URL(fileURLWithPath: expiries))
        try await world.setPolicy { $0.state = .retired }
        #expect(try RevocationList.load(from: list).revokedDelegations.isEmpty)
        #expect(try RevocationList.load(from: list).retiredContainers.count == 1)
    }

    @Test("An identity JWT nobody read does not stay in the spool: removed when the client locks")
    func identityAnswersRemovedOnLock() throws {
        let world = try World()
        defer { world.dir.remove() }
        let spool = Spool(directory: world.locations.dataHome + "/dcclient/apps/dcclient/spool")
        let request = try RequestID(String(repeating: "cd", count: 16))
        _ = try spool.write(Array("eyJ.left.behind".utf8), request: request, kind: .identityToken)
        try world.client.lock()
        #expect(!FileManager.default.fileExists(atPath: spool.path(request: request, kind: .identityToken)))
    }
}
