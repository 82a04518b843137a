import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import SystemSupport

/// An app's answer to a policy, as the provider recorded it.
public struct PolicyAcknowledgement: Codable, Sendable, Equatable {
    /// The number of the policy answered.
    public var sequence: UInt64
    /// How the app handled it.
    public var state: PolicyState
    /// The app's explanation; may be empty.
    public var message: String
    /// When the app signed the acknowledgement.
    public var time: Date
}

/// What a provider holds for one paired client: the newest policy it set (newest wins: only it
/// is ever sent), when it last went out, and the app's acknowledgements.
/// `$XDG_STATE_HOME/dcprovision/policies/<client-id>.json`.
public struct PolicyRecord: Codable, Sendable, Equatable {
    /// The client's id.
    public var clientId: ClientID
    /// The client's URL scheme.
    public var scheme: URLScheme
    /// The client's signing key when it was paired, base64: a retired client comes back only
    /// set up afresh, with a new key.
    public var signingKey: String
    /// The newest policy.
    public var policy: ClientPolicy
    /// When ``policy`` was last opened at the client; nil while it waits for the client.
    public var sent: Date?
    /// The app's newest acknowledgement of each subject (`auth`, `fileio`).
    public var acknowledgements: [String: PolicyAcknowledgement] = [:]

    /// The acknowledgement of the authorization state, if the app sent one.
    public var authAcknowledgement: PolicyAcknowledgement? { acknowledgements[PolicySubject.authState.rawValue] }
    /// The acknowledgement of the secure file I/O policy; an app that never sends one is taken to
    /// answer `unsupported`.
    public var fileIOAcknowledgement: PolicyAcknowledgement? {
        acknowledgements[PolicySubject.secureFileIO.rawValue]
    }
    /// Whether the newest policy still has to reach the app: it was not acknowledged yet.
    public var isPending: Bool { authAcknowledgement.map { $0.sequence < policy.sequence } ?? true }
}

extension CredentialService {
    var policiesDirectory: String { stateDirectory + "/policies" }
    func policyPath(_ clientId: ClientID) -> String { policiesDirectory + "/\(clientId).json" }

    /// The provider's policy record for `clientId`, or nil when it never paired the client.
    public func policyRecord(clientId: ClientID) throws -> PolicyRecord? {
        try PinnedKeys.read(PolicyRecord.self, at: policyPath(clientId))
    }

