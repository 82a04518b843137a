import CredentialDelivery
import DerivedCredentials
import FoundationEssentials

/// Something the app should react to (AppConnect's delegate callbacks, as one sequence).
public enum ManagedClientEvent: Sendable, Equatable {
    /// The client has its provider's policy: the policy-dependent properties have answers now.
    case ready
    /// The authorization state or only its message changed; show the message when not authorized,
    /// then acknowledge (``ManagedClient/authStateApplied(_:message:now:send:)``).
    case authStateChanged(AuthState, message: String)
    /// Secure services became available or unavailable (unlock, auto-lock, authorization).
    case secureServicesAvailabilityChanged(SecureServicesAvailability)
    /// The secure file I/O policy is in force (always `required`); acknowledge it
    /// (``ManagedClient/secureFileIOPolicyApplied(_:message:now:send:)``).
    case secureFileIOPolicyChanged(SecureFileIOPolicy)
    /// A credential was delivered and installed, as delivery number `sequence`.
    case credentialDelivered(sequence: UInt64)
}

extension ManagedClient {
    /// What the events are computed from.
    struct Snapshot: Equatable {
        var policy: ClientPolicy?
        var availability: SecureServicesAvailability
        var installedSequence: UInt64?

        init(_ client: ManagedClient) {
            // One read of the policy per look: availability is ready ∧ authorized ∧ unlocked.
            policy = try? client.currentPolicy()
            availability = policy?.state == .authorized && client.isUnlocked ? .available : .unavailable
            installedSequence = client.installedSequence
        }
    }

    /// The events since `old`, in the order the app should handle them.
    static func events(from old: Snapshot?, to new: Snapshot) -> [ManagedClientEvent] {
        var events: [ManagedClientEvent] = []
        if let policy = new.policy, old?.policy == nil {
            events.append(.ready)
            events.append(.secureFileIOPolicyChanged(.required))
            events.append(.authStateChanged(policy.state, message: policy.message))
        } else if let policy = new.policy, let before = old?.policy,
            before.state != policy.state || before.message != policy.message
        {
            events.append(.authStateChanged(policy.state, message: policy.message))
        }
        if let old, old.availability != new.availability {
            events.append(.secureServicesAvailabilityChanged(new.availability))
        } else if old == nil, new.availability == .available {
            events.append(.secureServicesAvailabilityChanged(.available))
        }
        if let sequence = new.installedSequence, old != nil, sequence != old?.installedSequence {
            events.append(.credentialDelivered(sequence: sequence))
        }
        return events
    }

    /// The client's events, as they happen, until the consumer stops iterating. The first ones
    /// say where things stand (`ready`, the state, availability) when the client is ready already.
    /// Another process (the scheme handler, `dcclient lock`, the kernel ending the unlocked key's
    /// lifetime) changes what the client keeps, so the client looks every `interval`.
    public func events(interval: Duration = .milliseconds(200)) -> AsyncStream<ManagedClientEvent> {
        let client = self
        return AsyncStream { continuation in
            let task = Task {
                var last: Snapshot?
                while !Task.isCancelled {
                    let now = Snapshot(client)
                    if now != last {
                        for event in Self.events(from: last, to: now) { continuation.yield(event) }
                        last = now
                    }
                    try? await Task.sleep(for: interval)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
