import Synchronization

extension DCError {
    /// A next step an error points to, named rather than worded for one front end: "unlock the
    /// client", "give a passphrase", "pair the client again". The core and the libraries say which
    /// step applies; a front end words it in its own terms (a command-line tool names the command
    /// to run or the flag to add), and anything else shows ``text``.
    ///
    /// A struct with a stable ``name`` rather than an enum, so that later releases can add
    /// remedies; two remedies are the same step when their names and arguments are equal.
    public struct Remedy: Sendable, Hashable, CustomStringConvertible {
        /// The stable identifier, such as `unlockOrQueue`, by which a front end finds its words.
        public let name: String
        /// What the step is about, in order, such as a client's scheme; a front end's words may
        /// quote them.
        public let arguments: [String]
        /// The step in words that hold for every front end: no command or flag.
        public let text: String

        /// The step `name`, about `arguments`, worded `text` for any front end.
        public init(_ name: String, arguments: [String] = [], _ text: String) {
            self.name = name
            self.arguments = arguments
            self.text = text
        }

        /// The ``text``.
        public var description: String { text }

        /// Makes `wording` the words of every ``DCError/description`` in this process, where it
        /// has words for a remedy: a front end calls it once as it starts (the command-line tools
        /// do), so that an error described anywhere, in a progress line as much as in the last
        /// line, names the step in its own terms.
        public static func useWording(_ wording: @escaping @Sendable (Remedy) -> String?) {
            processWording.withLock { $0 = wording }
        }

        /// The process's front end's words for `remedy`, if it set any (``useWording(_:)``).
        static func processWords(for remedy: Remedy) -> String? {
            processWording.withLock { $0 }?(remedy)
        }

        /// What ``useWording(_:)`` set; nil until a front end sets it.
        private static let processWording = Mutex<(@Sendable (Remedy) -> String?)?>(nil)

        /// Remedies are equal when their names and arguments are; the text is not compared.
        public static func == (lhs: Remedy, rhs: Remedy) -> Bool {
            lhs.name == rhs.name && lhs.arguments == rhs.arguments
        }
        /// Hashes the ``name`` and ``arguments``, matching `==`.
        public func hash(into hasher: inout Hasher) {
            hasher.combine(name)
            hasher.combine(arguments)
        }
    }
}

extension DCError.Remedy {
    // Every remedy the toolkit's errors name, in one place. Each is worded here for any front end;
    // the command-line tools word each one in their own terms (`RemedyWording` in
    // CommandLineSupport), so that no library names a command or a flag.

    /// HTTPS needs a build with TLS, or a proxy in front that terminates it.
    public static let buildWithTLS = Self(
        "buildWithTLS", "use a build with TLS, or serve HTTP behind a proxy that terminates TLS")

    /// Fetching trust needs a build with TLS (its HTTP client comes with it), or local trust files.
    public static let buildWithTLSOrUseFiles = Self(
        "buildWithTLSOrUseFiles", "use a build with TLS, or give the trust as local files")

    /// The provider's trust-signing key file is not private: make it so, or let a new one be made.
    public static let fixTrustSigningKey = Self(
        "fixTrustSigningKey",
        "make the trust-signing key mode 0600, or remove it (every verifier then needs the new key)")

    /// Publishing needs a directory, named once.
    public static let namePublicationDirectory = Self(
        "namePublicationDirectory", "name the publication directory once; it is remembered")

    /// A verifier fetches trust from the directory the provider publishes into.
    public static let givePublishedTrustURL = Self(
        "givePublishedTrustURL",
        "give the http or https URL of the directory the provider publishes its trust into, such as https://trust.example.com/dc/"
    )

    /// A verifier trusts the one key the provider publishes beside its trust.
    public static let givePublishedTrustKey = Self(
        "givePublishedTrustKey", "give the trust key file the provider publishes beside its trust")

