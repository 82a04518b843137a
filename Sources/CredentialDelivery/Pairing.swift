import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// What a provider knows of a client it was paired with: the client's message-signing key as it
/// was when the operator paired them (`dcprovision pair`), and what the operator allowed. A `new`
/// or `available` message is acted on only when it is signed with this key; a registration that
/// later shows another key is refused rather than trusted.
public struct ClientPairing: Codable, Sendable, Equatable {
    /// The client's id, as its URLs carry it.
    public var clientId: ClientID
    /// The client's URL scheme, lowercase.
    public var scheme: URLScheme
    /// The client's Ed25519 public key, base64 of the 32 raw bytes.
    public var signingKey: String
    /// Whether the client's `new` may make the provider log in to a card on its own, with no
    /// operator present. Off unless the operator turned it on for this client.
    public var allowCardRequests: Bool
    /// At most this many card requests from the client in any hour, when they are allowed.
    public var cardRequestsPerHour: Int
    /// When the operator paired the client.
    public var paired: Date
    /// The client's auth-token key as its registration showed it at pairing (base64 of the P-256
    /// point): the only key the provider certifies for the client's tokens. Nil for a client set
    /// up before auth tokens.
    public var tokenKey: String?
    /// The user the client's auth tokens name (their `X-Good-GD-UserID`), as the operator gave it
    /// at pairing; nil means ``defaultUserID``.
    public var userID: String?

    /// The user id of a pairing that names none: the login name of the user running the provider.
    public static var defaultUserID: String {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return "user-\(geteuid())" }
        return String(cString: name)
    }

    /// A pairing with these values.
    public init(
        clientId: ClientID, scheme: URLScheme, signingKey: String, allowCardRequests: Bool = false,
        cardRequestsPerHour: Int = 4, paired: Date = Date(), tokenKey: String? = nil, userID: String? = nil
    ) {
        self.clientId = clientId
        self.scheme = scheme
        self.signingKey = signingKey
        self.allowCardRequests = allowCardRequests
        self.cardRequestsPerHour = cardRequestsPerHour
        self.paired = paired
        self.tokenKey = tokenKey
        self.userID = userID
    }

    /// The raw public key, or nil when the stored text is not base64 of 32 bytes.
    public var publicKey: [UInt8]? { PinnedKeys.decode(signingKey) }
}

/// What a client knows of its provider: the provider's message-signing key as its registration
/// showed it the first time the client needed it (`dcclient register`, `dcclient request`, or the
/// first delivery). A delivery is installed only when it is signed with this key, and a
/// registration that later shows another key is refused.
public struct ProviderPin: Codable, Sendable, Equatable {
    /// The provider's URL scheme, lowercase.
    public var scheme: URLScheme
    /// The provider's Ed25519 public key, base64 of the 32 raw bytes.
    public var signingKey: String
    /// When the key was pinned.
    public var pinned: Date

    /// A pin with these values.
    public init(scheme: URLScheme, signingKey: String, pinned: Date = Date()) {
        self.scheme = scheme
        self.signingKey = signingKey
        self.pinned = pinned
    }

    /// The raw public key, or nil when the stored text is not base64 of 32 bytes.
    public var publicKey: [UInt8]? { PinnedKeys.decode(signingKey) }
}

/// Reading, writing and comparing pinned keys and the small JSON files that hold them.
public enum PinnedKeys {
    /// base64 of a raw public key, as registrations and pins hold it.
    public static func encode(_ publicKey: [UInt8]) -> String { Data(publicKey).base64EncodedString() }

    /// The 32 raw bytes of a base64 public key, or nil.
    public static func decode(_ text: String) -> [UInt8]? {
        guard let data = Data(base64Encoded: text), data.count == 32 else { return nil }
        return Array(data)
    }

    /// Writes `value` to `path` (0600, atomically, replacing), creating the directory (0700).
    public static func write<T: Encodable>(_ value: T, to path: String) throws {
        try Registrations.publish(value, at: path, mode: 0o600)
    }

