import DerivedCredentials

/// The schemes the tests' clients and providers are set up with, typed as the libraries take them.
extension URLScheme {
    /// `org.example.dcclient`: the managed client's scheme in the tests' worlds.
    public static let exampleClient: Self = example("org.example.dcclient")
    /// `org.example.provider`: the provider's scheme in the tests' worlds.
    public static let exampleProvider: Self = example("org.example.provider")
}

/// The client id the tests' clients are set up with.
extension ClientID {
    /// `dcclient`: the managed client's id in the tests' worlds.
    public static let exampleClient: Self = example("dcclient")
}

/// A value of the tests' own, which its rule accepts (a fixture that broke it is a bug of the tests).
private func example<ID: Identifier>(_ text: String) -> ID {
    guard let value = ID(validating: text) else { preconditionFailure("'\(text)' breaks the rule of \(ID.kind)") }
    return value
}