    /// The address a server was to listen on is taken: listen on any free port of the same host
    /// (port 0), or stop what holds it. `arguments`: the host, and which listener it is
    /// (``Listener``).
    public static func listenOnFreePort(host: String, listener: Listener) -> Self {
        Self(
            "listenOnFreePort", arguments: [host, listener.rawValue],
            "listen on another port (port 0 takes any free one), or stop what uses it")
    }

    /// Which of a program's listeners an address is for, so that a front end names its setting.
    public enum Listener: String, Sendable {
        /// The server's own address.
        case service
        /// The metrics listener, beside it.
        case metrics
    }

    /// The client is locked: unlock it, or queue the delivery for later.
    public static let unlockOrQueue = Self(
        "unlockOrQueue", "unlock the client and try again, or queue the delivery for later")

    /// No client is registered for the scheme: set one up and register it.
    public static let registerClient = Self(
        "registerClient", "register the client (after setting it up), then try again")

    /// Only the provider's operator can authorize the client.
    public static let askForAuthorization = Self(
        "askForAuthorization", "the provider decides; ask its operator to authorize the client, then unlock again")

    /// The provider's policy comes with pairing.
    public static let awaitPairing = Self("awaitPairing", "the provider sends its policy when it pairs with the client")

    /// Give the credential a name.
    public static let nameCredential = Self(
        "nameCredential", "give the credential a name, or use a provider that suggests one")

    /// Give the credential a serial number.
    public static let giveSerialNumber = Self(
        "giveSerialNumber", "give a serial number, or use a provider that suggests one")

    /// Give the credential an expiration date.
    public static let giveExpirationDate = Self(
        "giveExpirationDate", "give an expiration date, or use a provider that suggests one")

    /// Validation found errors: read the findings, fix the credential.
    public static let fixFindings = Self(
        "fixFindings", "see the findings (the validation report lists them); fix the credential or its source")

    /// Give a certificate together with its private key.
    public static let giveCertificateAndKey = Self(
        "giveCertificateAndKey", "give the certificate and its private key, as two files or both in one")

    /// Give a passphrase source: a file, a descriptor or the terminal.
    public static let givePassphrase = Self(
        "givePassphrase", "give the passphrase from a file, a descriptor or the terminal")

    /// Give the passphrase from a file or a descriptor.
    public static let givePassphraseFile = Self("givePassphraseFile", "give the passphrase from a file or a descriptor")

    /// There is no terminal to prompt on: give the passphrase from a file or a descriptor.
    public static let givePassphraseWithoutTerminal = Self(
        "givePassphraseWithoutTerminal", "give the passphrase from a file or a descriptor instead")

    /// A provider failed: read its messages and check that it answers.
    public static let checkProvider = Self(
        "checkProvider", "see the provider's messages above, and check that it answers")

    /// Confinement is unavailable: use a kernel with Landlock, or let the plug-in run unconfined.
    public static let allowUnconfined = Self(
        "allowUnconfined",
        "run on a kernel with Landlock (Linux 5.13 or later, enabled), or allow the plug-in to run unconfined")

    /// Nothing on the tokens matches: list the tokens and their objects.
    public static let listTokens = Self("listTokens", "see what is there: list the tokens, then the objects of one")

    /// No token matches: list the tokens.
    public static let listTokensOnly = Self("listTokensOnly", "list the tokens to see what is there")

    /// A key that cannot leave its token: derive new keys, certified by a CA.
    public static let deriveWithCA = Self("deriveWithCA", "derive new keys instead, certified by a CA")

    /// A PIV card's keys never leave it: derive new keys (SP 800-157).
    public static let deriveNormally = Self(
        "deriveNormally", "this is normal for PIV cards: derive new keys instead (SP 800-157)")

    /// The key cannot leave the card: derive new keys (SP 800-157).
    public static let deriveKeys = Self("deriveKeys", "derive new keys instead (SP 800-157)")

