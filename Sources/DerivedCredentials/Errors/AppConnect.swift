/// The send errors of the AppConnect derived-credential API (`ACDerivedCredentialError`).
public enum AppConnectSendError: Int, Sendable, CaseIterable {
    case unknown = -1000
    case invalid = -1001
    /// The client's secure services are locked: wait for the availability notification and retry.
    case serviceUnavailable = -1002
    case missingClient = -1003
    case oldClient = -1004
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
