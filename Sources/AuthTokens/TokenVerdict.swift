import FoundationEssentials

/// What a verification service answers about one auth token: the response code and its text
/// (`100 OK` for a genuine token), and the identity it proves only when it is genuine.
public struct TokenVerdict: Sendable, Equatable {
    /// Why a token is not accepted; each has its own response code.
    public enum Failure: Int, Sendable, Equatable {
        /// Malformed, signed by a key nobody trusts, or altered.
        case invalid = 101
        /// Outside its validity period (or its delegation's).
        case expired = 102
        /// Its issuing key or delegation was revoked, or its client retired.
        case revoked = 103

        /// The text after the code in `X-Good-GD-AuthResponseCode`.
        public var text: String {
            switch self {
            case .invalid: "Invalid Token"
            case .expired: "Expired Token"
            case .revoked: "Revoked"
            }
        }
    }

    /// What a genuine token proves.
    public struct Identity: Sendable, Equatable {
        /// The challenge the app server chose, as the client bound it into the token.
        public var challenge: String
        /// The server name the client named (may be empty).
        public var serverName: String
        /// The user the provider issued the client's delegation for.
        public var userID: String
        /// The managed app's id.
        public var appID: String
        /// The app's container (one installation of it).
        public var containerID: String
        /// The token format's version.
        public var version: Int
        /// When the client made the token, in seconds since 1970.
        public var creationTime: Int64

        /// An identity from its parts.
        public init(
            challenge: String, serverName: String, userID: String, appID: String, containerID: String, version: Int,
            creationTime: Int64
        ) {
            self.challenge = challenge
            self.serverName = serverName
            self.userID = userID
            self.appID = appID
            self.containerID = containerID
            self.version = version
            self.creationTime = creationTime
        }
    }

    /// The identity, or why there is none.
    public var outcome: Result<Identity, FailureReason>

    /// A failure and a reason for logs (never the token itself).
    public struct FailureReason: Error, Sendable, Equatable {
        /// The response code.
        public var failure: Failure
        /// Why, for the service's log.
        public var reason: String

        /// A failure with its reason.
        public init(_ failure: Failure, _ reason: String) {
            self.failure = failure
            self.reason = reason
        }
    }

    /// The verdict `outcome`.
    public init(_ outcome: Result<Identity, FailureReason>) { self.outcome = outcome }

    /// The identity, when the token is genuine.
    public var identity: Identity? { try? outcome.get() }

    /// Why the token is refused, when it is.
    public var failureReason: FailureReason? {
        guard case .failure(let reason) = outcome else { return nil }
        return reason
    }

    /// `X-Good-GD-AuthResponseCode`: always digits, a space and text, as existing servers parse it.
    public var responseCode: String {
        switch outcome {
        case .success: "100 OK"
        case .failure(let reason): "\(reason.failure.rawValue) \(reason.failure.text)"
        }
    }
}

/// Anything that can judge an auth token: the service depends on this, not on one verifier.
public protocol TokenVerifying: Sendable {
    /// The verdict on `token` at `now`. Must not consume the token: the same token at the same
    /// time gets the same verdict.
    func verify(_ token: String, now: Date) -> TokenVerdict

    /// Whether ``verify(_:now:)`` only computes, from what is already in memory: no waiting on
    /// the network, a lock held for long or another service, so that a server may call it on the
    /// thread that serves its connections. False unless a verifier says so.
    var verifiesWithoutWaiting: Bool { get }
}

extension TokenVerifying {
    /// False: a verifier that may wait is called where waiting does no harm.
    public var verifiesWithoutWaiting: Bool { false }
}
