import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// Whether the app's user may use the app: AppConnect's `ACAuthState`, with the same raw values.
public enum AuthState: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// The user may not see or use the app's sensitive data; the app shows the policy's message.
    case unauthorized = 0
    /// The only state in which the app's sensitive data may be read.
    case authorized = 1
    /// The app erases all its sensitive data: keys, credential, files, pasteboard.
    case retired = 2

    /// The name in URLs, JSON and output: `unauthorized`, `authorized` or `retired`.
    public var description: String {
        switch self {
        case .unauthorized: "unauthorized"
        case .authorized: "authorized"
        case .retired: "retired"
        }
    }

    /// The state named `name` (``description``), or nil.
    public init?(name: String) {
        guard let state = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = state
    }
}

/// How an app handled a policy it was given: AppConnect's `ACPolicyState`.
public enum PolicyState: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// The app does not support the policy. Not allowed for the authorization state, which every
    /// app must handle; what the provider assumes of the secure file I/O policy until the app says otherwise.
    case unsupported = 0
    /// The app applied the policy.
    case applied = 1
    /// The app tried and failed; the acknowledgement's message says why.
    case error = 2

    /// The name in URLs, JSON and output: `unsupported`, `applied` or `error`.
    public var description: String {
        switch self {
        case .unsupported: "unsupported"
        case .applied: "applied"
        case .error: "error"
        }
    }

    /// The state named `name` (``description``), or nil.
    public init?(name: String) {
        guard let state = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = state
    }
}

/// Which policy an acknowledgement answers.
public enum PolicySubject: String, Sendable, Codable, CaseIterable {
    /// The authorization state and its message (`authStateApplied`).
    case authState = "auth"
    /// The secure file I/O policy (`secureFileIOPolicyApplied`).
    case secureFileIO = "fileio"
}

/// Whether the app's secure services (its credential, secure files, pasteboard) can be used now:
/// AppConnect's `ACSecureServicesAvailability`. Available exactly when the client is ready, the app
/// is authorized and the store is unlocked.
public enum SecureServicesAvailability: Int, Sendable, Codable, CustomStringConvertible {
    /// The store key is not available: the client is locked, not ready or not authorized.
    case unavailable = 0
    /// The store key is available.
    case available = 1

    /// `unavailable` or `available`.
    public var description: String { self == .available ? "available" : "unavailable" }
}

/// The secure file I/O policy: AppConnect's `ACSecureFileIOPolicy`. Not configurable: a provider
/// always requires secure file I/O, so an app keeps its data only in ``SecureFileIOPolicy/required`` files.
public enum SecureFileIOPolicy: Int, Sendable, Codable, CustomStringConvertible {
    /// The app keeps its sensitive data in secure files only.
    case required = 1

    /// `required`.
    public var description: String { "required" }
}

/// How programs log in to the client's PKCS#11 token.
public enum TokenLogin: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// With the store passphrase (`C_Login`), as with a smart card's PIN. The default.
    case passphrase
    /// Not at all: the token's private keys are usable whenever secure services are available
    /// (the client ready, authorized and unlocked).
    case secureServices = "secure-services"

    /// `passphrase` or `secure-services`.
    public var description: String { rawValue }
}

/// What a provider tells a client: its authorization state, the message that explains it, how
/// long the unlocked store stays unlocked, and how programs log in to its PKCS#11 token.
/// Numbered: a client applies only a newer one.
///
/// Declared once, here, for every place a policy travels or is kept: the provider's records and
/// its `status --json` (JSON, under the names of `CodingKeys`), and the signed policy URL
/// (`PolicyNotice`, which carries these fields as its own parameters, in the order they are
/// declared, under the names `parameterNames` gives). Adding a field is adding it here: its
/// property, its coding key and URL name, its line in `init(from:)` and its `init` argument.
public struct ClientPolicy: Sendable, Codable, Equatable {
    /// The provider's number for this policy; grows with every change.
    public var sequence: UInt64
    /// The authorization state.
    public var state: AuthState
    /// How long, in seconds, the store stays unlocked after `dcclient unlock` (``autoLockRange``).
    public var autoLock: Int
    /// Why the state is what it is, for the user; may be empty (``PolicyText``).
    public var message: String
    /// How programs log in to the client's PKCS#11 token (``TokenLogin/passphrase`` unless the
    /// operator said otherwise). A URL carries it only when it is not the passphrase.
    public var tokenLogin: TokenLogin

