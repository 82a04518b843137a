import AuthTokens
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import SchemeHandlers

extension ManagedClient {
    /// What the client did with a URL that came to its scheme
    /// (``handle(url:allowOlder:now:forwardingOutput:send:whenHandled:)``).
    public enum HandledURL: Sendable {
        /// A delivery was handled: installed, rejected or recognised as a replay.
        case delivery(Handled)
        /// A policy was applied (and acknowledged next).
        case policy(PolicyUpdate)
        /// An auth-token delegation was kept.
        case delegation(Delegation)
    }

    /// How the provider was answered once a URL was handled.
    public enum ProviderAnswer: Sendable, Equatable {
        /// No answer was due: a delegation is kept without one, and a delivery handled before (or
        /// kept out as stale, and chosen now) was answered when it first came.
        case notDue
        /// No provider is registered to take the answer: nothing was sent.
        case noProvider
        /// The answer went to the provider: a delivery's result, or the acknowledgements of a policy.
        case sent
        /// The client is locked, so the acknowledgement of the policy could not be signed. The
        /// provider sends the policy again when the client announces availability (a retired
        /// client is erased all the same, and the provider shows the retire unacknowledged).
        case awaitsUnlock
    }

    /// What handling a URL did, and how the provider was answered.
    public struct URLOutcome: Sendable {
        /// What the client did with the URL.
        public var handled: HandledURL
        /// How the provider was answered.
        public var answer: ProviderAnswer
        /// Whether the client was erased: the policy retired it (``eraseEverything()``).
        public var erased: Bool
    }

    /// The client's scheme handler, as the reference app runs it: parses `url` once, strictly, does
    /// what it says — installs a delivery (``handleDelivery(_:validator:allowOlder:now:)``), applies
    /// a policy (``handlePolicy(_:now:)``) or keeps a delegation (``handleDelegation(_:now:)``) —
    /// tells `whenHandled` what it did, then answers the provider:
    ///
    /// - a delivery's result URL goes to the provider; a delivery kept out as older than the
    ///   installed credential is then refused (``Handled/staleRefusal``: `refusedMessage`, exit 77);
    /// - a policy is acknowledged as an app that supports secure file I/O and applies every state
    ///   does (the secure file I/O policy when it made the client ready or came again, then the
    ///   authorization state, ``authStateApplied(_:message:now:send:)``); a locked client cannot
    ///   sign the acknowledgement, which then waits; a retired client is erased, acknowledged or
    ///   not.
    ///
    /// A message meant for the provider is refused. The answers are opened with `send`; by default
    /// with the handler the provider registered for the client's provider scheme, launched as a
    /// process (a program that hijacked the scheme is refused), its standard output passed on when
    /// `forwardingOutput` and its standard error always; with no provider registered nothing is sent.
    @discardableResult
    public func handle(
        url: String, allowOlder: Bool = false, now: Date = Date(), forwardingOutput: Bool = true,
        send: (@Sendable (String) async throws -> Void)? = nil, whenHandled: (HandledURL) -> Void = { _ in }
    ) async throws -> URLOutcome {
        let handled = try handleMessage(url, allowOlder: allowOlder, now: now)
        whenHandled(handled)
        switch handled {
        case .delegation:
            return URLOutcome(handled: handled, answer: .notDue, erased: false)
        case .delivery(let delivery):
            var answer = ProviderAnswer.notDue
            if let result = delivery.resultURL {
                if let send = try send ?? providerHandler(forwardingOutput: forwardingOutput) {
                    try await send(result)
                    answer = .sent
                } else {
                    answer = .noProvider
                }
            }
            // Kept out as stale: the same refusal whenever the same URL comes, once the provider
            // has its answer.
            if let refusal = delivery.staleRefusal { throw refusal }
            return URLOutcome(handled: handled, answer: answer, erased: false)
        case .policy(let update):
            let answer = try await acknowledge(
                update, now: now, send: try send ?? providerHandler(forwardingOutput: forwardingOutput))
            return URLOutcome(handled: handled, answer: answer, erased: update.policy.state == .retired)
        }
    }

    /// `url` parsed once and handled as what it is; nothing is answered yet.
    private func handleMessage(_ url: String, allowOlder: Bool, now: Date) throws -> HandledURL {
        let config = try config()
        let message = try DeliveryMessage.parse(url, scheme: config.scheme)
        switch message {
        case .deliver(let notice):
            return .delivery(
                try handleDelivery(notice, config: config, validator: nil, allowOlder: allowOlder, now: now))
        case .policy(let notice):
            return .policy(try handlePolicy(notice, url: url, config: config, now: now))
        case .delegation(let notice):
            return .delegation(try handleDelegation(notice, config: config, now: now))
        case .new, .available, .result, .acknowledgement, .identityRequest:
            throw DCError(
                .invalid, "a \(message.path) URL sent to the client",
                hint: "requests and results go to the provider's scheme: check which scheme each program registered")
        }
    }

    /// Acknowledges the policy `update` applied, with `send` (nil: no provider is registered, and
    /// nothing is sent); a retired client is erased either way (``authStateApplied(_:message:now:send:)``).
    private func acknowledge(
        _ update: PolicyUpdate, now: Date, send: (@Sendable (String) async throws -> Void)?
    ) async throws -> ProviderAnswer {
        let policy = update.policy
        guard let send else {
            if policy.state == .retired { try eraseEverything() }
            return .noProvider
        }
        do {
            if policy.state != .retired, update.becameReady || update.repeated {
                try await secureFileIOPolicyApplied(.applied, now: now, send: send)
            }
            try await authStateApplied(.applied, now: now, send: send)
        } catch DCError.Code.serviceUnavailable {
            // Locked: the acknowledgement cannot be signed now (a retired client was erased before
            // authStateApplied threw). The provider sends the policy again when the client
            // announces availability.
            return .awaitsUnlock
        }
        return .sent
    }

    /// What opens an answer with the handler the provider registered for the client's provider
    /// scheme (refusing any other program that claims it), passing its standard output on when
    /// `forwardingOutput`; nil when no provider is registered.
    private func providerHandler(forwardingOutput: Bool) throws -> (@Sendable (String) async throws -> Void)? {
        guard let scheme = providerScheme,
            let provider = try Registrations.read(
                ProviderRegistration.self, at: locations.providerRegistration(scheme))
        else { return nil }
        return { url in
            try await SchemeHandlers().openForwardingOutput(
                url, scheme: scheme, expectedExecutable: provider.executable, passingStandardOutput: forwardingOutput)
        }
    }
}
