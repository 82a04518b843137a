/// The one error type of the toolkit.
///
/// Errors are compared by ``code``; the message, the subject (which file, tag or URI) and the hint
/// (what to do) are for people and may change. An error never carries a secret: messages are built
/// from file names, tags, sizes and OpenSSL's reason strings only.
public struct DCError: Error, Sendable, CustomStringConvertible {
    public var code: Code
    /// What went wrong, in one line.
    public var message: String
    /// Where: a file path, a tag, a URI. Printed with control characters escaped.
    public var subject: String?
    /// What the user can do about it.
    public var hint: String?
    /// The lower-level cause, such as OpenSSL's drained error queue.
    public var underlying: (any Error & Sendable)?
    /// Where in our source the error was raised, for bug reports.
    public var location: SourceLocation

    public init(
        _ code: Code,
        _ message: String,
        subject: String? = nil,
        hint: String? = nil,
        underlying: (any Error & Sendable)? = nil,
        fileID: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.subject = subject
        self.hint = hint
        self.underlying = underlying
        self.location = SourceLocation(fileID: fileID, line: line)
    }

    /// One line: `subject: message (cause); hint`.
    public var description: String {
        var line = ""
        if let subject { line += subject.escapingControlCharacters + ": " }
        line += message
        if let underlying { line += " (\(String(describing: underlying).escapingControlCharacters))" }
        if let hint { line += "; " + hint }
        return line
    }

    public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
        public var fileID: String
        public var line: Int
        public var description: String { "\(fileID):\(line)" }
    }
}

/// Lets `catch DCError.Code.wrongPassphrase` match a thrown ``DCError`` by code.
public func ~= (code: DCError.Code, error: any Error) -> Bool {
    (error as? DCError)?.code == code
}

extension DCError {
    /// What kind of failure this is; the CLI maps it to a sysexits status.
    public enum Category: String, Sendable, Hashable {
        /// The command was used wrongly (EX_USAGE, 64).
        case usage
        /// The input data is malformed or violates a rule (EX_DATAERR, 65).
        case dataError
        /// An input file or object does not exist (EX_NOINPUT, 66).
        case inputMissing
        /// The client or a service is not available (EX_UNAVAILABLE, 69).
        case unavailable
        /// A bug or an unexpected library failure (EX_SOFTWARE, 70).
        case internalError
        /// An output cannot be created (EX_CANTCREAT, 73).
        case cannotCreate
        /// Reading or writing failed (EX_IOERR, 74).
        case ioError
        /// A passphrase, PIN or permission was refused or is missing (EX_NOPERM, 77).
        case refused

        /// The sysexits status the command-line tools exit with (docs/ARCHITECTURE.md, "What always holds").
        public var exitStatus: Int32 {
            switch self {
            case .usage: 64
            case .dataError: 65
            case .inputMissing: 66
            case .unavailable: 69
            case .internalError: 70
            case .cannotCreate: 73
            case .ioError: 74
            case .refused: 77
            }
        }
    }

    /// An error code: a stable name, its category and the AppConnect send error it maps to.
    ///
    /// A struct rather than an enum so that later releases can add codes without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        public let category: Category
        /// The AppConnect `ACDerivedCredentialError` value this failure reports as when it ends a send.
        public let appConnectValue: Int

        public init(_ name: String, _ category: Category, appConnect: AppConnectSendError = .invalid) {
            self.name = name
            self.category = category
            self.appConnectValue = appConnect.rawValue
        }

        public var description: String { name }

        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.name == rhs.name }
        public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    }
}

extension DCError.Code {
    // MARK: The AppConnect send errors, one-to-one.
    public static let unknown = Self("unknown", .internalError, appConnect: .unknown)
    public static let invalid = Self("invalid", .dataError, appConnect: .invalid)
    public static let serviceUnavailable = Self("serviceUnavailable", .unavailable, appConnect: .serviceUnavailable)
    public static let missingClient = Self("missingClient", .unavailable, appConnect: .missingClient)
    public static let oldClient = Self("oldClient", .unavailable, appConnect: .oldClient)
    public static let notReady = Self("notReady", .unavailable, appConnect: .notReady)