    /// The auto-lock lifetimes a policy may set: one second to a week.
    public static let autoLockRange = 1...(7 * 86400)
    /// The auto-lock lifetime until a provider sets one: fifteen minutes.
    public static let defaultAutoLock = 900

    /// A policy; `message` and `autoLock` are checked by ``PolicyText/check(_:)`` and ``autoLockRange``.
    public init(
        state: AuthState, message: String = "", autoLock: Int = defaultAutoLock, sequence: UInt64,
        tokenLogin: TokenLogin = .passphrase
    ) {
        self.state = state
        self.message = message
        self.autoLock = autoLock
        self.sequence = sequence
        self.tokenLogin = tokenLogin
    }

    /// The fields' names in JSON, in the order a URL carries them.
    enum CodingKeys: String, CodingKey {
        case sequence, state, autoLock, message, tokenLogin
    }

    /// Decodes a policy, from JSON or from a policy URL's parameters; one kept before token logins
    /// were set (or a URL without `tokenlogin`) has ``TokenLogin/passphrase``.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sequence = try container.decode(UInt64.self, forKey: .sequence)
        state = try container.decode(AuthState.self, forKey: .state)
        autoLock = try container.decode(Int.self, forKey: .autoLock)
        message = try container.decode(String.self, forKey: .message)
        tokenLogin = try container.decodeIfPresent(TokenLogin.self, forKey: .tokenLogin) ?? .passphrase
    }
}

extension ClientPolicy: URLParameterGroup {
    /// The URL names of the fields whose JSON names differ: `seq`, `autolock`, `tokenlogin`.
    static let parameterNames = [
        CodingKeys.sequence.stringValue: "seq", CodingKeys.autoLock.stringValue: "autolock",
        CodingKeys.tokenLogin.stringValue: "tokenlogin",
    ]

    /// An auto-lock outside ``autoLockRange``.
    var violation: String? { Self.autoLockRange.contains(autoLock) ? nil : "invalid 'autolock'" }
}

/// The rules for a policy's or an acknowledgement's message: short, valid UTF-8, and free of
/// control and bidirectional-override characters (it is shown to users as it is). In URLs it
/// travels as unpadded base64url.
public enum PolicyText {
    /// The longest message, in UTF-8 bytes.
    public static let maximumLength = 200

    /// Refuses a message that is too long or holds a control or bidirectional-override character.
    public static func check(_ text: String) throws {
        guard text.utf8.count <= maximumLength else {
            throw DCError(
                .usage, "the message is longer than \(maximumLength) bytes", hint: "say it in fewer words")
        }
        guard text.escapingControlCharacters == text else {
            throw DCError(
                .usage, "the message holds control or bidirectional-override characters",
                hint: "use plain text on one line")
        }
    }

    /// `text` as unpadded base64url.
    static func encode(_ text: String) -> String {
        Base64URL.encode(text.utf8)
    }

    /// The text an unpadded base64url value holds, if it is one (in its one canonical spelling,
    /// as `Base64URL` decodes) and the text passes ``check(_:)``.
    static func decode(_ value: String) -> String? {
        // String(validating:as:) keeps every byte (a leading U+FEFF too, which String(data:encoding:) drops).
        guard value.utf8.count <= (maximumLength * 4 + 2) / 3, let bytes = Base64URL.decode(value),
            let text = String(validating: bytes, as: UTF8.self), (try? check(text)) != nil
        else { return nil }
        return text
    }
}