    /// The token gave a damaged key: try again, or derive new keys.
    public static let deriveAfterDamagedKey = Self(
        "deriveAfterDamagedKey", "the token gave a damaged key: try again, or derive new keys")

    /// One more wrong PIN locks the token: try only when sure, and say so.
    public static let allowFinalPINTry = Self(
        "allowFinalPINTry", "make sure of the PIN, then allow the final try explicitly")

    /// A PIN never goes in a URI: give it from a file, a descriptor, a variable or the prompt.
    public static let givePINSafely = Self(
        "givePINSafely", "give the PIN from a file, a descriptor, a variable or the prompt")

    /// The credential expired: ask the provider for a new one.
    public static let renewCredential = Self(
        "renewCredential", "renew it: ask the provider for a new credential (or check regularly, asking when it is due)"
    )

    /// The revocation status is unknown: give a source of it, or accept the risk by name.
    public static let giveRevocationSource = Self(
        "giveRevocationSource",
        "give a current CRL or a reachable OCSP responder, or go on knowingly, allowing unchecked revocation")

    /// The command line is wrong: see the command's usage.
    public static let seeUsage = Self("seeUsage", "see the command's usage")

    /// The delegation is not valid now: a new one comes when the client announces availability.
    public static let awaitNewDelegation = Self(
        "awaitNewDelegation", "the provider sends a new one when the authorized client announces availability")

    /// There is no delegation: one comes when the client announces availability.
    public static let awaitDelegation = Self(
        "awaitDelegation", "the provider sends one when the authorized client announces availability")

    /// A provider option was given more than once.
    public static func giveOptionOnce(_ name: String) -> Self {
        Self("giveOptionOnce", arguments: [name], "give the option '\(name)' one value")
    }

    /// A provider needs an option.
    public static func addOption(_ name: String, summary: String) -> Self {
        Self("addOption", arguments: [name, summary], "add the option '\(name)' (\(summary))")
    }

    /// The recovery key does not open the archive: give the one the CA archived to.
    public static let giveArchivingRecoveryKey = Self(
        "giveArchivingRecoveryKey", "give the recovery key whose certificate the CA archived to")

    /// The client's store is damaged or altered: set the client up again.
    public static let setUpAlteredStore = Self(
        "setUpAlteredStore", "the client's store is damaged or was altered: set the client up again")

    /// The client's store is damaged: remove it and set the client up again.
    public static let setUpDamagedStore = Self(
        "setUpDamagedStore", "the client's store is damaged: remove it and set the client up again")

    /// The output exists: remove it, or ask for it to be replaced.
    public static let replaceOutput = Self("replaceOutput", "remove it, or ask for it to be replaced")

    /// A retired client is set up afresh before it is paired again.
    public static let setUpRetiredClient = Self(
        "setUpRetiredClient", "a retired client is set up afresh before it is paired again")

    /// A retired client is set up afresh and paired again.
    public static let setUpAndPairRetiredClient = Self(
        "setUpAndPairRetiredClient", "a retired client is set up afresh and paired again")

    /// The client is not paired with this provider: pair it.
    public static func pairFirst(clientScheme: URLScheme) -> Self {
        Self("pairFirst", arguments: [clientScheme.text], "pair it first (client scheme \(clientScheme))")
    }

    /// The client's pairing changed: pair it again.
    public static func pairAgain(clientScheme: URLScheme) -> Self {
        Self("pairAgain", arguments: [clientScheme.text], "pair it again (client scheme \(clientScheme))")
    }

    /// A request id is used once: the client asks again with a new one.
    public static let askWithNewRequest = Self("askWithNewRequest", "a client asks again with a new request id")

    /// The result came too late: the credential is sent again.
    public static let sendAgain = Self("sendAgain", "send the credential again (or the client asks again)")

    /// A client's registration is damaged: the client publishes it again.
    public static let republishRegistration = Self(
        "republishRegistration", "the client publishes it again when it registers")

