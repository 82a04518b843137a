import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

/// The provider's side of the AppConnect derived-credential API, on Linux: a service made from a
/// brand and the provider's own callback scheme that checks a client's support, checks whether it
/// can send now, and sends a credential sealed to the client, completing when the client's
/// authenticated result arrives.
public struct CredentialService: Sendable {
    /// The provider's name as users know it; never empty.
    public let brand: String
    /// The provider's own URL scheme, lowercased; results and `new` requests come back on it.
    public let callbackScheme: String
    /// The XDG directories registrations and the request ledger are found in.
    public let locations: XDGDirectories
    /// The record of this provider's requests, in `$XDG_STATE_HOME/dcprovision/requests`.
    public var ledger: RequestLedger
    /// How a delivery URL is opened: the scheme-handler launcher, injected so that the library
    /// does not depend on how handlers are found. Arguments: URL, client registration.
    public typealias Opener = @Sendable (String, ClientRegistration) async throws -> Void
    let open: Opener

    /// Fails on an empty brand or an invalid scheme (RFC 3986; compared case-insensitively, kept
    /// lowercase), as AppConnect's service creation does.
    public init(
        brand: String, callbackScheme: String, locations: XDGDirectories = XDGDirectories(),
        open: @escaping Opener
    ) throws {
        guard !brand.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw DCError(.invalid, "the brand is empty", hint: "give the name users know the provider by")
        }
        let scheme = callbackScheme.lowercased()
        guard let first = scheme.unicodeScalars.first, ("a"..."z").contains(first),
            scheme.unicodeScalars.allSatisfy({
                ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0)
            })
        else {
            throw DCError(
                .invalid, "'\(callbackScheme.escapingControlCharacters)' is not a valid URL scheme",
                hint: "use letters, digits, +, - and ., starting with a letter (org.example.provider)")
        }
        self.brand = brand
        self.callbackScheme = scheme
        self.locations = locations
        self.ledger = RequestLedger(directory: locations.stateHome + "/dcprovision/requests")
        self.open = open
    }

    /// present / oldClient / missingClient, from the client's registration.
    public func support(clientScheme: String) throws -> ClientSupport {
        guard
            let registration = try Registrations.read(
                ClientRegistration.self, at: locations.clientRegistration(clientScheme.lowercased()))
        else {
            return .missingClient
        }
        return registration.protocolVersion < ClientRegistration.currentProtocol ? .oldClient : .present
    }

    /// Support is `present` and the client's secure services are available.
    public func canSendCredential(clientScheme: String) throws -> Bool {
        guard try support(clientScheme: clientScheme) == .present else { return false }
        return try registration(clientScheme).servicesAvailable
    }

    func registration(_ clientScheme: String) throws -> ClientRegistration {
        guard
            let registration = try Registrations.read(
                ClientRegistration.self, at: locations.clientRegistration(clientScheme.lowercased()))
        else { throw Self.missingClient("for \(clientScheme):") }
        return registration
    }

    /// The registration of the client whose id is `clientId` (a `new` request names its client by id).
    public func registration(clientId: String) throws -> ClientRegistration {
        let clients = locations.registrations + "/clients"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: clients)) ?? []
        for name in names.sorted() where name.hasSuffix(".json") {
            if let registration = try Registrations.read(ClientRegistration.self, at: clients + "/" + name),
                registration.clientId == clientId
            {
                return registration
            }
        }
        throw Self.missingClient("with the id '\(clientId)'")
    }

    static func missingClient(_ which: String) -> DCError {
        DCError(
            .missingClient, "no managed client is registered \(which)",
            hint: "register the client (dcclient register, after dcclient init), then try again")
    }

    /// What a send did, step by step, for people.
    public struct Receipt: Sendable {
        /// The request id of the send: 32 lowercase hex digits.
        public var request: String
        /// One line per step taken, in order, as passed to `progress`.
        public var steps: [String]
    }

    /// Sends `credential` to the client registered for `clientScheme`:
    /// support → can send → validation → seal → spool → open the delivery URL → the result.
    ///
    /// With `queueIfUnavailable`, a send to a locked client is sealed and spooled anyway and
    /// queued (AppConnect's "wait for the availability notification and retry"): it goes out when
    /// the client announces availability (``deliverQueued(clientId:progress:)``), within the
    /// request's time limit. Without it, the send fails with `serviceUnavailable`.
    ///
    /// `answering` is the request id of a client's `new` that ``reserve(request:clientId:)``
    /// recorded: the delivery then carries that id, so the client can match it to its request.
    /// Without it the send is the provider's own and gets a fresh random request id.
    public func send(
        _ credential: Credential, clientScheme: String, validator: CredentialValidator = CredentialValidator(),
        queueIfUnavailable: Bool = false, answering: String? = nil, progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Receipt {
        var steps: [String] = [] {
            didSet { progress(steps.last!) }
        }
        switch try support(clientScheme: clientScheme) {
        case .missingClient: throw Self.missingClient("for \(clientScheme):")
        case .oldClient:
            throw DCError(.oldClient, "the managed client speaks an older delivery protocol", hint: "update the client")
        case .present: steps.append("client support: present (protocol \(ClientRegistration.currentProtocol))")
        }
        let registration = try registration(clientScheme)
        let available = registration.servicesAvailable
        guard available || queueIfUnavailable else {
            throw DCError(
                .serviceUnavailable, "the client's secure services are locked",
                hint: "unlock the client (dcclient unlock) and send again, or send with --queue")
        }
        steps.append(
            available
                ? "can send: the client's secure services are available"
                : "can send: not now (the client is locked); the delivery will be queued")
        let verdict = validator.validate(credential)
        guard verdict.passes() else {
            throw DCError(
                .invalid,
                "the credential fails validation: \(verdict.errors.map(\.description).joined(separator: "; "))",
                hint: "fix the credential's source; dcprovision inspect shows every finding")
        }
        steps.append("validated: \(credential.entries.count) entries, \(verdict.warnings.count) warning(s)")

        let resultKey = try Digests.random(32)
        let resultKeyText = resultKey.withUnsafeBytes { Data($0).base64EncodedString() }
        let request: String
        if let answering {
            guard var reserved = ledger.record(answering), reserved.resultKey == nil, reserved.outcome == nil,
                reserved.clientScheme == registration.scheme
            else {
                throw DCError(
                    .usage, "not a pending request of this client", subject: answering,
                    hint: "reserve the client's request id first (reserve(request:clientId:))")
            }
            reserved.credentialName = credential.name
            reserved.resultKey = resultKeyText
            try ledger.write(reserved, replacing: true)
            request = answering
        } else {
            request = Digests.hex(try Digests.random(16).withUnsafeBytes { Array($0) })
            try ledger.create(
                RequestLedger.Record(
                    request: request, clientScheme: registration.scheme, credentialName: credential.name,
                    created: Date(), resultKey: resultKeyText))
        }
        let payload = DeliveryPayload(
            requestId: request, clientId: registration.clientId, issuedAt: Date(), resultKey: resultKey,
            credential: credential)
        let sealed = try Sealing.seal(try payload.encode(), to: try registration.sealingCertificate())
        steps.append(
            "sealed: CMS AuthEnvelopedData (AES-256-GCM) to the client's key, \(sealed.count) bytes, bound to request \(request)"
        )
        let digest = try Spool(directory: registration.spool).write(sealed, request: request)
        steps.append("spooled: \(Spool(directory: registration.spool).path(request: request)) (0600)")
        let url = DeliveryMessage.deliver(client: registration.clientId, request: request, digest: digest).url(
            scheme: registration.scheme)
        if !available {
            var record = ledger.record(request)!
            record.queuedURL = url
            try ledger.write(record, replacing: true)
            steps.append(
                "queued: \(url) goes out when the client announces availability (within \(Int(ledger.timeLimit)) s)")
            return Receipt(request: request, steps: steps)
        }
        steps.append("opening \(url)")
        try await open(url, registration)
        guard let record = ledger.record(request), let outcome = record.outcome else {
            throw DCError(
                .notReady, "the client did not confirm the delivery", subject: request,
                hint: "see dcclient's output; the request id stays valid for \(Int(ledger.timeLimit)) s")
        }
        guard outcome == "ok" else {
            throw DCError(
                .invalid, "the client rejected the credential: \(outcome)", subject: request,
                hint: "see the client's messages above; dcprovision inspect shows what the client would find")
        }
        steps.append("result: the client installed the credential and confirmed (MAC verified)")
        return Receipt(request: request, steps: steps)
    }

    /// Records the request id of a client's `new` (see ``RequestLedger/reserve(request:clientScheme:now:)``)
    /// and returns the client's registration. A request id already used is refused, before
    /// anything is issued.
    public func reserve(request: String, clientId: String) throws -> ClientRegistration {
        let registration = try registration(clientId: clientId)
        try ledger.reserve(request: request, clientScheme: registration.scheme)
        return registration
    }

    /// Answers a client's `new` request: records its request id (a replay is refused and
    /// nothing is issued), has `issue` make the credential, and sends it answering that id. If
    /// issuing or sending fails before anything was sealed, the request is marked
    /// ``RequestLedger/notSent``.
    public func answer(
        client: String, request: String, queueIfUnavailable: Bool = false,
        progress: @Sendable (String) -> Void = { _ in },
        issue: (ClientRegistration) async throws -> Credential
    ) async throws -> Receipt {
        let registration = try reserve(request: request, clientId: client)
        do {
            let credential = try await issue(registration)
            return try await send(
                credential, clientScheme: registration.scheme, queueIfUnavailable: queueIfUnavailable,
                answering: request, progress: progress)
        } catch {
            ledger.abandon(request)
            throw error
        }
    }

    /// Delivers what was queued for a client that announced availability; returns the requests sent.
    /// Expired entries are dropped and their spool files removed: nothing sealed waits longer
    /// than the request's time limit.
    public func deliverQueued(clientId: String, progress: @Sendable (String) -> Void = { _ in }) async throws
        -> [String]
    {
        var sent: [String] = []
        for record in ledger.recent(limit: 1000).reversed() where record.queuedURL != nil && record.outcome == nil {
            guard let registration = try? self.registration(record.clientScheme), registration.clientId == clientId,
                let url = record.queuedURL
            else { continue }
            try ledger.dequeue(record.request)
            guard Date().timeIntervalSince(record.created) <= ledger.timeLimit else {
                Spool(directory: registration.spool).remove(request: record.request)
                progress(
                    "dropped queued request \(record.request): older than \(Int(ledger.timeLimit)) s; spool file removed"
                )
                continue
            }
            progress("delivering queued request \(record.request)")
            try await open(url, registration)
            sent.append(record.request)
        }
        return sent
    }

    /// Handles the client's result URL: authenticates it and records the outcome once.
    public func handleResult(_ url: String) throws -> RequestLedger.Record {
        guard case .result(let request, let status, let mac) = try DeliveryMessage.parse(url, scheme: callbackScheme)
        else {
            throw DCError(.invalid, "not a result URL", hint: "results are <provider-scheme>:/result?… URLs")
        }
        return try ledger.complete(request: request, status: status, mac: mac)
    }
}
