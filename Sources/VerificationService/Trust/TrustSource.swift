import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation

/// Where a verifier fetches its trust (`dcverify serve --trust-url`): the URL of a directory the
/// provider publishes into (`dcprovision publish --out-dir`), checked once where it enters.
///
/// Only `http` and `https` with a host, no user name or password, no query and no fragment; the
/// path ends with `/` (one is added). ``listURL`` is the signed list in it, `trust.jws`.
public struct TrustURL: Sendable, Hashable, CustomStringConvertible {
    /// The directory's URL, ending with `/`.
    public let text: String
    /// Whether the scheme is `https`.
    public let isHTTPS: Bool

    /// Checks `text`. Throws `DCError.Code.usage` naming the rule broken.
    public init(parsing text: String) throws {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty
        else {
            throw DCError(
                .usage, "'\(text.escapingControlCharacters)' is not an http or https URL with a host",
                remedy: .givePublishedTrustURL)
        }
        guard components.user == nil, components.password == nil, components.query == nil,
            components.fragment == nil
        else {
            throw DCError(.usage, "the trust URL must carry no user name, password, query or fragment")
        }
        self.text = text.hasSuffix("/") ? text : text + "/"
        self.isHTTPS = scheme == "https"
    }

    /// The signed list's URL: `trust.jws` in the directory.
    public var listURL: String { text + "trust.jws" }

    /// The URL of the key that signs the lists, `trust-key.jwks` in the directory: what a verifier
    /// given no key of its own takes, over TLS only.
    public var keyURL: String { text + "trust-key.jwks" }

    /// The URL, as given (with its final `/`).
    public var description: String { text }
}

/// How a verifier that fetches its trust runs: where, with which key, and how stale it may get.
public struct TrustSourceSettings: Sendable {
    /// The published directory.
    public var url: TrustURL
    /// The key that must sign every list (`--trust-key`).
    public var key: TokenPublicKey
    /// The staleness bound (`--trust-max-age`): past it every token answers 101.
    public var maximumAge: Duration
    /// The shortest time between two fetches, whatever `Cache-Control: max-age` says.
    public var minimumInterval: Duration = .seconds(1)
    /// The longest time between two fetches: five minutes, and never more than half the staleness bound.
    public var maximumInterval: Duration = .seconds(300)
    /// The time between two fetches when the answer says no `max-age`.
    public var defaultInterval: Duration = .seconds(60)
    /// The time one fetch may take.
    public var requestTimeout: Duration = .seconds(10)
    /// A PEM file of the certificate authorities that authenticate an `https` source (nil: the
    /// system's, `/etc/ssl/certs`).
    public var certificateAuthorities: String?

    /// Fetches from `url` lists signed by `key`, stale past `maximumAge`.
    public init(url: TrustURL, key: TokenPublicKey, maximumAge: Duration) {
        self.url = url
        self.key = key
        self.maximumAge = maximumAge
    }

    /// The default staleness bound: 15 minutes.
    public static let defaultMaximumAge: Duration = .seconds(900)

    /// The time until the next fetch after an answer that said `max-age=seconds` (nil: none),
    /// within ``minimumInterval`` and the smaller of ``maximumInterval`` and half ``maximumAge``.
    public func interval(maxAge seconds: Int?) -> Duration {
        let ceiling = min(maximumInterval, maximumAge / 2)
        let asked = seconds.map { Duration.seconds($0) } ?? defaultInterval
        return max(minimumInterval, min(asked, ceiling))
    }

    /// The `max-age` of a `Cache-Control` value, if it has one (`no-cache`, `no-store`: 0).
    public static func maxAge(cacheControl value: String) -> Int? {
        var result: Int?
        for directive in value.lowercased().split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            switch parts.first {
            case "max-age" where parts.count == 2:
                result = Int(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\" "))).map { max(0, $0) }
            case "no-cache", "no-store": return 0
            default: continue
            }
        }
        return result
    }

    /// Reads the key that signs the lists: a JWKS with exactly one key (`trust-key.jwks`, which
    /// `dcprovision publish` writes).
    public static func trustKey(at path: String) throws -> TokenPublicKey {
        let set = try TrustedIssuers.load(from: path)
        guard set.keys.count == 1, let key = set.keys.values.first else {
            throw DCError(
                .invalid, "the trust key file holds \(set.keys.count) keys, not one", subject: path,
                remedy: .givePublishedTrustKey)
        }
        return key
    }
}

extension TrustSourceSettings {
    /// Settings for `url` with the default staleness bound, trusting the certificate authorities in
    /// `authorities` (nil: the system's), and whose key is the one in `keyFile` or, without one,
    /// `trust-key.jwks` taken from `url` over TLS (``TrustFetcher/fetchKey(from:authorities:timeout:)``).
    /// Then the server's certificate vouched for the key once; from then on the key alone decides
    /// which lists are trusted, so a later change of server or certificate changes nothing.
    public static func resolving(url: TrustURL, keyFile: String?, authorities: String?) async throws -> Self {
        let key =
            if let keyFile {
                try trustKey(at: keyFile)
            } else {
                try await TrustFetcher.fetchKey(from: url, authorities: authorities)
            }
        var settings = Self(url: url, key: key, maximumAge: defaultMaximumAge)
        settings.certificateAuthorities = authorities
        return settings
    }
}

extension DCError.Code {
    /// The key that signs the trust lists could not be taken from the trust URL over TLS: the
    /// server is down, its certificate is not trusted, or the file is not one key (exit 69).
    public static let trustKeyUnavailable = Self("trustKeyUnavailable", .unavailable)
}
