import DerivedCredentials
import FoundationEssentials

/// A CMP server's address, `http://HOST[:PORT]/PATH` (RFC 6712: CMP over HTTP) or `https://…`.
/// The messages protect themselves (a MAC or a signature), so plain HTTP is what RFC 9483
/// profiles; over `https` the server's TLS certificate is checked too (``CMPSession/tlsTrustAnchors``,
/// and the host name against it).
public struct CMPServerAddress: Sendable, Hashable, CustomStringConvertible {
    /// The host name or address (an IPv6 address without its brackets).
    public let host: String
    /// The TCP port; 80 (443 for `https`) when the URL names none.
    public let port: Int
    /// The path without its leading `/`, such as `pkix/` or `.well-known/cmp`.
    public let path: String
    /// Whether the URL is `https`: the messages go through TLS.
    public let usesTLS: Bool

    /// Parses `url`. Throws `DCError/Code/usage` for anything but `http[s]://HOST[:PORT][/PATH]`.
    public init(url: String) throws {
        let text = url.escapingControlCharacters
        let lowered = url.lowercased()
        usesTLS = lowered.hasPrefix("https://")
        guard usesTLS || lowered.hasPrefix("http://") else {
            throw DCError(
                .usage, "a CMP server is an http:// or https:// URL", subject: text,
                hint: "such as http://ca.example:8080/pkix/")
        }
        let rest = url.dropFirst(usesTLS ? "https://".count : "http://".count)
        let authority = rest.prefix { $0 != "/" }
        path = String(rest.dropFirst(authority.count).drop { $0 == "/" })
        var hostPart = Substring(authority)
        var portPart: Substring?
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else {
                throw DCError(.usage, "an IPv6 address in a URL ends with ]", subject: text)
            }
            let after = hostPart[hostPart.index(after: close)...]
            if after.hasPrefix(":") {
                portPart = after.dropFirst()
            } else if !after.isEmpty {
                throw DCError(.usage, "not a host and port", subject: text)
            }
            hostPart = hostPart[hostPart.index(after: hostPart.startIndex)..<close]
        } else if let colon = hostPart.lastIndex(of: ":") {
            portPart = hostPart[hostPart.index(after: colon)...]
            hostPart = hostPart[..<colon]
        }
        guard !hostPart.isEmpty, !hostPart.contains("@"),
            hostPart.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" })
        else { throw DCError(.usage, "not a host name or address", subject: text) }
        host = String(hostPart)
        if let portPart {
            guard let number = Int(portPart), (1...65535).contains(number) else {
                throw DCError(.usage, "the port must be 1 to 65535", subject: text)
            }
            port = number
        } else {
            port = usesTLS ? 443 : 80
        }
        guard path.allSatisfy({ !$0.isWhitespace && $0 != "?" && $0 != "#" }) else {
            throw DCError(.usage, "the CMP path may not hold spaces, a query or a fragment", subject: text)
        }
    }

    /// `http://HOST:PORT/PATH` or `https://HOST:PORT/PATH`.
    public var description: String {
        "\(usesTLS ? "https" : "http")://\(host.contains(":") ? "[\(host)]" : host):\(port)/\(path)"
    }
}

/// How our CMP messages are protected (RFC 9483 section 3.2).
public enum CMPProtection: Sendable {
    /// A MAC (PBMAC1 / PasswordBasedMac) keyed by a secret the CA's operator handed out, with the
    /// reference (senderKID) that names it: first enrolment.
    case sharedSecret(reference: String, secret: SecretBytes)
    /// A signature by a certificate the CA issued before (renewal, `kur`, or a `cr`), with the
    /// certificates between it and its CA.
    case signature(certificate: Certificate, key: PrivateKey, chain: [Certificate])
}

/// Everything one CMP transaction needs besides what it asks for.
public struct CMPSession: Sendable {
    /// Where the CA's CMP server is.
    public var server: CMPServerAddress
    /// How our requests are protected.
    public var protection: CMPProtection
    /// The CA certificates that a signed answer's server certificate and every issued certificate
    /// must chain to. Required: a certificate that chains to nothing we trust is not used.
    public var trustAnchors: [Certificate]
    /// The CMP server's own certificate, when the answers must be signed by exactly it.
    public var serverCertificate: Certificate?
    /// For an `https` server: the CA certificates its TLS certificate must chain to; nil for the
    /// system's CA certificates. Its host name (or address) is checked against the certificate either way.
    public var tlsTrustAnchors: [Certificate]?
    /// Seconds each HTTP exchange may take.
    public var messageTimeout: Int
    /// Seconds the whole transaction may take, polling included: the polling limit.
    public var totalTimeout: Int

    /// A session with these fields as given.
    public init(
        server: CMPServerAddress, protection: CMPProtection, trustAnchors: [Certificate],
        serverCertificate: Certificate? = nil, tlsTrustAnchors: [Certificate]? = nil, messageTimeout: Int = 30,
        totalTimeout: Int = 120
    ) {
        self.server = server
        self.protection = protection
        self.trustAnchors = trustAnchors
        self.serverCertificate = serverCertificate
        self.tlsTrustAnchors = tlsTrustAnchors
        self.messageTimeout = messageTimeout
        self.totalTimeout = totalTimeout
    }
}

/// The certificate request messages (RFC 4210 section 5.3).
public enum CMPRequestType: String, Sendable, Hashable, CaseIterable {
    /// Initial registration: the first certificate, usually protected by a shared secret.
    case ir
    /// A certification request from an entity that already has a certificate.
    case cr
    /// A key update: a new key for the certificate that protects the request.
    case kur
}

/// The key a request asks the CA to certify.
public enum CMPNewKey: Sendable {
    /// A key we hold: proof of possession is its signature over the request.
    case privateKey(PrivateKey)
    /// Only the public key (a SubjectPublicKeyInfo): its holder proved possession to us, and the
    /// request says so (`raVerified`); the CA must accept that from us.
    case vouchedPublicKey([UInt8])
}

/// What the CA answered: the certificate and the CA certificates that came with it.
public struct CMPIssued: Sendable {
    /// The issued certificate, already checked to be for our key and to chain to the trust anchors.
    public var certificate: Certificate
    /// `caPubs`: CA certificates the CA publishes to us (in an `ip`).
    public var caPublications: [Certificate]
    /// `extraCerts` of the answers: the server's own chain and the issued certificate's.
    public var extraCertificates: [Certificate]
    /// Whether the private key went to the CA for archival (`pkiArchiveOptions`).
    public var sentForArchival: Bool
    /// Whether the CA granted the request with modifications (`grantedWithMods`): it changed the
    /// certificate from what was asked, or did not do all that was asked (such as archiving).
    public var grantedWithModifications: Bool
}

/// What the CA answered to a revocation request.
public enum CMPRevocation: Sendable, Hashable {
    /// The CA revoked the certificate.
    case revoked
    /// The CA had revoked it before (`certRevoked`): a revocation asked for again.
    case revokedAlready
}
