import ArgumentParser
import CredentialCoding
import DerivedCredentials
import Logging
import SystemSupport

// The values options take, checked by their one rule as the command line is parsed: a command's
// `run()` holds them typed, and a value that breaks the rule is one line and exit 64 (`Tool`),
// `The value 'X' is invalid for '--option <name>'`, with the allowed words where there is a list.

/// `authentication`, `signing`, `encryption` or `escrow`, in any case, as every tag is read.
extension CredentialTag: ExpressibleByArgument {
    /// The tag `argument` names, case-insensitively; nil for any other word.
    public init?(argument: String) { self.init(wireName: argument) }
}

/// `p256`, `p384`, `rsa2048` or `rsa3072` (`--key-algorithm`).
extension KeyAlgorithm: ExpressibleByArgument {}

/// RFC 5280's reason names (`--reason`), as a CRL entry spells them.
extension RevocationReason: ExpressibleByArgument {}

/// `der` or `pem`: how a credential's files are written (`--format`).
extension ConversionOutputs.Format: ExpressibleByArgument {}

/// `--log-level`: one of swift-log's levels, `trace` … `critical`. (A wrapper: swift-log's type
/// cannot take arguments itself without a retroactive conformance.)
public struct LogLevelArgument: ExpressibleByArgument, Sendable, Hashable {
    /// The level.
    public let level: Logger.Level

    /// The level `argument` names; nil for any other word.
    public init?(argument: String) {
        guard let level = Logger.Level(rawValue: argument) else { return nil }
        self.level = level
    }

    /// The levels, most verbose first.
    public static var allValueStrings: [String] { Logger.Level.allCases.map(\.rawValue) }

    /// A default as help shows it: the level's name.
    public var defaultValueDescription: String { level.rawValue }
}

/// `HOST:PORT`, `[IPv6]:PORT` or `:PORT` (`--listen`), by `ListenAddress(parsing:)`.
extension ListenAddress: ExpressibleByArgument {
    /// The address `argument` spells; nil when it is not `HOST:PORT` with a port from 0 to 65535.
    public init?(argument: String) {
        guard let address = try? ListenAddress(parsing: argument) else { return nil }
        self = address
    }

    /// A default as help shows it: `HOST:PORT`.
    public var defaultValueDescription: String { description }
}

/// A URL that revocation goes to (`--ocsp-url`, `--crl-url`, `--ocsp`): `http://`, printable
/// ASCII without spaces, commas or quotes, at most 2,048 characters (`RevocationSources`' rule).
public struct HTTPURLArgument: ExpressibleByArgument, Sendable, Hashable {
    /// The URL as it was written.
    public let text: String

    /// The URL `argument` spells; nil when revocation may not go there.
    public init?(argument: String) {
        guard RevocationSources.isAcceptable(url: argument) else { return nil }
        text = argument
    }
}

/// `--ocsp URL|aia`: an OCSP responder to ask, or `aia` for the ones the certificates name.
public enum OCSPSourceArgument: ExpressibleByArgument, Sendable, Hashable {
    /// `aia`: the responders each certificate names (authorityInfoAccess).
    case certificateURLs
    /// A responder's `http://` URL.
    case responder(HTTPURLArgument)

    /// `aia`, or a responder's URL; nil for anything else.
    public init?(argument: String) {
        if argument == "aia" {
            self = .certificateURLs
        } else if let url = HTTPURLArgument(argument: argument) {
            self = .responder(url)
        } else {
            return nil
        }
    }

    /// The source as it was written, as `RevocationPolicy` and the providers' `ocsp` option take it.
    public var text: String {
        switch self {
        case .certificateURLs: "aia"
        case .responder(let url): url.text
        }
    }
}

/// An RFC 7512 URI of a PKCS#11 token or object (`--pkcs11`, `objects`): that it is a `pkcs11:`
/// URI is checked as it is parsed. Its grammar and attributes are the PKCS#11 provider's to judge
/// (p11-kit reads it there), and so is the refusal of a URI that carries a PIN, which never echoes
/// the URI.
public struct PKCS11URIArgument: ExpressibleByArgument, Sendable, Hashable {
    /// The URI as it was written.
    public let text: String

    /// The URI `argument` spells; nil when it does not start with `pkcs11:` (in any case).
    public init?(argument: String) {
        guard argument.prefix(7).lowercased() == "pkcs11:" else { return nil }
        text = argument
    }
}

/// `--tag TAG` (the tag of a `--pkcs12 FILE`) or, with `--pkcs11`, `--tag TAG=ID` and
/// `--tag TAG=pkcs11:URI` (the object that holds the tag's certificate): the tag is checked as
/// the command line is parsed, the object by the PKCS#11 provider.
public struct TagArgument: ExpressibleByArgument, Sendable, Hashable {
    /// The tag.
    public let tag: CredentialTag
    /// What follows the first `=`, if there is one: an object id in hex or a `pkcs11:` URI.
    public let object: String?
    /// The argument as it was written.
    public let text: String

    /// `TAG` or `TAG=OBJECT`; nil when TAG is not a tag.
    public init?(argument: String) {
        let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard let tag = CredentialTag(wireName: parts[0]) else { return nil }
        self.tag = tag
        object = parts.count == 2 ? String(parts[1]) : nil
        text = argument
    }
}

/// `--layout`: which object ids of a card hold which tag's certificate.
public enum CardLayout: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// PIV as OpenSC numbers its slots: ids 01 authentication, 02 signing, 03 encryption, and
    /// 05–09 and 10–24 (retired 82–95) escrow.
    case piv
}