    // MARK: Building a credential (all report as AppConnect `invalid`).
    public static let emptyName = Self("emptyName", .dataError)
    public static let emptySerialNumber = Self("emptySerialNumber", .dataError)
    public static let missingExpirationDate = Self("missingExpirationDate", .dataError)
    public static let noEntries = Self("noEntries", .dataError)
    public static let duplicateTag = Self("duplicateTag", .dataError)
    public static let keyHistoryNotAllowed = Self("keyHistoryNotAllowed", .dataError)
    public static let keyHistoryTooLong = Self("keyHistoryTooLong", .dataError)
    public static let validationFailed = Self("validationFailed", .dataError)

    // MARK: Reading and converting files.
    /// The bytes are not what they claim to be (broken PEM, bad base64, truncated DER, NUL bytes).
    public static let malformedInput = Self("malformedInput", .dataError)
    /// Valid BER but not DER: indefinite or non-minimal lengths, constructed strings.
    public static let notDER = Self("notDER", .dataError)
    /// Bytes after the end of a DER object.
    public static let trailingData = Self("trailingData", .dataError)
    /// A PEM label or file format this toolkit does not take.
    public static let unsupportedFormat = Self("unsupportedFormat", .dataError)
    /// A key algorithm or curve outside the profiles (DSA, Ed25519, explicit EC parameters, …).
    public static let unsupportedAlgorithm = Self("unsupportedAlgorithm", .dataError)
    /// More than one private key where one is allowed.
    public static let multipleKeys = Self("multipleKeys", .dataError)
    /// A private key that does not belong to the certificate it came with.
    public static let keyCertificateMismatch = Self("keyCertificateMismatch", .dataError)
    /// A PKCS#12 file without an integrity MAC.
    public static let missingMAC = Self("missingMAC", .dataError)
    /// A key-derivation iteration count above the configured cap.
    public static let iterationLimitExceeded = Self("iterationLimitExceeded", .dataError)
    /// A file larger than the configured cap.
    public static let inputTooLarge = Self("inputTooLarge", .dataError)
    /// No certificate or key where one is needed.
    public static let missingMaterial = Self("missingMaterial", .dataError)
    /// Encrypted input and no passphrase source was given.
    public static let passphraseRequired = Self("passphraseRequired", .refused)
    /// The passphrase did not open the input.
    public static let wrongPassphrase = Self("wrongPassphrase", .refused)

    // MARK: Providers.
    /// A provider plug-in reported an error, exited non-zero or crashed.
    public static let providerFailed = Self("providerFailed", .unavailable)
    /// A provider plug-in did not answer in time and was killed.
    public static let providerTimedOut = Self("providerTimedOut", .unavailable)
    /// A provider plug-in broke the protocol: invalid or truncated JSON, an unknown version,
    /// output over the cap, malformed entries.
    public static let providerProtocol = Self("providerProtocol", .dataError)

    // MARK: PKCS#11 tokens.
    /// A PKCS#11 call failed; the underlying error names the function and the CKR_ value.
    public static let pkcs11Failure = Self("pkcs11Failure", .unavailable)
    /// A PKCS#11 URI matched no token or object.
    public static let noSuchObject = Self("noSuchObject", .inputMissing)
    /// A PKCS#11 URI matched more than one object where one is needed.
    public static let multipleObjects = Self("multipleObjects", .usage)
    /// The private key cannot leave the token (CKA_EXTRACTABLE false): derive new keys instead.
    public static let keyNotExtractable = Self("keyNotExtractable", .dataError)
    /// The token refused the PIN (never retried automatically).
    public static let wrongPIN = Self("wrongPIN", .refused)
    /// The token's user PIN is locked.
    public static let pinLocked = Self("pinLocked", .refused)
    /// One more wrong PIN would lock the token, and the user did not allow the final try.
    public static let pinFinalTry = Self("pinFinalTry", .refused)
    /// A possession proof failed: the card's signature over the challenge does not verify.
    public static let possessionNotProven = Self("possessionNotProven", .refused)
    /// A certificate that must be trusted is expired, not yet valid, unfit for its use, or does
    /// not chain to the trust anchors.
    public static let untrustedCertificate = Self("untrustedCertificate", .refused)

    // MARK: Files and the command line.
    public static let usage = Self("usage", .usage)
    public static let fileNotFound = Self("fileNotFound", .inputMissing)
    public static let permissionDenied = Self("permissionDenied", .refused)
    public static let outputExists = Self("outputExists", .cannotCreate)
    public static let cannotCreateOutput = Self("cannotCreateOutput", .cannotCreate)
    public static let ioError = Self("ioError", .ioError)
    /// An OpenSSL call failed in a way no input should cause.
    public static let cryptoFailure = Self("cryptoFailure", .internalError)
}
