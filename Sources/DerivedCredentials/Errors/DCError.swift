/// The one error type of the toolkit.
///
/// Errors are compared by ``code``; the message, the subject (which file, tag or URI) and the hint
/// or remedy (what to do) are for people and may change. A next step that a front end spells in
/// its own terms, such as a command to run or a flag to add, is a ``Remedy``, never hint text:
/// the core does not know the tools' command lines. An error never carries a secret: messages are built
/// from file names, tags, sizes and OpenSSL's reason strings only.
public struct DCError: Error, Sendable, CustomStringConvertible {
    /// What failed; two errors are the same failure when their codes are equal.
    public var code: Code
    /// What went wrong, in one line.
    public var message: String
    /// Where: a file path, a tag, a URI. Printed with control characters escaped.
    public var subject: String?
    /// What the user can do about it, in words that hold for every front end; without a hint or
    /// a ``remedy``, the code's ``Code/defaultHint`` or ``Code/defaultRemedy`` is shown.
    public var hint: String?
    /// The next step, named, for a front end to word (a command-line tool names its command);
    /// shown when there is no ``hint``.
    public var remedy: Remedy?
    /// The lower-level cause, such as OpenSSL's drained error queue.
    public var underlying: (any Error & Sendable)?
    /// Where in our source the error was raised, for bug reports.
    public var location: SourceLocation

    /// An error of `code` saying `message`, about `subject`, suggesting `hint` or `remedy`, caused
    /// by `underlying`.
    ///
    /// `fileID` and `line` default to the caller's position and become ``location``.
    public init(
        _ code: Code,
        _ message: String,
        subject: String? = nil,
        hint: String? = nil,
        remedy: Remedy? = nil,
        underlying: (any Error & Sendable)? = nil,
        fileID: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.subject = subject
        self.hint = hint
        self.remedy = remedy
        self.underlying = underlying
        self.location = SourceLocation(fileID: fileID, line: line)
    }

    /// One line: `subject: message (cause); what to do` — the hint or remedy, or the code's
    /// default one; a remedy in the words of this process's front end
    /// (``Remedy/useWording(_:)``), else in its own ``Remedy/text``.
    public var description: String { description(wording: Remedy.processWords(for:)) }

    /// One line as ``description`` writes it, with each remedy worded by `wording` (a front end's
    /// own words for it, such as the command to run), or by its ``Remedy/text`` where `wording`
    /// has none.
    public func description(wording: (Remedy) -> String?) -> String {
        var line = ""
        if let subject { line += subject.escapingControlCharacters + ": " }
        line += message
        if let underlying { line += " (\(String(describing: underlying).escapingControlCharacters))" }
        if let next = nextStep(wording: wording) { line += "; " + next }
        return line
    }

    /// What to do, as the one line ends with: the hint, else the remedy, else the code's default
    /// hint, else its default remedy.
    public func nextStep(wording: (Remedy) -> String? = { _ in nil }) -> String? {
        func worded(_ remedy: Remedy) -> String { wording(remedy) ?? remedy.text }
        return hint ?? remedy.map(worded) ?? code.defaultHint ?? code.defaultRemedy.map(worded)
    }

    /// A position in the toolkit's source, printed as `fileID:line`.
    public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
        /// The `#fileID` of the raising file: `Module/File.swift`.
        public var fileID: String
        /// The 1-based line in that file.
        public var line: Int
        /// `fileID:line`, as bug reports quote it.
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
        /// Something needed could not be had now and may be later, such as a certificate's
        /// revocation status (EX_TEMPFAIL, 75).
        case temporaryFailure
        /// A certificate is revoked (79; beyond the sysexits range, so that scripts can tell it apart).
        case revoked
        /// The credential is expired or not valid yet where it is to be used (80; beyond sysexits too).
        case expired
        /// The user's files are in a state only the user can settle, such as two layouts of the
        /// managed client at once (EX_CONFIG, 78).
        case configuration