    /// The provider did not answer: check that it is registered and has the client paired.
    public static let checkProviderPairing = Self(
        "checkProviderPairing", "check that the provider is registered and has this client paired")

    /// The policy record is damaged: the provider's next policy replaces it.
    public static let askForPolicy = Self(
        "askForPolicy", "the provider's next policy replaces it: ask its operator to send one")

    /// The client is locked: unlock it.
    public static let unlockClient = Self("unlockClient", "unlock the client")

    /// The client is locked: unlock it first.
    public static let unlockFirst = Self("unlockFirst", "unlock it first")

    /// No provider is registered for the client: register one; nothing was changed.
    public static let registerProvider = Self("registerProvider", "nothing was changed; register the provider")

    /// No provider is registered for a scheme: register one.
    public static func registerProviderScheme(_ providerScheme: URLScheme) -> Self {
        Self(
            "registerProviderScheme", arguments: [providerScheme.text],
            "register a provider for the scheme \(providerScheme)")
    }

    /// The client is not set up: set it up with its schemes and a store passphrase.
    public static let setUpClient = Self(
        "setUpClient", "set the client up: its scheme, its provider's scheme and a store passphrase")

    /// Several managed apps are set up and none was named: name one.
    public static let nameApp = Self("nameApp", "name the app to act for")

    /// No credential is installed: ask the provider for one.
    public static let requestCredential = Self("requestCredential", "ask the provider for one")

    /// There is no test CA in the directory: create one.
    public static func createTestCA(in directory: String) -> Self {
        Self("createTestCA", arguments: [directory], "create a test CA in \(directory)")
    }

    /// The test CA does not archive keys: one made with a recovery certificate does.
    public static let archiveKeys = Self(
        "archiveKeys", "this CA does not archive keys (a CA made with a recovery certificate does)")

    // The client's own steps (ManagedClient).

    /// The client is set up already: use it, or remove its directory to start afresh.
    public static let useExistingClient = Self(
        "useExistingClient", "use it as it is (unlock it, register it), or remove the directory to start afresh")

    /// The client was set up by a version without a message-signing key: set it up afresh.
    public static let setUpOldClientAfresh = Self(
        "setUpOldClientAfresh", "set the client up afresh: remove the directory, then set it up again")

    /// The provider's key changed: if the provider really was set up afresh, pin its new key.
    public static let repinProvider = Self(
        "repinProvider",
        "if the provider was really set up afresh, pin it again: register the client again, forgetting the pinned key")

    /// The client was retired: set it up afresh, then have it paired again.
    public static let setUpRetiredClientAgain = Self(
        "setUpRetiredClientAgain", "set it up afresh, then ask the provider to pair it again")

    /// The passphrase is wrong: give the one the client was set up with.
    public static let giveSetUpPassphrase = Self(
        "giveSetUpPassphrase", "give the passphrase the client was set up with; it is never retried")

    /// A delivery was kept out as older than the installed credential: it can still be chosen.
    public static let installStaleDelivery = Self(
        "installStaleDelivery", "to install it anyway (within a day), handle its URL again, allowing an older delivery")

    /// A delivery was refused and nothing installed: ask the provider again.
    public static let requestAgain = Self("requestAgain", "nothing was installed; ask the provider again")

    /// The kept delivery is gone: ask the provider to send one again.
    public static let requestResend = Self("requestResend", "ask the provider to send a credential again")

    /// A file of the store is missing: remove the store and set the client up again.
    public static let setUpIncompleteStore = Self(
        "setUpIncompleteStore", "the store is incomplete: remove it and set the client up again")

    /// The app is not authorized: only its provider can authorize it.
    public static let askProviderToAuthorize = Self("askProviderToAuthorize", "ask the provider to authorize it")

    // The provider's steps (ProviderService).

