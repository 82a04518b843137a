/// The send errors of the AppConnect derived-credential API (`ACDerivedCredentialError`).
public enum AppConnectSendError: Int, Sendable, CaseIterable {
    /// A failure none of the other values describes.
    case unknown = -1000
    /// The credential or the request is not valid.
    case invalid = -1001
    /// The client's secure services are locked: wait for the availability notification and retry.
    case serviceUnavailable = -1002
    /// No managed client is installed.
    case missingClient = -1003
    /// The managed client is too old for derived credentials.
    case oldClient = -1004
    /// The managed client is installed but not ready to take a credential.
    case notReady = -1005
}

/// Whether the managed client is installed and supports derived credentials
/// (`ACDerivedCredentialSupport`).
public enum ClientSupport: Int, Sendable, CaseIterable, Codable {
    /// The client is installed and supports derived credentials.
    case present = 0
    /// The client is installed but too old.
    case oldClient = 1
    /// No client is installed.
    case missingClient = 2
}