    /// The value at `path`, or nil when there is none; a file that is not a private regular file
    /// of this user, or does not decode, is an error.
    public static func read<T: Decodable>(_ type: T.Type, at path: String) throws -> T? {
        guard
            let data = try privateFile(
                path, limit: 1 << 16,
                else: DCError(
                    .refusedMessage, "a pinned key file that is not a private regular file of this user",
                    subject: path, hint: "remove it and pair again"))
        else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let decoded = Result { try decoder.decode(T.self, from: data) }
        guard case .success(let value) = decoded else {
            throw DCError(
                .invalid, "a pinned key file that cannot be read" + Registrations.invalidIdentifier(decoded),
                subject: path, hint: "remove it and pair again")
        }
        return value
    }

    /// The key in `path` (PKCS#8 DER, 0600), made and stored on first use. Two processes making it
    /// at once agree on one: the loser of the race reads the winner's.
    public static func signingKey(at path: String) throws -> MessageSigningKey {
        try storedKey(
            at: path,
            refusal: DCError(
                .permissionDenied, "the message-signing key is not a private regular file of this user",
                subject: path, hint: "make it mode 0600, or remove it and pair again"))
    }

    /// The private key in `path` (PKCS#8 DER, 0600, written atomically), made on first use; two
    /// processes making it at once agree on one (the loser of the race reads the winner's).
    /// `refusal` when the file is not a private regular file of this user.
    package static func storedKey<Key: StoredPrivateKey>(at path: String, refusal: DCError) throws -> Key {
        func read() throws -> Key? {
            guard var bytes = try privateFile(path, limit: 1 << 12, else: refusal).map(Array.init) else { return nil }
            return try Key(pkcs8DER: SecretBytes(consuming: &bytes))
        }
        if let existing = try read() { return existing }
        let key = try Key.generate()
        let directory = PathText.parent(of: path)
        try AtomicFileSet.ensureDirectory(directory)
        var files = AtomicFileSet(directory: directory)
        try key.privateKey.withPKCS8DER { bytes in
            var copy = Array(bytes)
            try files.add(PathText.lastComponent(of: path), .secret(SecretBytes(consuming: &copy)), mode: 0o600)
        }
        do {
            try files.commit()
            return key
        } catch let error as DCError where error.code == .outputExists {
            guard let winner = try read() else { throw error }
            return winner
        }
    }

    /// The contents of `path`, or nil when there is none; `refusal` when it is not a regular file
    /// of this user that no one else may read or write, or is `limit` bytes or more.
    static func privateFile(_ path: String, limit: Int, else refusal: DCError) throws -> Data? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0,
            info.st_size < limit, let data = FileManager.default.contents(atPath: path)
        else { throw refusal }
        return data
    }
}

/// A number that grows by one with every delivery a provider makes to one client, kept in a file
/// under an exclusive lock, so that concurrent sends (threads or processes) never share one. The
/// client refuses a delivery whose number is not above the installed credential's: no rollback.
public struct DeliverySequence: Sendable {
    /// The file holding the last number given out, as decimal text.
    public let path: String

    /// A counter kept in `path`; nothing is read or created until it is used.
    public init(path: String) {
        self.path = path
    }

    /// The next number: one more than the last given out (1 the first time). A counter file that
    /// cannot be read, or is at its end, is an error rather than a restart (a restart would make
    /// the client refuse every later delivery as stale).
    public func next() throws -> UInt64 {
        try FileLock.updateNumber(at: path) { text in
            guard let last = text.isEmpty ? 0 : UInt64(text), last < UInt64.max else {
                throw DCError(
                    .ioError, "the delivery counter cannot be read", subject: path,
                    hint: "restore it from a backup: a lower number would make the client refuse deliveries")
            }
            return last + 1
        }
    }
}

/// A private key a party keeps in a file of its own: made fresh, stored and read back as PKCS#8.
/// `package`: the provider's runtime (`ProviderService`) keeps its token keys the same way.
package protocol StoredPrivateKey {
    /// A fresh key.
    static func generate() throws -> Self
    /// The key in a PKCS#8 DER encoding.
    init(pkcs8DER: SecretBytes) throws
    /// The private key, for its PKCS#8 encoding.
    var privateKey: PrivateKey { get }
}

extension MessageSigningKey: StoredPrivateKey {}
extension TokenSigningKey: StoredPrivateKey {}