        /// The sysexits status the command-line tools exit with (docs/CLI.md).
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
            case .temporaryFailure: 75
            case .revoked: 79
            case .expired: 80
            case .configuration: 78
            }
        }
    }

    /// An error code: a stable name, its category and the AppConnect send error it maps to.
    ///
    /// A struct rather than an enum so that later releases can add codes without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The stable identifier, such as `wrongPassphrase`; equality and hashing use it alone.
        public let name: String
        /// The kind of failure, which decides the command-line tools' exit status.
        public let category: Category
        /// The AppConnect `ACDerivedCredentialError` value this failure reports as when it ends a send.
        public let appConnectValue: Int
        /// What to do next when an error of this code carries no ``DCError/hint`` or
        /// ``DCError/remedy`` of its own.
        public let defaultHint: String?
        /// The next step, named for a front end to word, when an error of this code carries no
        /// hint or remedy of its own and the code has no ``defaultHint``.
        public let defaultRemedy: Remedy?

        /// A code named `name` (stable, compared), failing as `category`, reported to AppConnect
        /// callers as `appConnect`, with `hint` or `remedy` as the next step its errors suggest by
        /// default.
        public init(
            _ name: String, _ category: Category, appConnect: AppConnectSendError = .invalid, hint: String? = nil,
            remedy: Remedy? = nil
        ) {
            self.name = name
            self.category = category
            self.appConnectValue = appConnect.rawValue
            self.defaultHint = hint
            self.defaultRemedy = remedy
        }

        /// The code's ``name``.
        public var description: String { name }

        /// Codes are equal when their names are; category and hint are not compared.
        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.name == rhs.name }
        /// Hashes the ``name`` only, matching `==`.
        public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    }
}

extension DCError.Code {
    // MARK: The AppConnect send errors, one-to-one.
    /// A failure nothing more specific describes, such as a demo step that failed (AppConnect `unknown`).
    public static let unknown = Self(
        "unknown", .internalError, appConnect: .unknown,
        hint: "see the messages above; if they do not explain it, report a bug with the command that failed")
    /// A request, URL, payload or stored file that is not valid (AppConnect `invalid`, exit 65).
    public static let invalid = Self("invalid", .dataError, appConnect: .invalid)
    /// The managed client is locked and cannot take a credential now (AppConnect `serviceUnavailable`).
    public static let serviceUnavailable = Self(
        "serviceUnavailable", .unavailable, appConnect: .serviceUnavailable,
        remedy: .unlockOrQueue)
    /// No managed client, or no handler for its scheme, is registered (AppConnect `missingClient`).
    public static let missingClient = Self(
        "missingClient", .unavailable, appConnect: .missingClient,
        remedy: .registerClient)
    /// The managed client speaks an older delivery protocol than the provider (AppConnect `oldClient`).
    public static let oldClient = Self(
        "oldClient", .unavailable, appConnect: .oldClient,
        hint: "update the client, then try again")
    /// The client did not confirm a delivery, or the awaited spool file is not there (AppConnect `notReady`).
    public static let notReady = Self(
        "notReady", .unavailable, appConnect: .notReady,
        hint: "see the client's messages above, then try again")

    // MARK: The delivery conversation.
    /// A URL message or spool file that is well formed but not accepted: forged or altered (its
    /// MAC or digest does not verify, its payload is bound to another request), replayed (its
    /// request id was used already) or late (past the request's time limit). Refused like a wrong
    /// PIN (exit 77); reported to AppConnect callers as `invalid`.
    public static let refusedMessage = Self(
        "refusedMessage", .refused,
        hint: "nothing was changed; ask or send again (a new request id)")

    // MARK: The managed-app runtime.
    /// The app is not authorized (or was retired): no credential or secure file may be read, and
    /// the provider sends it nothing (exit 77).
    public static let notAuthorized = Self(
        "notAuthorized", .refused,
        remedy: .askForAuthorization)
    /// The client has no policy from its provider yet, so it cannot tell whether it is authorized.
    public static let policyNotReady = Self(
        "policyNotReady", .unavailable,
        remedy: .awaitPairing)

