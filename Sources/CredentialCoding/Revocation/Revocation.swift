import DerivedCredentials
import FoundationEssentials

/// Why a certificate was revoked: the RFC 5280 `CRLReason` values that OpenSSL's CA database
/// (`index.txt`) can hold, under the names `openssl ca -crl_reason` uses.
public enum RevocationReason: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// No reason given (code 0).
    case unspecified
    /// The private key was compromised (code 1).
    case keyCompromise
    /// The CA's key was compromised (code 2).
    case caCompromise = "CACompromise"
    /// The subject's name or affiliation changed (code 3).
    case affiliationChanged
    /// A new certificate replaced this one (code 4).
    case superseded
    /// The certificate is no longer needed, such as when its card was terminated (code 5).
    case cessationOfOperation

    /// The `CRLReason` code.
    public var code: Int32 {
        switch self {
        case .unspecified: 0
        case .keyCompromise: 1
        case .caCompromise: 2
        case .affiliationChanged: 3
        case .superseded: 4
        case .cessationOfOperation: 5
        }
    }

    /// The reason with `code`, or nil for a code outside this set.
    public init?(code: Int32) {
        guard let reason = Self.allCases.first(where: { $0.code == code }) else { return nil }
        self = reason
    }

    /// The name, as `openssl crl -text` and `openssl ca` write it.
    public var description: String { rawValue }
}

/// What is known about whether a certificate was revoked.
public enum RevocationStatus: Sendable, Hashable, CustomStringConvertible {
    /// A CRL or OCSP response, checked, says the certificate is not revoked.
    case good(source: String)
    /// A CRL or OCSP response, checked, says it was revoked at `date`.
    case revoked(reason: RevocationReason?, date: Date, source: String)
    /// Nothing usable said either: no source, no answer, or an answer that was refused (malformed,
    /// badly signed, stale, from another issuer). Never treated as good.
    case unknown(String)

    /// Whether a source answered (good or revoked), rather than nothing being known.
    public var isKnown: Bool {
        if case .unknown = self { false } else { true }
    }

    /// `good (…)`, `revoked … (…)` or `not checked: …`, for people.
    public var description: String {
        switch self {
        case .good(let source): "good (\(source))"
        case .revoked(let reason, let date, let source):
            "revoked \(date.formatted(.iso8601))\(reason.map { ", \($0)" } ?? "") (\(source))"
        case .unknown(let why): "not checked: \(why)"
        }
    }
}

/// Where revocation status comes from: CRL files, OCSP responders, and the responders that the
/// certificates themselves name (authorityInfoAccess).
public struct RevocationSources: Sendable {
    /// CRLs at hand; one whose issuer is not the certificate's is not used for it.
    public var crls: [CertificateRevocationList]
    /// OCSP responders to ask (`http://` URLs), before any the certificate names.
    public var ocspURLs: [String]
    /// Whether to ask the OCSP responders named in each certificate's authorityInfoAccess.
    public var useCertificateURLs: Bool
    /// How long one OCSP exchange may take.
    public var timeout: Duration

    /// Sources as given; by default none, so every status is unknown.
    public init(
        crls: [CertificateRevocationList] = [], ocspURLs: [String] = [], useCertificateURLs: Bool = false,
        timeout: Duration = .seconds(10)
    ) {
        self.crls = crls
        self.ocspURLs = ocspURLs
        self.useCertificateURLs = useCertificateURLs
        self.timeout = timeout
    }

    /// Whether `url` may be used for revocation: `http://`, printable ASCII without spaces,
    /// commas or quotes, at most 2,048 characters.
    public static func isAcceptable(url: String) -> Bool { RevocationURL.isAcceptable(url) }

    /// Whether any source is given at all.
    public var isEmpty: Bool { crls.isEmpty && ocspURLs.isEmpty && !useCertificateURLs }
}

/// The one rule for URLs that revocation goes to: plain `http://` (OCSP and CRLs are signed, and
/// RFC 6960 and RFC 5280 use HTTP), printable ASCII without spaces, commas or quotes (they travel
/// in OpenSSL's extension syntax), at most 2,048 characters.
enum RevocationURL {
    static func isAcceptable(_ url: String) -> Bool {
        guard url.utf8.count <= 2048, url.lowercased().hasPrefix("http://"), url.utf8.count > 7 else { return false }
        return url.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: "\"") }
    }
}
