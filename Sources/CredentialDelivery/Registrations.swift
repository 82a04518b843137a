import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Where the toolkit publishes registrations, under the XDG data directory.
extension XDGDirectories {
    /// Published registrations: `$XDG_DATA_HOME/derived-credentials/{clients,providers}/<scheme>.json`.
    public var registrations: String { dataHome + "/derived-credentials" }
    /// The path of the registration a client publishes for `scheme`.
    public func clientRegistration(_ scheme: URLScheme) -> String { registrations + "/clients/\(scheme).json" }
    /// The path of the registration a provider publishes for `scheme`.
    public func providerRegistration(_ scheme: URLScheme) -> String { registrations + "/providers/\(scheme).json" }
}

/// What a managed client publishes so that a provider can check support and seal to it. It lives
/// in the user's data directory, written atomically; a provider trusts it only if it is a regular
/// file owned by the same user and writable by nobody else.
public struct ClientRegistration: Codable, Sendable, Equatable {
    /// The delivery protocol this client speaks (support is `oldClient` below ``currentProtocol``).
    public var protocolVersion: Int
    /// The client's id, as its URLs carry it; a registration whose id breaks the rule does not
    /// decode.
    public var clientId: ClientID
    /// The client's URL scheme, lowercase; deliveries are opened on it.
    public var scheme: URLScheme
    /// The handler that must receive deliveries (anything else claiming the scheme is a hijack).
    public var executable: String
    /// The certificate payloads are sealed to, DER in base64.
    public var certificate: String
    /// Where sealed payloads go.
    public var spool: String
    /// A JSON file `{"servicesAvailable": true|false, "until": seconds}` the client keeps current
    /// (lock/unlock; `until` is when its unlocked key's lifetime ends).
    public var status: String
    /// The client's Ed25519 message-signing public key, base64 of 32 bytes: it signs the client's
    /// `new` and `available` messages. Absent in registrations of protocol 1 clients.
    public var signingKey: String?
    /// The client's P-256 auth-token key, base64 of its 65-byte uncompressed point: the provider
    /// certifies it in the delegations behind the client's auth tokens. Absent in registrations of
    /// clients set up before auth tokens.
    public var tokenKey: String?

    /// The delivery protocol version this build speaks.
    public static let currentProtocol = 2

    /// A registration for a client speaking `protocolVersion`; `certificate` is stored as base64 DER,
    /// `signingKey` (raw Ed25519) as base64.
    public init(
        protocolVersion: Int = currentProtocol, clientId: ClientID, scheme: URLScheme, executable: String,
        certificate: Certificate, signingKey: [UInt8], tokenKey: TokenPublicKey? = nil, spool: String, status: String
    ) {
        self.protocolVersion = protocolVersion
        self.clientId = clientId
        self.scheme = scheme
        self.executable = executable
        self.certificate = Data(certificate.derBytes).base64EncodedString()
        self.signingKey = PinnedKeys.encode(signingKey)
        self.tokenKey = tokenKey.map { Data($0.uncompressedPoint).base64EncodedString() }
        self.spool = spool
        self.status = status
    }

    /// The certificate to seal payloads to, decoded and read strictly. Throws `DCError/Code/invalid`
    /// if it is not base64, or the reader's error if it is not one DER certificate.
    public func sealingCertificate() throws -> Certificate {
        guard let der = Data(base64Encoded: certificate) else {
            throw DCError(
                .invalid, "the client registration's certificate is not base64",
                remedy: .republishRegistration)
        }
        return try CredentialReader().certificate(der: Array(der), source: "client registration")
    }

    /// The client's auth-token key, or nil when the registration has none; `DCError.Code.invalid`
    /// when it is there but not a P-256 point.
    public func tokenPublicKey() throws -> TokenPublicKey? {
        guard let tokenKey else { return nil }
        guard let point = Data(base64Encoded: tokenKey), let key = try? TokenPublicKey(uncompressedPoint: Array(point))
        else {
            throw DCError(
                .invalid, "the client registration's token key is not a P-256 point",
                remedy: .republishRegistration)
        }
        return key
    }