    /// Every policy record, by client id.
    public func policyRecords() -> [PolicyRecord] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: policiesDirectory)) ?? []
        return names.sorted().compactMap { name in
            guard name.hasSuffix(".json"), let clientId = ClientID(validating: String(name.dropLast(5))) else {
                return nil
            }
            return try? policyRecord(clientId: clientId)
        }
    }

    /// Changes the record of `clientId` under its lock; `body` returns the new record (or throws,
    /// and nothing changes).
    @discardableResult
    func updatePolicyRecord(_ clientId: ClientID, _ body: (PolicyRecord?) throws -> PolicyRecord) throws
        -> PolicyRecord
    {
        try AtomicFileSet.ensureDirectory(policiesDirectory)
        return try FileLock.withExclusiveLock(at: policyPath(clientId) + ".lock") { _ in
            let record = try body(try policyRecord(clientId: clientId))
            try PinnedKeys.write(record, to: policyPath(clientId))
            return record
        }
    }

    /// Starts managing a client that was just paired: its policy is `authorized`, numbered after
    /// any earlier one, and goes out with the next message to the client. A client that was
    /// retired comes back only set up afresh (another signing key).
    func startManaging(_ registration: ClientRegistration, signingKey: String) throws {
        try updatePolicyRecord(registration.clientId) { old in
            if let old, old.policy.state == .retired, old.signingKey == signingKey {
                throw DCError(
                    .notAuthorized, "the client '\(registration.clientId)' was retired",
                    remedy: .setUpRetiredClient)
            }
            return PolicyRecord(
                clientId: registration.clientId, scheme: registration.scheme, signingKey: signingKey,
                policy: ClientPolicy(
                    state: .authorized, autoLock: old?.policy.autoLock ?? ClientPolicy.defaultAutoLock,
                    sequence: (old?.policy.sequence ?? 0) + 1))
        }
    }

    /// What ``setPolicy(clientScheme:progress:_:)`` did.
    public struct PolicyReceipt: Sendable {
        /// The record after the change (and after the app's acknowledgement, if it came).
        public var record: PolicyRecord
        /// True when the policy was opened at the client now; false when it was not (it was
        /// acknowledged already by the time its turn came).
        public var sent: Bool
    }

    /// Completes the retirement of the client registered for `clientScheme` if its policy is
    /// `retired` already: a command that recorded the retirement and then failed (revoking its
    /// tokens, or opening the policy at the client) is run again, and no policy change is allowed
    /// for a retired client. Revokes its tokens again (revoking twice changes nothing) and opens
    /// its policy if the app has not acknowledged it. Returns false, doing nothing, when the
    /// client is not retired.
    public func completeRetirement(
        clientScheme: URLScheme, progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Bool {
        let registration = try registration(clientScheme)
        guard let record = try policyRecord(clientId: registration.clientId), record.policy.state == .retired else {
            return false
        }
        progress("policy \(record.policy.sequence) for \(record.clientId): retired already")
        try revokeTokens(ofRetired: record.clientId, scheme: registration.scheme)
        progress("its auth tokens are revoked: \(revocationsPath)")
        try await pushPolicy(to: registration, progress: progress)
        return true
    }

    /// Changes the policy of the paired client registered for `clientScheme` (a new number; newest
    /// wins) and opens it at the client at once, locked or not (a locked client acknowledges it
    /// when it next announces availability, and it is opened again then). Nothing changes for a
    /// client that is not paired.
    public func setPolicy(
        clientScheme: URLScheme, progress: @Sendable (String) -> Void = { _ in },
        _ change: (inout ClientPolicy) throws -> Void
    ) async throws -> PolicyReceipt {
        let registration = try registration(clientScheme)
        guard let pairing = try pairing(clientId: registration.clientId) else {
            throw DCError(
                .refusedMessage, "the client '\(registration.clientId)' is not paired with this provider",
                remedy: .pairFirst(clientScheme: registration.scheme))
        }
        let record = try updatePolicyRecord(registration.clientId) { old in
            guard var record = old, record.signingKey == pairing.signingKey else {
                throw DCError(
                    .refusedMessage, "the client's pairing changed since its policy was set",
                    remedy: .pairAgain(clientScheme: registration.scheme))
            }
            guard record.policy.state != .retired else {
                throw DCError(
                    .notAuthorized, "the client '\(registration.clientId)' was retired",
                    remedy: .setUpAndPairRetiredClient)
            }
            try change(&record.policy)
            try PolicyText.check(record.policy.message)
            guard ClientPolicy.autoLockRange.contains(record.policy.autoLock) else {
                throw DCError(.usage, "the auto-lock time must be 1 s to 7 days")
            }
            record.policy.sequence += 1
            record.sent = nil
            return record
        }
        progress("policy \(record.policy.sequence) for \(record.clientId): \(record.policy.state)")
        if record.policy.state == .retired {
            // At once, whether or not the app hears of it: its tokens stop verifying.
            try revokeTokens(ofRetired: record.clientId, scheme: registration.scheme)
            progress("its auth tokens are revoked: \(revocationsPath)")
        } else if record.policy.state != .authorized {
            // At once as well: the delegations it holds stop verifying (103 Revoked).
            let count = try revokeDelegations(of: record.clientId)
            if count > 0 { progress("its \(count) auth-token delegation(s) are revoked: \(revocationsPath)") }
        }
        // A policy needs only the provider key the client pinned, not its store key: a locked
        // client applies it (state and message) at once and acknowledges it after its next
        // unlock, when it announces availability and the provider opens it again.
        if !registration.servicesAvailable {
            progress("the client is locked: it applies the policy now and acknowledges it after its next unlock")
        }
        try await pushPolicy(to: registration, progress: progress)
        if record.policy.state == .authorized, registration.servicesAvailable {
            await offerDelegation(to: registration, progress: progress)
        }
        return PolicyReceipt(record: try policyRecord(clientId: record.clientId) ?? record, sent: true)
    }

    /// Opens the client's newest policy, signed now, if it still waits for the app's
    /// acknowledgement. Returns whether it was opened.
    ///
    /// Pushes to one client take turns (a lock beside its policy record, held until the opener
    /// returns), so two sends at once do not both push the same policy: the second finds it
    /// acknowledged and goes on. If the app's acknowledgement came late and the second push went
    /// out anyway, the app refuses the repeated acknowledgement as a replay; that is no failure of
    /// the second send either, once the policy is found acknowledged.
    @discardableResult
    func pushPolicy(to registration: ClientRegistration, progress: @Sendable (String) -> Void) async throws -> Bool {
        try AtomicFileSet.ensureDirectory(policiesDirectory)
        return try await FileLock.withExclusiveLock(at: policyPath(registration.clientId) + ".push.lock") {
            guard let record = try policyRecord(clientId: registration.clientId), record.isPending else {
                return false
            }
            try checkHandler(registration)
            let url = try policyURL(record.policy, clientId: record.clientId, clientScheme: registration.scheme)
            // Marked sent before it goes: the app's acknowledgement may come back before the
            // opener returns, and only a policy that went out can be acknowledged.
            try updatePolicyRecord(record.clientId) { current in
                guard var current else { return record }
                if current.policy.sequence == record.policy.sequence { current.sent = Date() }
                return current
            }
            progress("opening \(url)")
            do {
                try await open(url, registration)
            } catch {
                guard let now = try policyRecord(clientId: registration.clientId), now.policy == record.policy,
                    !now.isPending
                else { throw error }
                return false
            }
            return true
        }
    }

    /// The URL that carries `policy` to the client `clientId` at `clientScheme`, signed by this
    /// provider at `time`.
    public func policyURL(_ policy: ClientPolicy, clientId: ClientID, clientScheme: URLScheme, time: Date = Date())
        throws -> String
    {
        try PolicyNotice(client: clientId, policy: policy, time: Int64(time.timeIntervalSince1970))
            .signed(with: try signingKey(), scheme: clientScheme).url(scheme: clientScheme)
    }

    /// Refuses to send anything to a client whose policy is not `authorized`.
    func checkAuthorized(_ registration: ClientRegistration) throws {
        guard let record = try policyRecord(clientId: registration.clientId) else { return }
        guard record.policy.state == .authorized else {
            throw DCError(
                .notAuthorized, "the client '\(registration.clientId)' is \(record.policy.state)",
                subject: registration.scheme.text,
                hint: record.policy.state == .retired ? "a retired client is set up afresh and paired again" : nil,
                remedy: record.policy.state == .retired ? nil : .authorizeFirst(clientScheme: registration.scheme))
        }
    }

    /// Handles an app's signed acknowledgement (`<provider-scheme>:/ack?…`): authenticates it like
    /// any client message (``authenticate(_:now:)``), and records it if it answers a policy this
    /// provider sent and is newer than the one recorded. The acknowledgement of a `retired` policy
    /// ends the pairing: the client must be set up afresh and paired again.
    public func handleAcknowledgement(_ message: Acknowledgement, now: Date = Date()) throws -> PolicyRecord {
        let (clientId, sequence, subject, state, text, time) = (
            message.client, message.sequence, message.subject, message.state, message.message, message.time
        )
        _ = try authenticate(message, now: now)
        let acknowledgement = PolicyAcknowledgement(
            sequence: sequence, state: state, message: text, time: Date(timeIntervalSince1970: TimeInterval(time)))
        let record = try updatePolicyRecord(clientId) { old in
            guard var record = old, sequence <= record.policy.sequence else {
                throw DCError(
                    .refusedMessage, "an acknowledgement of a policy this provider never sent", subject: clientId.text,
                    hint: "nothing was recorded")
            }
            // An app must handle its authorization state: `unsupported` is no answer to it.
            if subject == .authState && state == .unsupported {
                throw DCError(
                    .refusedMessage, "an acknowledgement of the authorization state as unsupported",
                    subject: clientId.text, hint: "nothing was recorded")
            }
            if let previous = record.acknowledgements[subject.rawValue],
                (previous.sequence, previous.time) >= (sequence, acknowledgement.time)
            {
                throw DCError(
                    .refusedMessage, "a replayed acknowledgement (not newer than the one recorded)",
                    subject: clientId.text,
                    hint: "nothing was recorded")
            }
            record.acknowledgements[subject.rawValue] = acknowledgement
            return record
        }
        if subject == .authState, record.policy.state == .retired, sequence == record.policy.sequence {
            unlink(pairingPath(clientId))
        }
        return record
    }
}
