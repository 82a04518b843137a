import ArgumentParser
import CredentialCoding
import DerivedCredentials
import Foundation

/// `--crl FILE`, `--ocsp URL|aia` and `--allow-unchecked-revocation`: where a command learns
/// whether certificates were revoked, and whether it may go on without knowing. The same flags on
/// every tool (docs/CLI.md, "Revocation").
public struct RevocationOptions: ParsableArguments {
    private static let crlHelp = ArgumentHelp(
        "A CRL (PEM or DER) to check certificates against (repeatable).", valueName: "file")
    private static let ocspHelp = ArgumentHelp(
        "An OCSP responder (http://) to ask, or aia for those the certificates name (repeatable).", valueName: "url")

    /// `--crl FILE`: CRL files (PEM or DER), as given.
    @Option(name: .customLong("crl"), help: crlHelp) public var crls: [String] = []
    /// `--ocsp URL|aia`: OCSP responder URLs, and `aia` for the ones the certificates name.
    @Option(name: .customLong("ocsp"), help: ocspHelp) public var ocsp: [OCSPSourceArgument] = []

    /// Whether a certificate whose status cannot be had may still be used, with a warning.
    @Flag(help: "Go on (with a warning) when a certificate's revocation status cannot be checked.")
    public var allowUncheckedRevocation = false

    /// Options as parsed.
    public init() {}

    /// Whether any source was named.
    public var hasSources: Bool { !crls.isEmpty || !ocsp.isEmpty }

    /// The options as provider options (`crl`, `ocsp`, `allow-unchecked-revocation`), for a
    /// source that checks a card's certificate itself; CRL paths are passed as given.
    public var providerOptions: [String: [String]] {
        var options: [String: [String]] = [:]
        if !crls.isEmpty { options["crl"] = crls }
        if !ocsp.isEmpty { options["ocsp"] = ocsp.map(\.text) }
        if allowUncheckedRevocation { options["allow-unchecked-revocation"] = ["true"] }
        return options
    }

    /// The policy these options describe, or nil when no source is named (nothing is checked).
    /// CRL files are read now: one that cannot be read is an error (exit 65), not a status.
    public func policy(resolvingAgainst directory: String? = nil) throws -> RevocationPolicy? {
        guard hasSources else { return nil }
        return try RevocationPolicy(
            crlFiles: crls, ocsp: ocsp.map(\.text), allowsUnchecked: allowUncheckedRevocation, directory: directory,
            defaultToCertificateURLs: false)
    }
}
