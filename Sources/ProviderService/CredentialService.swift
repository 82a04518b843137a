import AuthTokens
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import IdentityTokens
import SystemSupport

/// The provider's side of the AppConnect derived-credential API, on Linux: a service made from a
/// brand and the provider's own callback scheme that checks a client's support, checks whether it
/// can send now, and sends a credential sealed to the client, completing when the client's
/// authenticated result arrives.
public struct CredentialService: Sendable {
    /// The provider's name as users know it; never empty.
    public let brand: String
    /// The provider's own URL scheme; results and `new` requests come back on it.
    public let callbackScheme: URLScheme
    /// The XDG directories registrations and the request ledger are found in.
    public let locations: XDGDirectories
    /// The record of this provider's requests, in `$XDG_STATE_HOME/dcprovision/requests`.
    public var ledger: RequestLedger
    /// How a delivery URL is opened: the scheme-handler launcher, injected so that the library
    /// does not depend on how handlers are found. Arguments: URL, client registration.
    public typealias Opener = @Sendable (String, ClientRegistration) async throws -> Void
    let open: Opener
    /// Checks, before anything is sealed, that the client's scheme is handled by the executable
    /// its registration names (a hijacked scheme must not even get a sealed payload queued).
    public typealias HandlerCheck = @Sendable (ClientRegistration) throws -> Void
    let checkHandler: HandlerCheck

