import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// Any of the eight messages of the conversation, as URLs (each declared once as a ``URLMessage``).
/// They are world-readable (a launched handler's argv is in `/proc/PID/cmdline`), so they carry
/// only a version, single-use ids, a time or sequence number, a status, and a digest, MAC or
/// signature — never a secret.
///
/// Parsing is strict: `scheme:/path` with no authority, the exact parameters in the declared
/// order, each once, from fixed character sets, under a length cap; anything else is refused.
public enum DeliveryMessage: Sendable, Equatable {
    /// A client asks its provider for a credential.
    case new(CredentialRequest)
    /// A client's secure services became available; queued deliveries to it may go.
    case available(AvailabilityNotice)
    /// A provider tells a client that a sealed payload is in its spool.
    case deliver(DeliveryNotice)
    /// A client answers a delivery.
    case result(DeliveryResult)
    /// A provider gives a client its policy.
    case policy(PolicyNotice)
    /// An app acknowledges a policy.
    case acknowledgement(Acknowledgement)
    /// A provider tells a client that an auth-token delegation is in its spool.
    case delegation(DelegationNotice)
    /// A client asks for an identity JWT.
    case identityRequest(IdentityRequest)

    /// The protocol version every URL carries as `v=2`; any other is refused.
    public static let version = "2"
    /// The longest URL parsed, in UTF-8 bytes; longer ones are refused before anything else is read.
    public static let maximumLength = 1024
    /// What every signature starts with, so that no signature made for another purpose can pass.
    public static let signingContext = "derived-credentials delivery v2\n"

    /// The message types by path: the one table parsing dispatches on.
    static let kinds: [String: @Sendable (URLMessageCoder.Split, URLScheme) throws -> DeliveryMessage] = [
        CredentialRequest.path: { .new(try URLMessageCoder.decode(CredentialRequest.self, $0, scheme: $1)) },
        AvailabilityNotice.path: { .available(try URLMessageCoder.decode(AvailabilityNotice.self, $0, scheme: $1)) },
        DeliveryNotice.path: { .deliver(try URLMessageCoder.decode(DeliveryNotice.self, $0, scheme: $1)) },
        DeliveryResult.path: { .result(try URLMessageCoder.decode(DeliveryResult.self, $0, scheme: $1)) },
        PolicyNotice.path: { .policy(try URLMessageCoder.decode(PolicyNotice.self, $0, scheme: $1)) },
        Acknowledgement.path: { .acknowledgement(try URLMessageCoder.decode(Acknowledgement.self, $0, scheme: $1)) },
        DelegationNotice.path: { .delegation(try URLMessageCoder.decode(DelegationNotice.self, $0, scheme: $1)) },
        IdentityRequest.path: {
            .identityRequest(try URLMessageCoder.decode(IdentityRequest.self, $0, scheme: $1))
        },
    ]

    /// The message inside.
    public var message: any URLMessage {
        switch self {
        case .new(let message): message
        case .available(let message): message
        case .deliver(let message): message
        case .result(let message): message
        case .policy(let message): message
        case .acknowledgement(let message): message
        case .delegation(let message): message
        case .identityRequest(let message): message
        }
    }

    /// The URL path without its slash: `new`, `available`, `deliver`, `result`, `policy`, `ack`,
    /// `delegation` or `jwt`.
    public var path: String { type(of: message).path }

    /// `scheme:/path?k=v&…` (RFC 3986; every value is from an unreserved character set).
    public func url(scheme: URLScheme) -> String { message.url(scheme: scheme) }

    /// Parses a URL addressed to `scheme`, strictly: whichever message its path names.
    public static func parse(_ text: String, scheme: URLScheme) throws -> DeliveryMessage {
        let url = try URLMessageCoder.split(text, scheme: scheme)
        guard let kind = kinds[url.path] else {
            throw URLMessageCoder.refuse("unknown path '\(url.path.escapingControlCharacters)'")
        }
        return try kind(url, scheme)
    }
}