    /// Whether the client's secure services are available now: it said so, and the unlocked
    /// key's lifetime (`until`, seconds since 1970, when the client gives one) has not ended.
    public var servicesAvailable: Bool {
        guard let data = FileManager.default.contents(atPath: status),
            let object = try? JSONDecoder().decode(ServicesStatus.self, from: data)
        else { return false }
        if let until = object.until, until <= Date().timeIntervalSince1970 { return false }
        return object.servicesAvailable == true
    }

    /// The client's status file: a field that is missing or of another type reads as nil.
    private struct ServicesStatus: Decodable {
        var servicesAvailable: Bool?
        var until: Double?

        init(from decoder: any Decoder) throws {
            let fields = try decoder.container(keyedBy: CodingKeys.self)
            servicesAvailable = try? fields.decode(Bool.self, forKey: .servicesAvailable)
            until = try? fields.decode(Double.self, forKey: .until)
        }

        private enum CodingKeys: String, CodingKey {
            case servicesAvailable, until
        }
    }
}

/// What a provider publishes so that a client can send to it and detect a hijacked scheme.
public struct ProviderRegistration: Codable, Sendable, Equatable {
    /// The provider's URL scheme, lowercase; `new` and result URLs are opened on it.
    public var scheme: URLScheme
    /// The provider's name as users know it.
    public var brand: String
    /// The handler that must receive the provider's URLs (anything else claiming the scheme is a hijack).
    public var executable: String
    /// The provider's Ed25519 message-signing public key, base64 of 32 bytes: it signs every
    /// delivery. A client pins it the first time its user asks this provider.
    public var signingKey: String?

    /// A registration with these fields as given; `signingKey` is the raw Ed25519 public key.
    public init(scheme: URLScheme, brand: String, executable: String, signingKey: [UInt8]) {
        self.scheme = scheme
        self.brand = brand
        self.executable = executable
        self.signingKey = PinnedKeys.encode(signingKey)
    }
}

/// Reading and writing registration files.
public enum Registrations {
    /// Writes `value` as pretty JSON with sorted keys and ISO 8601 dates to `path` (`mode`, 0644 by
    /// default), atomically, replacing what was there and creating the directory if needed. Throws
    /// the `AtomicFileSet` errors.
    public static func publish<T: Encodable>(_ value: T, at path: String, mode: mode_t = 0o644) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let directory = PathText.parent(of: path)
        try AtomicFileSet.ensureDirectory(directory)
        var files = AtomicFileSet(directory: directory)
        try files.add(
            PathText.lastComponent(of: path), .bytes(Array(try encoder.encode(value)) + [0x0A]), mode: mode)
        try files.commit(replacingExisting: true)
    }

    /// Reads a registration, or nil when there is none; refuses one another user could have written.
    public static func read<T: Decodable>(_ type: T.Type, at path: String) throws -> T? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw DCError(
                .invalid, "the registration is not a private regular file of this user", subject: path,
                hint: "remove it; the program that owns it publishes it again when it registers")
        }
        let decoded = FileManager.default.contents(atPath: path).flatMap { data in
            data.count < 1 << 20 ? Result { try JSONDecoder().decode(T.self, from: data) } : nil
        }
        guard case .success(let value) = decoded else {
            throw DCError(
                .invalid, "the registration cannot be read" + invalidIdentifier(decoded), subject: path,
                hint: "remove it; the program that owns it publishes it again when it registers")
        }
        return value
    }

    /// `: 'X' is not a valid client id` when reading a stored file failed on an id that breaks its
    /// rule (`Identifier`), else nothing: the words a refusal of the file adds.
    static func invalidIdentifier<T>(_ decoded: Result<T, any Error>?) -> String {
        guard case .failure(DecodingError.dataCorrupted(let context)) = decoded, context.underlyingError is DCError
        else { return "" }
        return ": " + context.debugDescription
    }

    /// Removes the file at `path`, if any; never fails.
    public static func remove(at path: String) { unlink(path) }

    /// Removes the registration at `path`, if any; fails when it is there and cannot be removed.
    public static func withdraw(at path: String) throws {
        try AtomicFileSet.removeFile(path, what: "the registration")
    }
}