    // MARK: Building a credential (all report as AppConnect `invalid`).
    /// The credential name is empty or only whitespace.
    public static let emptyName = Self(
        "emptyName", .dataError,
        remedy: .nameCredential)
    /// The credential serial number is empty or only whitespace.
    public static let emptySerialNumber = Self(
        "emptySerialNumber", .dataError,
        remedy: .giveSerialNumber)
    /// The credential has no expiration date.
    public static let missingExpirationDate = Self(
        "missingExpirationDate", .dataError,
        remedy: .giveExpirationDate)
    /// The credential has no tagged entry.
    public static let noEntries = Self(
        "noEntries", .dataError,
        hint: "give at least one tagged certificate and key")
    /// A tag appears more than once in one credential.
    public static let duplicateTag = Self(
        "duplicateTag", .dataError,
        hint: "give each tag once (several escrow files form the escrow key history)")
    /// A key history was given for an entry other than ``CredentialTag/escrow``.
    public static let keyHistoryNotAllowed = Self(
        "keyHistoryNotAllowed", .dataError,
        hint: "give retired pairs for the escrow tag only")
    /// An escrow key history longer than ``CredentialEntry/maximumKeyHistory`` pairs.
    public static let keyHistoryTooLong = Self(
        "keyHistoryTooLong", .dataError,
        hint: "keep at most 20 retired escrow pairs, newest first")
    /// Validation found at least one error-severity finding in a credential.
    public static let validationFailed = Self(
        "validationFailed", .dataError,
        remedy: .fixFindings)

    // MARK: Reading and converting files.
    /// The bytes are not what they claim to be (broken PEM, bad base64, truncated DER, NUL bytes).
    public static let malformedInput = Self(
        "malformedInput", .dataError,
        hint: "export the file again, or look at what it holds with openssl (x509, pkey or pkcs12 -info)")
    /// Valid BER but not DER: indefinite or non-minimal lengths, constructed strings.
    public static let notDER = Self(
        "notDER", .dataError,
        hint: "re-encode it as DER (openssl x509 -outform DER; openssl pkcs8 -topk8 -outform DER)")
    /// Bytes after the end of a DER object.
    public static let trailingData = Self(
        "trailingData", .dataError,
        hint: "remove what follows the object, or export the file again")
    /// A PEM label or file format this toolkit does not take.
    public static let unsupportedFormat = Self(
        "unsupportedFormat", .dataError,
        hint: "give a certificate or key as PEM, DER or PKCS#12 (docs/CLI.md, Sources)")
    /// A key algorithm or curve outside the profiles (DSA, Ed25519, explicit EC parameters, …).
    public static let unsupportedAlgorithm = Self(
        "unsupportedAlgorithm", .dataError,
        hint: "use RSA (2048 bits or more) or EC P-256, P-384 or P-521 keys, signed with SHA-256 or better")
    /// More than one private key where one is allowed.
    public static let multipleKeys = Self(
        "multipleKeys", .dataError,
        hint: "give one private key per certificate (split the file)")
    /// A private key that does not belong to the certificate it came with.
    public static let keyCertificateMismatch = Self(
        "keyCertificateMismatch", .dataError,
        hint: "give the private key that belongs to the certificate")
    /// A PKCS#12 file without an integrity MAC.
    public static let missingMAC = Self(
        "missingMAC", .dataError,
        hint: "export the PKCS#12 file again with a MAC (openssl pkcs12 -export adds one)")
    /// A key-derivation iteration count above the configured cap.
    public static let iterationLimitExceeded = Self(
        "iterationLimitExceeded", .dataError,
        hint: "export the file again with a lower iteration count")
    /// A file larger than the configured cap.
    public static let inputTooLarge = Self(
        "inputTooLarge", .dataError,
        hint: "check that this is the right file")
    /// An encrypted message that none of the keys at hand opens.
    public static let noMatchingKey = Self(
        "noMatchingKey", .dataError,
        hint: "it is for another recipient, or it was altered")
    /// No certificate or key where one is needed.
    public static let missingMaterial = Self(
        "missingMaterial", .dataError,
        remedy: .giveCertificateAndKey)
    /// Encrypted input and no passphrase source was given.
    public static let passphraseRequired = Self(
        "passphraseRequired", .refused,
        remedy: .givePassphrase)
    /// The passphrase did not open the input.
    public static let wrongPassphrase = Self(
        "wrongPassphrase", .refused,
        hint: "give the right passphrase (it is never retried)")

