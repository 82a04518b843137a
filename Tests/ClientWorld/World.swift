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

/// Boxes the last delivery URL an opener saw.
public final class Box: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var values: [String] = []
    /// An empty box.
    public init() {}
    /// Keeps `value`, after those kept before.
    public func append(_ value: String) { lock.withLock { values.append(value) } }
    /// Every value kept, in order.
    public var all: [String] { lock.withLock { values } }
}

/// A sandboxed provider and client, for ManagedClientTests and ClientPKCS11Tests. The opener plays
/// the scheme-handler hop in-process: it hands the delivery URL to the client and the client's
/// result back to the service (the real process launches are tested by the demo test and
/// SchemeHandlersTests).
public struct World: Sendable {
    /// The sandbox: the client's home and runtime directories, and the test CA in `ca`.
    public let dir: TemporaryDirectory
    /// The client's (and the provider's) XDG directories, under ``dir``.
    public let locations: XDGDirectories
    /// The managed client, set up and unlocked.
    public let client: ManagedClient
    /// The provider's service, registered.
    public let service: CredentialService
    /// The test CA that issues the credentials.
    public let ca: TestCA
    /// The client store's passphrase.
    public let passphrase = SecretBytes(Array("client passphrase".utf8))
    /// The delivery URLs the provider opened.
    public let deliveries = Box()
    /// The policy URLs the provider opened.
    public let policies = Box()
    /// The delegation URLs the provider opened.
    public let delegations = Box()

    /// A client and a provider set up as `dcclient init`, `dcprovision register` and (when
    /// `paired`) `dcprovision pair` leave them: each has pinned the other's signing key.
    /// `checkHandler` stands for the scheme-handler resolution a real sender runs before sealing.
    /// With `handlesPolicies` false, policy URLs are only kept in ``policies``: the test hands
    /// them to the client itself.
    public init(
        deliver: Bool = true, paired: Bool = true, handlesPolicies: Bool = true,
        checkHandler: @escaping CredentialService.HandlerCheck = { _ in }
    ) throws {
        dir = try TemporaryDirectory("world")
        let runtime = dir.file("run")
        try #require(mkdir(runtime, 0o700) == 0)
        locations = XDGDirectories(environment: ["HOME": dir.file("home"), "XDG_RUNTIME_DIR": runtime])
        client = ManagedClient(locations: locations, app: try ClientID("dcclient"))
        try client.initialize(
            scheme: try URLScheme("org.example.dcclient"),
            providerScheme: try URLScheme("org.example.provider"), executable: "/usr/bin/dcclient",
            passphrase: passphrase)
        let client = client
        let deliveries = deliveries
        let policies = policies
        let delegations = delegations
        var serviceBox: CredentialService?
        let holder = ServiceHolder()
        service = try CredentialService(
            brand: "Example", callbackScheme: try URLScheme("org.example.provider"), locations: locations,
            checkHandler: checkHandler
        ) { url, _ in
            // A policy goes to the client, which applies it and acknowledges it as the reference
            // app does; only deliveries are kept in `deliveries`.
            if url.contains(":/policy?") {
                policies.append(url)
                guard handlesPolicies else { return }
                let update = try client.handlePolicy(url)
                let send: (String) async throws -> Void = {
                    _ = try holder.service!.handleAcknowledgement(
                        try Acknowledgement.parse($0, scheme: try URLScheme("org.example.provider")))
                }
                do {
                    if update.policy.state != .retired, update.becameReady || update.repeated {
                        try await client.secureFileIOPolicyApplied(.applied, send: send)
                    }
                    try await client.authStateApplied(.applied, send: send)
                } catch DCError.Code.serviceUnavailable {
                    // Locked, as the reference app: applied, acknowledged after the next unlock.
                }
                return
            }
            // An auth-token delegation is kept by the client (AuthTokenClientTests).
            if url.contains(":/delegation?") {
                delegations.append(url)
                try client.handleDelegation(url)
                return
            }
            deliveries.append(url)
            if deliver {
                let handled = try client.handleDelivery(url)
                if let result = handled.resultURL {
                    _ = try holder.service!.handleResult(
                        try DeliveryResult.parse(result, scheme: try URLScheme("org.example.provider")))
                }
            }
        }
        serviceBox = service
        holder.service = serviceBox
        ca = try TestCA.initialize(at: dir.file("ca"))
        try Registrations.publish(
            try service.registration(executable: "/usr/bin/dcprovision"),
            at: locations.providerRegistration(.exampleProvider))
        try client.pinnedProvider(pinning: true)
        if paired {
            _ = try service.pair(clientScheme: .exampleClient)
            // The provider's first policy (authorized), as the next message to the client carries
            // it: the client is ready. Not acknowledged yet, so the provider sends it again first.
            _ = try client.handlePolicy(
                try policyURL(try #require(try service.policyRecord(clientId: .exampleClient)).policy))
        }
    }

    /// `policy` as the provider signs it for the client, at `time`.
    public func policyURL(_ policy: ClientPolicy, time: Date = Date()) throws -> String {
        try service.policyURL(policy, clientId: .exampleClient, clientScheme: .exampleClient, time: time)
    }

    /// Sets the client's policy through the provider (sent at once when the client is unlocked)
    /// and returns the provider's record afterwards.
    @discardableResult
    public func setPolicy(_ change: @escaping (inout ClientPolicy) -> Void) async throws -> PolicyRecord {
        try await service.setPolicy(clientScheme: .exampleClient, change).record
    }

    /// The client's signed availability notice, parsed, made at `now`.
    public func available(now: Date = Date()) throws -> AvailabilityNotice {
        try AvailabilityNotice.parse(
            try client.availabilityURL(now: now)!, scheme: try URLScheme("org.example.provider"))
    }

    /// The client's signed `new`, parsed, with request id `request` (a fresh one by default).
    public func new(request: RequestID? = nil, now: Date = Date()) throws -> CredentialRequest {
        try CredentialRequest.parse(
            try client.requestURL(request: request, now: now).url,
            scheme: try URLScheme("org.example.provider"))
    }

    /// A credential the test CA issues for `request`.
    public func credential(_ request: TestCAIssueRequest = TestCAIssueRequest()) throws -> Credential {
        try ca.issue(request).credential()
    }

    /// A validator that trusts the test CA.
    public func validator() -> CredentialValidator {
        CredentialValidator(trustAnchors: [ca.rootCertificate], intermediates: [ca.issuingCertificate])
    }
}

/// The service, for the opener that is made before it.
final class ServiceHolder: @unchecked Sendable {
    // Set once before any send; read afterwards.
    var service: CredentialService?
}
