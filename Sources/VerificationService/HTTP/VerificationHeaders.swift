import AuthTokens
import HTTPTypes

/// The header names of the verification protocol, exactly as application servers already parse
/// them (they compare names case-sensitively, so the case on the wire matters).
public enum VerificationHeaders {
    /// The request header that carries the token.
    public static let authToken = "X-Good-GD-AuthToken"
    /// The answer: `100 OK` for a genuine token, else another code and its text.
    public static let responseCode = "X-Good-GD-AuthResponseCode"
    /// The challenge bound into a genuine token.
    public static let challenge = "X-Good-GD-AuthChallenge"
    /// The server name bound into a genuine token.
    public static let server = "X-Good-GD-Server"
    /// The user a genuine token was issued for.
    public static let userID = "X-Good-GD-UserID"
    /// The app that made a genuine token.
    public static let appID = "X-Good-GD-AppID"
    /// The app's container (installation).
    public static let containerID = "X-Good-GD-ContainerID"
    /// The token format's version.
    public static let tokenVersion = "X-Good-GD-AuthTokenVersion"
    /// When the client made the token, in Unix seconds.
    public static let creationTime = "X-Good-GD-AuthTokenCreationTime"

    /// The identity headers, sent only with `100 OK`, in the order they are written.
    public static let identity = identityFields.map(\.name)

    /// Each identity header with what it says of a genuine token's identity, in the order they
    /// are written: the one list that both ``identity`` and the answer (`VerificationAnswer`) read,
    /// so that a header is added in one place.
    static let identityFields: [IdentityField] = [
        IdentityField(challenge) { $0.challenge },
        IdentityField(server) { $0.serverName },
        IdentityField(userID) { $0.userID },
        IdentityField(appID) { $0.appID },
        IdentityField(containerID) { $0.containerID },
        IdentityField(tokenVersion) { String($0.version) },
        IdentityField(creationTime) { String($0.creationTime) },
    ]

    /// One identity header: its name, made once as an `HTTPField.Name`, and its value for a
    /// genuine token's identity.
    struct IdentityField: Sendable {
        /// The header name, as ``VerificationHeaders`` spells it.
        let name: String
        /// The same name for HTTPTypes, which keeps the case it was made with (NIO's HTTP/1
        /// encoder writes it so).
        let field: HTTPField.Name
        /// The header's value for `identity`.
        let value: @Sendable (TokenVerdict.Identity) -> String

        init(_ name: String, _ value: @escaping @Sendable (TokenVerdict.Identity) -> String) {
            self.name = name
            self.field = .constant(name)
            self.value = value
        }
    }
}

extension HTTPField.Name {
    // HTTPTypes keeps the case a name was made with, and NIO's HTTP/1 encoder writes it so.
    static let gdAuthToken = constant(VerificationHeaders.authToken)
    static let gdResponseCode = constant(VerificationHeaders.responseCode)

    /// The field name of one of the constants above or of an identity header.
    static func constant(_ name: String) -> Self {
        Self(name)!  // cannot fail: the constants above are ASCII header tokens (every verify test sends them)
    }
}