    // MARK: Providers.
    /// A provider plug-in reported an error, exited non-zero or crashed.
    public static let providerFailed = Self(
        "providerFailed", .unavailable,
        remedy: .checkProvider)
    /// A provider plug-in did not answer in time and was killed.
    public static let providerTimedOut = Self(
        "providerTimedOut", .unavailable,
        hint: "check the provider's service, then try again")
    /// A plug-in could not be confined as asked (`--require-sandbox`, or `requireSandbox` in the
    /// provider's configuration, on a kernel without Landlock), or its confinement could not be set
    /// up: it was not started.
    public static let sandboxUnavailable = Self(
        "sandboxUnavailable", .unavailable,
        remedy: .allowUnconfined)
    /// A provider plug-in broke the protocol: invalid or truncated JSON, an unknown version,
    /// output over the cap, malformed entries.
    public static let providerProtocol = Self(
        "providerProtocol", .dataError,
        hint: "the provider is broken: report it to its vendor (docs/PROVIDER-PROTOCOL.md)")

    // MARK: Certificate authorities over CMP (RFC 4210, RFC 9483).
    /// The CA's CMP server could not be reached, or did not answer in time (exit 69).
    public static let caUnreachable = Self(
        "caUnreachable", .unavailable,
        hint: "check the server URL and that the CA is up, then try again")
    /// The CA refused the request: it did not accept our protection (the shared secret and its
    /// reference, or the signing certificate), or it rejected what we asked for (exit 77). An
    /// answer whose MAC does not verify with our secret is the CA refusing that secret.
    public static let caRefused = Self(
        "caRefused", .refused,
        hint: "check the reference and secret (or the certificate) the CA's operator gave you")
    /// The CA's answer is signed, but not by the server certificate configured (exit 78).
    public static let caServerMismatch = Self(
        "caServerMismatch", .configuration,
        hint: "configure the CMP server's own certificate as the CA's operator publishes it")
    /// The CA's answer, or the certificate it issued, does not verify against the trust anchors
    /// configured, or the certificate is not for our key (exit 65). Nothing is used.
    public static let caAnswerNotTrusted = Self(
        "caAnswerNotTrusted", .dataError,
        hint: "configure the CA certificates the CMP server and its certificates chain to")
    /// The `https` CMP server's TLS certificate does not chain to the TLS trust anchors (or the
    /// system's CA certificates), or is not for the host the URL names (exit 77): nothing was sent
    /// over the connection. We refuse the server, as we refuse a card whose certificate is not trusted.
    public static let caTLSNotTrusted = Self(
        "caTLSNotTrusted", .refused,
        hint: "check the server's host name, and the CA certificates its TLS certificate must chain to")
    /// The CA still answers "waiting" when the polling limit is reached (exit 75).
    public static let caPending = Self(
        "caPending", .temporaryFailure,
        hint: "the CA has not decided yet: ask again later, or allow a longer wait")

    // MARK: PKCS#11 tokens.
    /// A PKCS#11 call failed; the underlying error names the function and the CKR_ value.
    public static let pkcs11Failure = Self(
        "pkcs11Failure", .unavailable,
        hint: "check the card and its reader, then try again")
    /// The card left its reader (or was reset) during the command; nothing was written. Put it
    /// back and run the command again.
    public static let cardRemoved = Self(
        "cardRemoved", .temporaryFailure,
        hint: "put the card back and run the command again; nothing was written")
    /// There are readers, but no card in any of them.
    public static let noCard = Self(
        "noCard", .unavailable,
        remedy: .insertCard)
    /// A PKCS#11 URI matched no token or object.
    public static let noSuchObject = Self(
        "noSuchObject", .inputMissing,
        remedy: .listTokens)
    /// A PKCS#11 URI matched more than one object where one is needed.
    public static let multipleObjects = Self(
        "multipleObjects", .usage,
        hint: "narrow the URI (add id= or object=)")
    /// The private key cannot leave the token (CKA_EXTRACTABLE false): derive new keys instead.
    public static let keyNotExtractable = Self(
        "keyNotExtractable", .dataError,
        remedy: .deriveWithCA)
    /// The token refused the PIN (never retried automatically).
    public static let wrongPIN = Self(
        "wrongPIN", .refused,
        hint: "check the PIN before trying again: the token counts wrong tries")
    /// The token's user PIN is locked.
    public static let pinLocked = Self(
        "pinLocked", .refused,
        hint: "unblock the PIN with the token's SO PIN (its issuer's tools)")
    /// One more wrong PIN would lock the token, and the user did not allow the final try.
    public static let pinFinalTry = Self(
        "pinFinalTry", .refused,
        remedy: .allowFinalPINTry)
    /// A possession proof failed: the card's signature over the challenge does not verify.
    public static let possessionNotProven = Self(
        "possessionNotProven", .refused,
        hint: "use the card that the certificate belongs to")
    /// A certificate that must be trusted is expired, not yet valid, unfit for its use, or does
    /// not chain to the trust anchors.
    public static let untrustedCertificate = Self(
        "untrustedCertificate", .refused,
        hint: "use a certificate that is valid now, fit for its use, and chains to the trust anchors given")