    /// Fails on an empty brand, as AppConnect's service creation does (the scheme was checked
    /// where it was read).
    public init(
        brand: String, callbackScheme: URLScheme, locations: XDGDirectories = XDGDirectories(),
        checkHandler: @escaping HandlerCheck = { _ in }, open: @escaping Opener
    ) throws {
        guard !brand.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw DCError(.invalid, "the brand is empty", hint: "give the name users know the provider by")
        }
        self.brand = brand
        self.callbackScheme = callbackScheme
        self.locations = locations
        self.ledger = RequestLedger(directory: locations.stateHome + "/dcprovision/requests")
        self.checkHandler = checkHandler
        self.open = open
    }

    // MARK: - Identity and pairing

    var stateDirectory: String { locations.stateHome + "/dcprovision" }

    /// The provider's message-signing key (`$XDG_STATE_HOME/dcprovision/signing-key`, 0600), made
    /// on first use. Every delivery is signed with it; clients pin its public half.
    public func signingKey() throws -> MessageSigningKey {
        try PinnedKeys.signingKey(at: stateDirectory + "/signing-key")
    }

    /// What the provider publishes for clients: its scheme, brand, handler and public signing key.
    public func registration(executable: String) throws -> ProviderRegistration {
        ProviderRegistration(
            scheme: callbackScheme, brand: brand, executable: executable, signingKey: try signingKey().publicKey)
    }

    func pairingPath(_ clientId: ClientID) -> String { locations.configHome + "/dcprovision/clients/\(clientId).json" }

    /// The pairing with the client whose id is `clientId`, or nil when the operator never paired it.
    public func pairing(clientId: ClientID) throws -> ClientPairing? {
        try PinnedKeys.read(ClientPairing.self, at: pairingPath(clientId))
    }

    /// Pairs with the client registered for `clientScheme`: pins its message-signing key, so that
    /// its `new` and `available` messages are acted on from now on, and its auth-token key, the
    /// only one the provider will certify for it; and records whether it may make the provider use
    /// a card unattended. Pairing again replaces the pin (after a client was
    /// set up afresh). This is the operator's decision; no URL can make it. A paired client is
    /// managed: its policy (`ClientPolicy`) starts `authorized` and goes out with the next message.
    ///
    /// `userID` is the user the client's auth tokens name; nil names the user running the provider
    /// (`ClientPairing.defaultUserID`). It must be printable ASCII (it travels in an HTTP header).
    public func pair(
        clientScheme: URLScheme, allowCardRequests: Bool = false, cardRequestsPerHour: Int = 4,
        userID: String? = nil
    ) throws -> ClientPairing {
        guard try support(clientScheme: clientScheme) == .present else {
            throw DCError(
                .oldClient, "the client registered for \(clientScheme): speaks an older delivery protocol",
                hint: "update the client and register it again")
        }
        let registration = try registration(clientScheme)
        guard let key = registration.signingKey, PinnedKeys.decode(key) != nil else {
            throw DCError(
                .invalid, "the client's registration has no usable signing key",
                subject: locations.clientRegistration(registration.scheme), hint: "register the client again")
        }
        guard (1...3600).contains(cardRequestsPerHour) else {
            throw DCError(.usage, "the card request limit must be 1 to 3600 an hour")
        }
        if let userID {
            guard !userID.isEmpty else { throw DCError(.usage, "the user id is empty") }
            try HeaderText.check(userID, what: "the user id", maximumLength: HeaderText.maximumIdentityLength)
        }
        // Checked now: a registration with a malformed token key is not paired.
        let tokenKey = try registration.tokenPublicKey()
        let pairing = ClientPairing(
            clientId: registration.clientId, scheme: registration.scheme, signingKey: key,
            allowCardRequests: allowCardRequests, cardRequestsPerHour: cardRequestsPerHour,
            tokenKey: tokenKey.map { Data($0.uncompressedPoint).base64EncodedString() }, userID: userID)
        // All or nothing: a step that fails puts back what the steps before it changed.
        try Rollback.allOrNothing { rollback in
            keepPairing(registration.clientId, in: rollback)
            // The client is managed from now on: authorized, a policy that goes out with the next
            // message to it (a retired client is refused here).
            try startManaging(registration, signingKey: key)
            // A client set up afresh: what the old token key was certified for is revoked (a copy of
            // the old store must not go on making tokens), and the container a retire closed opens
            // for the new key (the old delegations stay revoked by id).
            if let previous = try? self.pairing(clientId: registration.clientId), previous.tokenKey != pairing.tokenKey
            {
                try revokeDelegations(of: registration.clientId)
            }
            try liftRetirement(of: registration.clientId, scheme: registration.scheme)
            try PinnedKeys.write(pairing, to: pairingPath(registration.clientId))
        }
        return pairing
    }

    /// Checks a client's signed message (`new` or `available`): the client was paired, the
    /// signature is its pinned key's, the time is within the request time limit, and its
    /// registration still shows the pinned key. Returns the registration and the pairing. Anything
    /// else is `refusedMessage` (exit 77), and nothing has been done.
    public func authenticate(_ message: some ClientSignedMessage, now: Date = Date()) throws -> (
        registration: ClientRegistration, pairing: ClientPairing
    ) {
        let client = message.client.text
        let time = message.time
        let path = type(of: message).path
        guard let pairing = try pairing(clientId: message.client) else {
            throw DCError(
                .refusedMessage, "the client '\(client)' is not paired with this provider",
                remedy: .pairIfYours)
        }
        guard let key = pairing.publicKey, message.isSigned(by: key, scheme: callbackScheme) else {
            throw DCError(
                .refusedMessage, "the \(path) message is not signed by the paired client (forged or altered)",
                subject: client, remedy: .clientAsksAgain)
        }
        guard abs(now.timeIntervalSince1970 - Double(time)) <= ledger.timeLimit else {
            throw DCError(
                .refusedMessage,
                "the \(path) message is older than \(Int(ledger.timeLimit)) s (or from the future)",
                subject: client, remedy: .clientAsksAgain)
        }
        let registration = try registration(pairing.scheme)
        guard registration.clientId == pairing.clientId, registration.signingKey == pairing.signingKey else {
            throw DCError(
                .refusedMessage, "the client's registration changed since it was paired", subject: client,
                remedy: .pairAfresh(clientScheme: pairing.scheme))
        }
        return (registration, pairing)
    }

    /// present / oldClient / missingClient, from the client's registration.
    public func support(clientScheme: URLScheme) throws -> ClientSupport {
        guard
            let registration = try Registrations.read(
                ClientRegistration.self, at: locations.clientRegistration(clientScheme))
        else {
            return .missingClient
        }
        return registration.protocolVersion < ClientRegistration.currentProtocol ? .oldClient : .present
    }

    /// Support is `present` and the client's secure services are available.
    public func canSendCredential(clientScheme: URLScheme) throws -> Bool {
        guard try support(clientScheme: clientScheme) == .present else { return false }
        return try registration(clientScheme).servicesAvailable
    }

    /// The client's registration; its id, which names files of the provider's (the pairing, the
    /// delivery counter), was checked by its one rule as the file was read.
    func registration(_ clientScheme: URLScheme) throws -> ClientRegistration {
        guard
            let registration = try Registrations.read(
                ClientRegistration.self, at: locations.clientRegistration(clientScheme))
        else { throw Self.missingClient("for \(clientScheme):") }
        return registration
    }

    static func missingClient(_ which: String) -> DCError {
        DCError(
            .missingClient, "no managed client is registered \(which)",
            remedy: .registerClient)
    }

    /// What a send did, step by step, for people.
    public struct Receipt: Sendable {
        /// The request id of the send.
        public var request: RequestID
        /// One line per step taken, in order, as passed to `progress`.
        public var steps: [String]
    }

    /// What a send checks before it looks at the credential, and refuses on: the client is
    /// registered and speaks this protocol, the operator paired it and its registration still
    /// shows the key pinned then (`refusedMessage`, exit 77, as for its requests), its policy
    /// authorizes it, and its secure services are available (or the send may be queued). Returns
    /// the client's registration; `progress` gets the steps that passed. ``send(_:clientScheme:validator:queueIfUnavailable:answering:progress:)``
    /// begins with it; a caller that must first make the credential (issue it, log in to a card)
    /// calls it before that, so a send that would be refused makes nothing.
    public func checkCanSend(
        clientScheme: URLScheme, queueIfUnavailable: Bool, progress: (String) -> Void = { _ in }
    ) throws -> ClientRegistration {
        switch try support(clientScheme: clientScheme) {
        case .missingClient: throw Self.missingClient("for \(clientScheme):")
        case .oldClient:
            throw DCError(.oldClient, "the managed client speaks an older delivery protocol", hint: "update the client")
        case .present: progress("client support: present (protocol \(ClientRegistration.currentProtocol))")
        }
        let registration = try registration(clientScheme)
        // Only a client the operator paired is sent anything, as only its requests are answered.
        guard let pairing = try pairing(clientId: registration.clientId) else {
            throw DCError(
                .refusedMessage, "the client '\(registration.clientId)' is not paired with this provider",
                subject: registration.scheme.text,
                remedy: .pairBeforeSending(clientScheme: registration.scheme))
        }
        guard pairing.signingKey == registration.signingKey else {
            throw DCError(
                .refusedMessage, "the client's registration changed since it was paired",
                subject: registration.scheme.text,
                remedy: .pairAfresh(clientScheme: registration.scheme))
        }
        progress("client paired: its registration shows the key pinned at pairing")
        // Nothing, not even a credential, goes to a client that is not authorized.
        try checkAuthorized(registration)
        let available = registration.servicesAvailable
        guard available || queueIfUnavailable else {
            throw DCError(
                .serviceUnavailable, "the client's secure services are locked",
                remedy: .unlockOrQueueSend)
        }
        progress(
            available
                ? "can send: the client's secure services are available"
                : "can send: not now (the client is locked); the delivery will be queued")
        return registration
    }

    /// Sends `credential` to the client registered for `clientScheme`:
    /// support → can send → validation → seal → spool → open the delivery URL → the result.
    ///
    /// With `queueIfUnavailable`, a send to a locked client is sealed and spooled anyway and
    /// queued (AppConnect's "wait for the availability notification and retry"): it goes out when
    /// the client announces availability (``deliverQueued(_:now:progress:)``), within the
    /// request's time limit. Without it, the send fails with `serviceUnavailable`.
    ///
    /// `answering` is the request id of a client's `new` that
    /// ``answer(_:fromCard:queueIfUnavailable:now:progress:issue:)`` recorded: the delivery then carries that id, so the client can match it to its request.
    /// Without it the send is the provider's own and gets a fresh random request id.
    public func send(
        _ credential: Credential, clientScheme: URLScheme, validator: CredentialValidator = CredentialValidator(),
        queueIfUnavailable: Bool = false, answering: RequestID? = nil,
        progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Receipt {
        var steps: [String] = [] {
            didSet { progress(steps.last!) }  // cannot fail: steps is only appended to
        }
        let registration = try checkCanSend(
            clientScheme: clientScheme, queueIfUnavailable: queueIfUnavailable, progress: { steps.append($0) })
        let available = registration.servicesAvailable
        let verdict = validator.validate(credential)
        guard verdict.passes() else {
            if let failure = verdict.revocationFailure { throw failure }
            throw DCError(
                .invalid,
                "the credential fails validation: \(verdict.errors.map(\.description).joined(separator: "; "))",
                remedy: .fixSource)
        }
        steps.append("validated: \(credential.entries.count) entries, \(verdict.warnings.count) warning(s)")
        // Before anything is sealed: a scheme another program hijacked gets nothing, not even a
        // queued payload.
        try checkHandler(registration)
        let signingKey = try signingKey()

        let serials = credential.entries.flatMap { [$0.certificate] + $0.keyHistory.map(\.certificate) }.compactMap {
            try? CertificateDetails($0).serialNumber
        }
        let resultKey = try Digests.random(32)
        let resultKeyText = resultKey.withUnsafeBytes { Data($0).base64EncodedString() }
        // The client learns its policy before it gets a credential, and before anything is sealed
        // for it: a policy that cannot go out leaves no record and no spool file.
        if available, try await pushPolicy(to: registration, progress: progress) {
            steps.append("policy: the client's newest policy went out first")
        }
        // All or nothing until the URL goes out: a failure before it takes back the ledger record
        // (or what it filled in of a reservation) and the spool file. The delivery number it drew
        // stays used up, as a trust list's does: a number is never signed twice.
        let (request, url) = try Rollback.allOrNothing { rollback -> (RequestID, String) in
            let request: RequestID
            if let answering {
                rollback.keep(ledger.path(answering))
                guard var reserved = ledger.record(answering), reserved.resultKey == nil, reserved.outcome == nil,
                    reserved.clientScheme == registration.scheme
                else {
                    throw DCError(
                        .usage, "not a pending request of this client", subject: answering.text,
                        hint: "reserve the client's request id first (reserve(request:clientId:))")
                }
                reserved.credentialName = credential.name
                reserved.resultKey = resultKeyText
                reserved.certificateSerials = serials
                try ledger.write(reserved, replacing: true)
                request = answering
            } else {
                request = RequestID.random()
                rollback.keep(ledger.path(request))
                var record = RequestLedger.Record(
                    request: request, clientScheme: registration.scheme, credentialName: credential.name,
                    created: Date(), resultKey: resultKeyText)
                record.certificateSerials = serials
                try ledger.create(record)
            }
            let spool = Spool(directory: registration.spool)
            rollback.keep(spool.path(request: request))
            let payload = DeliveryPayload(
                requestId: request, clientId: registration.clientId, issuedAt: Date(), resultKey: resultKey,
                credential: credential)
            let sealed = try Sealing.seal(try payload.encode(), to: try registration.sealingCertificate())
            steps.append(
                "sealed: CMS AuthEnvelopedData (AES-256-GCM) to the client's key, \(sealed.count) bytes, bound to request \(request)"
            )
            let digest = try spool.write(sealed, request: request)
            steps.append("spooled: \(spool.path(request: request)) (0600)")
            let sequence = try DeliverySequence(path: stateDirectory + "/sequences/\(registration.clientId)").next()
            let url = try DeliveryNotice(
                client: registration.clientId, request: request, digest: try SHA256Hex(digest), sequence: sequence
            ).signed(with: signingKey, scheme: registration.scheme).url(scheme: registration.scheme)
            steps.append("signed: delivery \(sequence) to \(registration.clientId), with the provider's key")
            if !available {
                var record = try ledger.existingRecord(request)
                record.queuedURL = url
                try ledger.write(record, replacing: true)
                steps.append(
                    "queued: \(url) goes out when the client announces availability (within \(Int(ledger.timeLimit)) s)"
                )
            }
            return (request, url)
        }
        if !available { return Receipt(request: request, steps: steps) }
        steps.append("opening \(url)")
        try await open(url, registration)
        guard let record = ledger.record(request), let outcome = record.outcome else {
            throw DCError(
                .notReady, "the client did not confirm the delivery", subject: request.text,
                hint: "see dcclient's output; the request id stays valid for \(Int(ledger.timeLimit)) s")
        }
        guard outcome == .ok else {
            if outcome == .stale {
                throw DCError(
                    .refusedMessage, "the client holds a newer credential and kept it (stale delivery)",
                    subject: request.text, hint: "nothing was changed on the client; send again to replace it")
            }
            throw DCError(
                .invalid, "the client rejected the credential: \(outcome)", subject: request.text,
                remedy: .inspectRejected)
        }
        steps.append("result: the client installed the credential and confirmed (MAC verified)")
        return Receipt(request: request, steps: steps)
    }

    /// Answers a client's signed `new`: authenticates it (``authenticate(_:now:)``), applies the
    /// operator's policy for unattended card use (`fromCard`: the source logs in to a card), records
    /// its request id (a replay is refused and nothing is issued), has `issue` make the credential,
    /// and sends it answering that id. If issuing or sending fails before anything was sealed, the
    /// request is marked `RequestLedger.notSent`.
    public func answer(
        _ message: CredentialRequest, fromCard: Bool = false, queueIfUnavailable: Bool = false, now: Date = Date(),
        progress: @Sendable (String) -> Void = { _ in },
        issue: (ClientRegistration) async throws -> Credential
    ) async throws -> Receipt {
        let request = message.request
        let (registration, pairing) = try authenticate(message, now: now)
        // The request id is recorded before the policy is applied, so a request refused now cannot
        // be replayed later, once the policy would let it through.
        try ledger.reserve(request: request, clientScheme: registration.scheme, now: now)
        do {
            // A request that the send would refuse (the client not authorized) issues nothing and
            // touches no card.
            _ = try checkCanSend(clientScheme: registration.scheme, queueIfUnavailable: queueIfUnavailable)
            try applyCardPolicy(fromCard: fromCard, registration: registration, pairing: pairing, now: now)
            // Counted against the hourly limit from now on: the card is about to be used.
            if fromCard, var record = ledger.record(request) {
                record.cardRequest = true
                try ledger.write(record, replacing: true)
            }
        } catch {
            ledger.abandon(request)
            throw error
        }
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

    /// A client's request may make a card source log in unattended only if the operator allowed
    /// it for that client, and then at most `cardRequestsPerHour` times in any hour.
    func applyCardPolicy(
        fromCard: Bool, registration: ClientRegistration, pairing: ClientPairing, now: Date
    ) throws {
        if fromCard {
            guard pairing.allowCardRequests else {
                throw DCError(
                    .refusedMessage,
                    "the source uses a card, and requests from '\(pairing.clientId)' may not use it unattended",
                    remedy: .allowCardRequests)
            }
            let recent = ledger.recent(limit: 10_000).filter {
                $0.clientScheme == registration.scheme && $0.cardRequest == true
                    && now.timeIntervalSince($0.created) < 3600
            }
            guard recent.count < pairing.cardRequestsPerHour else {
                throw DCError(
                    .serviceUnavailable,
                    "'\(pairing.clientId)' made \(recent.count) card requests in the last hour (the limit)",
                    remedy: .raiseCardRequestLimit)
            }
        }
    }

    /// Delivers what was queued for a client that announced availability; returns the requests sent.
    /// Expired entries are dropped and their spool files removed: nothing sealed waits longer
    /// than the request's time limit.
    /// Only a signed `available` from a paired client (``authenticate(_:now:)``) changes the queue;
    /// a replay within the time limit finds the queue already emptied.
    public func deliverQueued(
        _ message: AvailabilityNotice, now: Date = Date(), progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> [RequestID] {
        let (clientId, time) = (message.client, message.time)
        let (current, _) = try authenticate(message, now: now)
        // Each notice once, and only a newer one: a captured notice replayed later does nothing.
        try FileLock.updateNumber(at: stateDirectory + "/available/\(clientId)") { text in
            guard time > Int64(text) ?? 0 else {
                throw DCError(
                    .refusedMessage, "a replayed availability notice (not newer than the last one)",
                    subject: clientId.text, hint: "nothing was done; the client announces again when it unlocks")
            }
            return UInt64(time)
        }
        // What goes out goes to a client that can take it; a notice is no proof the store is open.
        guard current.servicesAvailable else {
            throw DCError(
                .serviceUnavailable, "the client announced availability, but its secure services are locked",
                subject: clientId.text, hint: "queued deliveries stay queued until it unlocks")
        }
        // The newest policy first: a client unauthorized meanwhile gets no credential.
        if try await pushPolicy(to: current, progress: progress) { progress("sent the newest policy") }
        guard (try? checkAuthorized(current)) != nil else {
            progress("the client is not authorized: queued credentials stay queued")
            return []
        }
        // A fresh auth-token delegation with every notice: one that unlocks daily never runs out.
        await offerDelegation(to: current, progress: progress)
        var sent: [RequestID] = []
        var failure: Error?
        for record in ledger.recent(limit: 1000).reversed() where record.queuedURL != nil && record.outcome == nil {
            guard let registration = try? self.registration(record.clientScheme), registration.clientId == clientId,
                let url = record.queuedURL
            else { continue }
            guard now.timeIntervalSince(record.created) <= ledger.timeLimit else {
                try ledger.dequeue(record.request)
                Spool(directory: registration.spool).remove(request: record.request)
                progress(
                    "dropped queued request \(record.request): older than \(Int(ledger.timeLimit)) s; spool file removed"
                )
                continue
            }
            progress("delivering queued request \(record.request)")
            do {
                try await open(url, registration)
                // Off the queue only once it went out: a failed open leaves it for the next notice.
                try ledger.dequeue(record.request)
                sent.append(record.request)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
        return sent
    }

    /// Handles the client's result URL: authenticates it and records the outcome once. A client
    /// that confirmed installing the credential now holds its certificates (``holdings``).
    public func handleResult(_ result: DeliveryResult) throws -> RequestLedger.Record {
        let record = try ledger.complete(request: result.request, status: result.status, mac: result.mac.text)
        if record.outcome == .ok, let serials = record.certificateSerials {
            try holdings.record(
                clientScheme: record.clientScheme, credentialName: record.credentialName, serials: serials,
                at: record.completed ?? Date())
        }
        return record
    }

    /// The certificates each client confirmed installing.
    public var holdings: Holdings { Holdings(directory: stateDirectory + "/holdings") }

    /// The outcome of a request that got no answer within its time limit.
    public static let expired = ResultStatus.expired

    /// Keeps the ledger and the spool bounded: requests past their time limit with no answer are
    /// closed as ``expired`` (a queued one's sealed spool file is removed), then old finished
    /// records are removed (`RequestLedger.prune(now:)`). Every handled URL and every send runs it.
    public func prune(now: Date = Date()) {
        // One read of the ledger for both steps: every handled URL and every send runs this.
        var records = ledger.recent(limit: Int.max)
        for index in records.indices where records[index].outcome == nil {
            guard now.timeIntervalSince(records[index].created) > ledger.timeLimit else { continue }
            var closed = records[index]
            if closed.queuedURL != nil, let registration = try? registration(closed.clientScheme) {
                Spool(directory: registration.spool).remove(request: closed.request)
            }
            closed.queuedURL = nil
            closed.resultKey = nil
            closed.outcome = Self.expired
            try? ledger.write(closed, replacing: true)
            records[index] = closed
        }
        ledger.prune(records, now: now)
    }
}

extension CredentialService {
    /// What the provider did with a URL that came to its scheme (``handle(url:fromCard:progress:issue:)``).
    public enum Handled: Sendable {
        /// A client's `new` request was answered with a credential `issue` made.
        case answered(CredentialRequest, Receipt)
        /// A client announced availability; the requests whose queued deliveries went out.
        case deliveredQueued(AvailabilityNotice, [RequestID])
        /// A client's result was recorded.
        case result(DeliveryResult, RequestLedger.Record)
        /// An app's acknowledgement was recorded.
        case acknowledged(Acknowledgement, PolicyRecord)
        /// An identity JWT was issued and spooled.
        case identityToken(IdentityRequest, IdentityToken)
    }

    /// The provider's scheme handler: parses `url` once, strictly, and does what it asks —
    /// answers a `new` (``answer(_:fromCard:queueIfUnavailable:now:progress:issue:)``, with `issue`
    /// making the credential), delivers the queue on `available`, records a `result` or an `ack`,
    /// issues an identity JWT on `jwt`. A message meant for a client is refused. Requests past
    /// their time limit are closed first (``prune(now:)``).
    public func handle(
        url: String, fromCard: Bool = false, progress: @Sendable (String) -> Void = { _ in },
        issue: (CredentialRequest, ClientRegistration) async throws -> Credential
    ) async throws -> Handled {
        prune()
        let message = try DeliveryMessage.parse(url, scheme: callbackScheme)
        switch message {
        case .new(let request):
            let receipt = try await answer(
                request, fromCard: fromCard, progress: progress, issue: { try await issue(request, $0) })
            return .answered(request, receipt)
        case .available(let notice):
            return .deliveredQueued(notice, try await deliverQueued(notice, progress: progress))
        case .result(let result):
            return .result(result, try handleResult(result))
        case .acknowledgement(let acknowledgement):
            return .acknowledged(acknowledgement, try handleAcknowledgement(acknowledgement))
        case .identityRequest(let request):
            return .identityToken(request, try await issueIdentityToken(request))
        case .deliver, .policy, .delegation:
            throw DCError(
                .invalid, "a \(message.path) URL sent to the provider",
                hint: "deliveries go to the client's scheme: check which scheme each program registered")
        }
    }
}
