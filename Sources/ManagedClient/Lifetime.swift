import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// Where each certificate of the installed credential stands in its lifetime, and what follows
/// from it: whether the credential may be used now, and whether a renewal is due.
///
/// The rule, in one place: a credential past its own expiration date (`Credential/expirationDate`,
/// what the provider gave it), or whose authentication or signing certificate has expired or is
/// not valid yet, is not used (``requireUsable()``, ``ManagedClient/usableCredential(now:)``); its
/// encryption and escrow certificates may have expired (old mail stays readable,
/// ``ManagedClient/decrypt(_:)``). A renewal is due when the credential's expiration date, or the
/// end of its authentication, signing or encryption certificate, falls within the window asked for.
public struct CredentialLifetime: Sendable, Codable, Hashable {
    /// Where one certificate stands.
    public enum State: String, Sendable, Codable, Hashable {
        /// Valid now, and beyond the window.
        case valid
        /// Valid now, ending within the window.
        case expiresSoon = "expires-soon"
        /// Its notAfter has passed.
        case expired
        /// Its notBefore is still to come.
        case notYetValid = "not-yet-valid"
    }

    /// One certificate of the credential.
    public struct Certificate: Sendable, Codable, Hashable {
        /// The entry it belongs to.
        public var tag: CredentialTag
        /// Its place in the escrow key history (0 newest), nil for the entry's current pair.
        public var historyIndex: Int?
        /// The subject (RFC 2253).
        public var subject: String
        /// The serial number, upper-case hex.
        public var serialNumber: String
        /// Its validity.
        public var notBefore: Date?
        /// Its validity's end.
        public var notAfter: Date?
        /// Seconds from the time of the check to notAfter (negative once it has passed).
        public var remainingSeconds: Int?
        /// Where it stands.
        public var state: State
    }

    /// When the check was made.
    public var checked: Date
    /// The renewal window, in seconds.
    public var window: TimeInterval
    /// The credential's own expiration date, as its provider gave it.
    public var expirationDate: Date
    /// Where that date stands: valid, expiring within the window, or expired (past it).
    public var credentialState: State
    /// Every certificate: the current pairs in entry order, then the key history.
    public var certificates: [Certificate]

    /// The tags whose current certificate must be valid for the credential to be used.
    public static let usageTags: Set<CredentialTag> = [.authentication, .signing]
    /// The tags whose current certificate's end makes a renewal due.
    public static let renewalTags: Set<CredentialTag> = [.authentication, .signing, .encryption]

    /// The lifetime of `credential` at `now`, with a renewal window of `window` seconds.
    public init(_ credential: Credential, now: Date, window: TimeInterval) throws {
        checked = now
        self.window = window
        expirationDate = credential.expirationDate
        credentialState =
            credential.expirationDate < now
            ? .expired : credential.expirationDate.timeIntervalSince(now) <= window ? .expiresSoon : .valid
        var certificates: [Certificate] = []
        for entry in credential.entries {
            let pairs =
                [(nil, entry.certifiedKey)] + entry.keyHistory.enumerated().map { ($0.offset as Int?, $0.element) }
            for (index, pair) in pairs {
                let details = try CertificateDetails(pair.certificate)
                let state: State
                if let notBefore = details.notBefore, notBefore > now {
                    state = .notYetValid
                } else if let notAfter = details.notAfter, notAfter < now {
                    state = .expired
                } else if let notAfter = details.notAfter, notAfter.timeIntervalSince(now) <= window {
                    state = .expiresSoon
                } else {
                    state = .valid
                }
                certificates.append(
                    Certificate(
                        tag: entry.tag, historyIndex: index, subject: details.subject,
                        serialNumber: details.serialNumber, notBefore: details.notBefore, notAfter: details.notAfter,
                        remainingSeconds: details.notAfter.map { Int($0.timeIntervalSince(now).rounded(.down)) },
                        state: state))
            }
        }
        self.certificates = certificates
    }

    /// The current certificates that keep the credential from being used: an authentication or
    /// signing certificate that is expired or not valid yet.
    public var unusable: [Certificate] {
        certificates.filter {
            $0.historyIndex == nil && Self.usageTags.contains($0.tag)
                && ($0.state == .expired || $0.state == .notYetValid)
        }
    }

    /// Whether the credential may be used at the time of the check: its expiration date has not
    /// passed, and no authentication or signing certificate keeps it from being used.
    public var usable: Bool { credentialState != .expired && unusable.isEmpty }

    /// Throws `DCError/Code/credentialExpired` (exit 80) unless the credential is ``usable``,
    /// naming what keeps it from being used: the authentication or signing certificate that ended
    /// or has not started (the first), else the credential's own expiration date.
    public func requireUsable() throws {
        if let first = unusable.first {
            let when =
                first.state == .expired
                ? "expired \(first.notAfter?.formatted(.iso8601) ?? "?")"
                : "is not valid before \(first.notBefore?.formatted(.iso8601) ?? "?")"
            throw DCError(.credentialExpired, "the \(first.tag) certificate \(when): the credential cannot be used")
        }
        guard credentialState != .expired else {
            throw DCError(
                .credentialExpired,
                "the credential expired \(expirationDate.formatted(.iso8601)) (its expiration date): it cannot be used"
            )
        }
    }

    /// Whether a renewal is due: the credential's expiration date, or an authentication, signing or
    /// encryption certificate's end, falls within the window (or already passed, or the certificate
    /// is not valid yet).
    public var renewalDue: Bool {
        credentialState != .valid
            || certificates.contains {
                $0.historyIndex == nil && Self.renewalTags.contains($0.tag) && $0.state != .valid
            }
    }
}

extension ManagedClient {
    /// Where the installed credential's certificates stand at `now`, with a renewal window of
    /// `window` seconds; nil when nothing is installed. Only while secure services are available.
    public func lifetime(now: Date = Date(), window: TimeInterval = 30 * 86400) throws -> CredentialLifetime? {
        try installed().map { try CredentialLifetime($0, now: now, window: window) }
    }

    /// The installed credential, for using it now (signing, authenticating, making an auth token,
    /// handing its certificates out). Throws `DCError/Code/credentialExpired` (exit 80) when its
    /// own expiration date has passed or its authentication or signing certificate has expired or
    /// is not valid yet, naming which and the date (``CredentialLifetime/requireUsable()``);
    /// `DCError/Code/fileNotFound` when nothing is installed. Reading mail encrypted to it does not
    /// need this (``decrypt(_:)``): an expired encryption or escrow key still opens old mail.
    public func usableCredential(now: Date = Date()) throws -> Credential {
        guard let credential = try installed() else {
            throw DCError(.fileNotFound, "no credential installed", remedy: .requestCredential)
        }
        try CredentialLifetime(credential, now: now, window: 0).requireUsable()
        return credential
    }
}