    // MARK: Expiry.
    /// The installed credential cannot be used now: its authentication or signing certificate has
    /// expired or is not valid yet (exit 80). Decrypting what was encrypted to it still works.
    public static let credentialExpired = Self(
        "credentialExpired", .expired,
        remedy: .renewCredential)

    // MARK: Revocation.
    /// A certificate that is to be used or delivered is revoked (exit 79).
    public static let certificateRevoked = Self(
        "certificateRevoked", .revoked,
        hint: "nothing was changed; a revoked certificate is never used again: issue a new credential")
    /// A certificate's revocation status was asked for and could not be had: no CRL or OCSP
    /// answer, or one that was refused (malformed, badly signed, stale, from another issuer).
    /// Exit 75: it may work later, with a fresh CRL or a reachable responder.
    public static let revocationUnchecked = Self(
        "revocationUnchecked", .temporaryFailure,
        remedy: .giveRevocationSource)

    // MARK: Files and the command line.
    /// The command line is wrong: a missing or conflicting option, a bad value (exit 64).
    public static let usage = Self(
        "usage", .usage,
        remedy: .seeUsage)
    /// A path or one of its directories does not exist (exit 66).
    public static let fileNotFound = Self(
        "fileNotFound", .inputMissing,
        hint: "check the path")
    /// The file system refused access to a path (EACCES, EPERM; exit 77).
    public static let permissionDenied = Self(
        "permissionDenied", .refused,
        hint: "check the file's owner and mode")
    /// An output file, test CA directory or client set-up already exists; none is ever overwritten (exit 73).
    public static let outputExists = Self(
        "outputExists", .cannotCreate,
        hint: "remove it or choose another path")
    /// An older version's single managed client and the app containers that replaced it are
    /// both present, or a client being moved into its container finds that container taken:
    /// moving either would mix two clients, so nothing is done until the user settles it (exit 78).
    public static let conflictingLayouts = Self(
        "conflictingLayouts", .configuration,
        hint: "keep one of the two clients: move the other out of the way")
    /// An output file or directory cannot be created (exit 73).
    public static let cannotCreateOutput = Self(
        "cannotCreateOutput", .cannotCreate,
        hint: "check that the directory exists and is writable")
    /// Reading, writing, syncing or creating a pipe failed; the message carries `strerror` (exit 74).
    public static let ioError = Self(
        "ioError", .ioError,
        hint: "check the disk and its free space, then try again")
    /// A private key would have gone to a terminal, where it stays on the screen and in the
    /// scrollback; it is written only to a file or a pipe (exit 77).
    public static let secretOnTerminal = Self(
        "secretOnTerminal", .refused,
        hint: "redirect standard output to a file or a pipe")
    /// The feature asked for was left out of this build (a package trait it needs is off), such as
    /// HTTPS in a `dcverify` built without the `TLS` trait (exit 69).
    public static let notInThisBuild = Self(
        "notInThisBuild", .unavailable,
        remedy: .buildWithTLS)
    /// A server cannot listen where it was asked to: the address is in use, or is not one of this
    /// host's (exit 69). The error's remedy names a free port on the same host.
    public static let cannotListen = Self("cannotListen", .unavailable)
    /// An OpenSSL call failed in a way no input should cause.
    public static let cryptoFailure = Self(
        "cryptoFailure", .internalError,
        hint: "this should not happen: report a bug with the command that failed")
}