    /// The client is not authorized: authorize it before anything is sent to it.
    public static func authorizeFirst(clientScheme: URLScheme) -> Self {
        Self("authorizeFirst", arguments: [clientScheme.text], "authorize it first (client scheme \(clientScheme))")
    }

    /// A client's message was refused: nothing was done, and the client asks again.
    public static let clientAsksAgain = Self("clientAsksAgain", "nothing was done; the client asks again")

    /// A client that is not paired asked: pair it, if it is the operator's.
    public static let pairIfYours = Self("pairIfYours", "if the client is yours, pair it")

    /// The client's registration changed since it was paired: pair it again if it was set up afresh.
    public static func pairAfresh(clientScheme: URLScheme) -> Self {
        Self(
            "pairAfresh", arguments: [clientScheme.text],
            "if the client was set up afresh, pair it again (client scheme \(clientScheme))")
    }

    /// Nothing is sent to a client that is not paired: pair it, if it is the operator's.
    public static func pairBeforeSending(clientScheme: URLScheme) -> Self {
        Self(
            "pairBeforeSending", arguments: [clientScheme.text],
            "nothing was issued or sent; if the client is yours, pair it (client scheme \(clientScheme))")
    }

    /// The client is locked: unlock it and send again, or queue the delivery.
    public static let unlockOrQueueSend = Self(
        "unlockOrQueueSend", "unlock the client and send again, or queue the delivery for later")

    /// The credential fails validation: fix its source.
    public static let fixSource = Self(
        "fixSource", "fix the credential's source; inspecting it shows every finding")

    /// The client rejected the credential: see why.
    public static let inspectRejected = Self(
        "inspectRejected", "see the client's messages above; inspecting the credential shows what the client would find"
    )

    /// A client's request may not use a card unattended: send with an operator present, or allow it.
    public static let allowCardRequests = Self(
        "allowCardRequests", "send with an operator present, or allow the client's requests to use the card")

    /// A client made as many card requests in the last hour as it may.
    public static let raiseCardRequestLimit = Self(
        "raiseCardRequestLimit", "try again later, or raise the client's limit of card requests per hour")

    // The protocol's steps (CredentialDelivery).

    /// A URL is refused: only the toolkit's programs make them.
    public static let useToolkitURLs = Self("useToolkitURLs", "URLs are produced by the provider and the client only")

    /// A URL speaks another protocol version: update the program that made it.
    public static let updateURLMaker = Self(
        "updateURLMaker", "update the program that made the URL (the provider and the client speak the same version)")

    // The providers' steps.

    /// A required provider option is missing.
    public static func giveOption(_ name: String) -> Self {
        Self("giveOption", arguments: [name], "give the option '\(name)'")
    }

    /// The card steps of the demo need pcscd and a PIV card: start a virtual one.
    public static let startVirtualCard = Self(
        "startVirtualCard", "start pcscd with a PIV card in a reader, or the project's virtual card")

    /// No token is in the slot: insert the card.
    public static let insertCard = Self("insertCard", "insert the card, or list the tokens there are")

    /// The token's user PIN is locked: the security officer or the card's issuer unblocks it.
    public static let unblockUserPIN = Self(
        "unblockUserPIN", "unlock it with the security officer PIN or the card issuer's tool")

    /// One more wrong PIN locks the token: try only when sure.
    public static let confirmFinalPINTry = Self(
        "confirmFinalPINTry", "if you are sure of the PIN, allow the final try explicitly")

    /// The token needs a PIN: give it from a file, a descriptor or a variable.
    public static let givePIN = Self("givePIN", "give the PIN from a file, a descriptor or a variable")

    /// No certificate or key files were given.
    public static let giveFiles = Self(
        "giveFiles", "give tagged certificate and key files, a manifest, or files whose tags are read from them")

    /// A certificate's tag cannot be told from it: give it.
    public static func tagExplicitly(_ source: String) -> Self {
        Self("tagExplicitly", arguments: [source], "give its tag explicitly (\(source))")
    }
}
