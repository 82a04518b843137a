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
    public static let identity = [challenge, server, userID, appID, containerID, tokenVersion, creationTime]
}

extension HTTPField.Name {
    // HTTPTypes keeps the case a name was made with, and NIO's HTTP/1 encoder writes it so.
    static let gdAuthToken = constant(VerificationHeaders.authToken)
    static let gdResponseCode = constant(VerificationHeaders.responseCode)
    static let gdChallenge = constant(VerificationHeaders.challenge)
    static let gdServer = constant(VerificationHeaders.server)
    static let gdUserID = constant(VerificationHeaders.userID)
    static let gdAppID = constant(VerificationHeaders.appID)
    static let gdContainerID = constant(VerificationHeaders.containerID)
    static let gdTokenVersion = constant(VerificationHeaders.tokenVersion)
    static let gdCreationTime = constant(VerificationHeaders.creationTime)

    /// The field name of one of the constants above.
    private static func constant(_ name: String) -> Self {
        Self(name)!  // cannot fail: the constants above are ASCII header tokens (every verify test sends them)
    }
}
