import DerivedCredentials
import SystemSupport

/// How the command-line tools word the remedies the libraries' errors name: the command to run or
/// the flag to add, in the one line a failed command ends with. A remedy with no entry here is
/// printed in its own `DCError.Remedy.text`.
enum RemedyWording {
    /// The tools' words for `remedy`, or nil when they have none of their own.
    static func commandLine(_ remedy: DCError.Remedy) -> String? {
        table[remedy.name].map { $0(remedy.arguments) }
    }

    /// `arguments[index]`, or an empty string for a remedy made with fewer.
    private static func argument(_ arguments: [String], _ index: Int) -> String {
        index < arguments.count ? arguments[index] : ""
    }

    /// The name of a remedy about a scheme, which any scheme makes: the table keys by name alone.
    private static func schemeRemedy(_ make: (URLScheme) -> DCError.Remedy) -> String {
        URLScheme(validating: "scheme").map { make($0).name } ?? ""
    }

    /// Each remedy's words, by its name.
    static let table: [String: @Sendable ([String]) -> String] = [
        DCError.Remedy.buildWithTLS.name: { _ in
            "build with the TLS trait (swift build --traits DemoCompanions,TLS; scripts/install does), "
                + "or serve HTTP behind a TLS-terminating proxy such as nginx"
        },
        DCError.Remedy.buildWithTLSOrUseFiles.name: { _ in
            "build with the TLS trait (swift build --traits DemoCompanions,TLS; scripts/install does), "
                + "or give the trust as files with --issuers and --revocations"
        },
        DCError.Remedy.fixTrustSigningKey.name: { _ in
            "make it mode 0600, or remove it (every verifier must then be given the new --trust-key)"
        },
        DCError.Remedy.namePublicationDirectory.name: { _ in "give --out-dir DIR once; it is remembered" },
        DCError.Remedy.givePublishedTrustURL.name: { _ in
            "give the URL of the directory dcprovision publish writes, such as https://trust.example.com/dc/"
        },
        DCError.Remedy.givePublishedTrustKey.name: { _ in "give the trust-key.jwks that dcprovision publish writes" },
        DCError.Remedy.listenOnFreePort(host: "", listener: .service).name: { arguments in
            let flag =
                argument(arguments, 1) == DCError.Remedy.Listener.metrics.rawValue ? "--metrics-listen" : "--listen"
            return
                "try \(flag) \(ListenAddress(host: argument(arguments, 0), port: 0)) for any free port, or stop what uses it"
        },
        DCError.Remedy.unlockOrQueue.name: { _ in
            "unlock the client (dcclient unlock) and try again, or send with --queue"
        },
        DCError.Remedy.registerClient.name: { _ in
            "register the client (dcclient register, after dcclient init), then try again"
        },
        DCError.Remedy.askForAuthorization.name: { _ in
            "the provider decides; ask its operator (dcprovision authorize), then unlock again"
        },
        DCError.Remedy.awaitPairing.name: { _ in
            "the provider sends its policy when it pairs with the client (dcprovision pair)"
        },
        DCError.Remedy.nameCredential.name: { _ in
            "give the credential a name (send --name), or use a provider that suggests one"
        },
        DCError.Remedy.giveSerialNumber.name: { _ in
            "give a serial number (send --credential-serial), or use a provider that suggests one"
        },
        DCError.Remedy.giveExpirationDate.name: { _ in
            "give an expiration date (send --expires), or use a provider that suggests one"
        },
        DCError.Remedy.fixFindings.name: { _ in
            "see the findings above (inspect --json lists them); fix the credential or its source"
        },
        DCError.Remedy.giveCertificateAndKey.name: { _ in
            "give the certificate and its private key (TAG=CERT,KEY, or both in one file)"
        },
        DCError.Remedy.givePassphrase.name: { _ in
            "give --passphrase-file FILE, --passphrase-fd N or --passphrase-prompt"
        },
        DCError.Remedy.givePassphraseFile.name: { _ in
            "pass --passphrase-file FILE or --passphrase-fd N"
        },
        DCError.Remedy.givePassphraseWithoutTerminal.name: { _ in
            "use --passphrase-file or --passphrase-fd instead"
        },
        DCError.Remedy.checkProvider.name: { _ in
            "see the provider's messages above; dcprovision providers shows whether it answers"
        },
        DCError.Remedy.allowUnconfined.name: { _ in
            "run on a kernel with Landlock (Linux 5.13 or later, enabled), or leave out --require-sandbox to run the plug-in unconfined"
        },
        DCError.Remedy.listTokens.name: { _ in
            "see what is there: dcprovision tokens, then dcprovision objects URI"
        },
        DCError.Remedy.listTokensOnly.name: { _ in
            "see dcprovision tokens"
        },
        DCError.Remedy.deriveWithCA.name: { _ in
            "derive new keys instead: --derive with --testca DIR or --provider CA"
        },
        DCError.Remedy.deriveNormally.name: { _ in
            "this is normal for PIV cards: derive new keys instead (SP 800-157, --derive)"
        },
        DCError.Remedy.deriveKeys.name: { _ in
            "derive new keys instead (SP 800-157, --derive)"
        },
        DCError.Remedy.deriveAfterDamagedKey.name: { _ in
            "the token gave a damaged key: try again, or derive new keys (--derive)"
        },
        DCError.Remedy.allowFinalPINTry.name: { _ in
            "make sure of the PIN, then add --allow-final-pin-try"
        },
        DCError.Remedy.givePINSafely.name: { _ in
            "give the PIN with --pin-file, --pin-fd, --pin-env or at the prompt"
        },
        DCError.Remedy.renewCredential.name: { _ in
            "renew it: dcclient request (or dcclient check --renew-within DAYS, which asks when it is due)"
        },
        DCError.Remedy.giveRevocationSource.name: { _ in
            "give a current CRL (--crl FILE) or a reachable OCSP responder (--ocsp URL), or go on knowingly with --allow-unchecked-revocation"
        },
        DCError.Remedy.seeUsage.name: { _ in
            "see the command's --help"
        },
        DCError.Remedy.awaitNewDelegation.name: { _ in
            "the provider sends a new one when the authorized client announces availability (dcclient unlock)"
        },
        DCError.Remedy.awaitDelegation.name: { _ in
            "the provider sends one when the authorized client announces availability (dcclient unlock)"
        },
        DCError.Remedy.giveOptionOnce("").name: {
            "give --option \(argument($0, 0))=VALUE once"
        },
        DCError.Remedy.addOption("", summary: "").name: {
            "add --option \(argument($0, 0))=VALUE (\(argument($0, 1)))"
        },
        DCError.Remedy.giveArchivingRecoveryKey.name: { _ in
            "give the recovery key whose certificate the CA archived to (testca init --recovery-cert)"
        },
        DCError.Remedy.setUpAlteredStore.name: { _ in
            "the client's store is damaged or was altered: set the client up again (dcclient init)"
        },
        DCError.Remedy.setUpDamagedStore.name: { _ in
            "the client's store is damaged: remove it and set the client up again (dcclient init)"
        },
        DCError.Remedy.replaceOutput.name: { _ in
            "remove it or pass --force to replace it"
        },
        DCError.Remedy.setUpRetiredClient.name: { _ in
            "a retired client is set up afresh (dcclient init) before it is paired again"
        },
        DCError.Remedy.setUpAndPairRetiredClient.name: { _ in
            "a retired client is set up afresh (dcclient init) and paired again"
        },
        schemeRemedy(DCError.Remedy.pairFirst(clientScheme:)): {
            "pair it first: dcprovision pair --client-scheme \(argument($0, 0))"
        },
        schemeRemedy(DCError.Remedy.pairAgain(clientScheme:)): {
            "pair it again: dcprovision pair --client-scheme \(argument($0, 0))"
        },
        DCError.Remedy.askWithNewRequest.name: { _ in
            "a client asks again with a new request id (dcclient request)"
        },
        DCError.Remedy.sendAgain.name: { _ in
            "send the credential again (dcprovision send, or the client asks again)"
        },
        DCError.Remedy.republishRegistration.name: { _ in
            "the client publishes it again with dcclient register"
        },
        DCError.Remedy.checkProviderPairing.name: { _ in
            "check that the provider is registered and has this client paired (dcprovision status)"
        },
        DCError.Remedy.askForPolicy.name: { _ in
            "the provider's next policy replaces it: ask its operator to send one (dcprovision authorize)"
        },
        DCError.Remedy.unlockClient.name: { _ in
            "run dcclient unlock"
        },
        DCError.Remedy.unlockFirst.name: { _ in
            "unlock it first (dcclient unlock)"
        },
        DCError.Remedy.registerProvider.name: { _ in
            "nothing was changed; register the provider (dcprovision register)"
        },
        schemeRemedy(DCError.Remedy.registerProviderScheme): {
            "register one (dcprovision register --provider-scheme \(argument($0, 0)) …)"
        },
        DCError.Remedy.setUpClient.name: { _ in
            "run dcclient init --client-scheme SCHEME --provider-scheme SCHEME --passphrase-file FILE"
        },
        DCError.Remedy.nameApp.name: { _ in
            "name one with --app ID or DCCLIENT_APP=ID"
        },
        DCError.Remedy.requestCredential.name: { _ in
            "ask the provider for one: dcclient request"
        },
        DCError.Remedy.createTestCA(in: "").name: {
            "create one with: dcprovision testca init \(argument($0, 0))"
        },
        DCError.Remedy.archiveKeys.name: { _ in
            "this CA does not archive keys (testca init --recovery-cert)"
        },
        DCError.Remedy.useExistingClient.name: { _ in
            "use it as it is (dcclient unlock, dcclient register), or remove the directory to start afresh"
        },
        DCError.Remedy.setUpOldClientAfresh.name: { _ in
            "set the client up afresh: remove the directory, then dcclient init"
        },
        DCError.Remedy.repinProvider.name: { _ in
            "if the provider was really set up afresh, pin it again: dcclient register --repin-provider"
        },
        DCError.Remedy.setUpRetiredClientAgain.name: { _ in
            "set it up afresh (dcclient init), then ask the provider to pair it again"
        },
        DCError.Remedy.giveSetUpPassphrase.name: { _ in
            "give the passphrase dcclient init was given; it is never retried"
        },
        DCError.Remedy.installStaleDelivery.name: { _ in
            "to install it anyway (within a day): dcclient handle-url --allow-older URL"
        },
        DCError.Remedy.requestAgain.name: { _ in
            "nothing was installed; ask the provider again (dcclient request)"
        },
        DCError.Remedy.requestResend.name: { _ in
            "ask the provider to send a credential again (dcclient request)"
        },
        DCError.Remedy.setUpIncompleteStore.name: { _ in
            "the store is incomplete: remove it and set the client up again (dcclient init)"
        },
        DCError.Remedy.askProviderToAuthorize.name: { _ in
            "ask the provider to authorize it (dcprovision authorize)"
        },
        schemeRemedy(DCError.Remedy.authorizeFirst(clientScheme:)): {
            "authorize it first: dcprovision authorize --client-scheme \(argument($0, 0))"
        },
        DCError.Remedy.clientAsksAgain.name: { _ in
            "nothing was done; the client asks again (dcclient request)"
        },
        DCError.Remedy.pairIfYours.name: { _ in
            "if the client is yours, pair it: dcprovision pair --client-scheme SCHEME"
        },
        schemeRemedy(DCError.Remedy.pairAfresh(clientScheme:)): {
            "if the client was set up afresh, pair it again: dcprovision pair --client-scheme \(argument($0, 0))"
        },
        schemeRemedy(DCError.Remedy.pairBeforeSending(clientScheme:)): {
            "nothing was issued or sent; if the client is yours, pair it: dcprovision pair --client-scheme \(argument($0, 0))"
        },
        DCError.Remedy.unlockOrQueueSend.name: { _ in
            "unlock the client (dcclient unlock) and send again, or send with --queue"
        },
        DCError.Remedy.fixSource.name: { _ in
            "fix the credential's source; dcprovision inspect shows every finding"
        },
        DCError.Remedy.inspectRejected.name: { _ in
            "see the client's messages above; dcprovision inspect shows what the client would find"
        },
        DCError.Remedy.allowCardRequests.name: { _ in
            "send with an operator present (dcprovision send), or allow it: dcprovision pair --allow-card-requests"
        },
        DCError.Remedy.raiseCardRequestLimit.name: { _ in
            "try again later, or raise the limit: dcprovision pair --card-requests-per-hour N"
        },
        DCError.Remedy.useToolkitURLs.name: { _ in
            "URLs are produced by dcprovision and dcclient only"
        },
        DCError.Remedy.updateURLMaker.name: { _ in
            "update the program that made the URL (dcprovision and dcclient speak the same version)"
        },
        DCError.Remedy.giveOption("").name: {
            "give --option \(argument($0, 0))=VALUE"
        },
        DCError.Remedy.startVirtualCard.name: { _ in
            "insert a PIV card, or start the virtual one: Tests/VirtualPIVCard/virtual-card start DIR, then export PCSCLITE_CSOCK_NAME=DIR/run/pcscd/pcscd.comm (README, With a (virtual) PIV card)"
        },
        DCError.Remedy.insertCard.name: { _ in
            "insert the card, or see dcprovision tokens"
        },
        DCError.Remedy.unblockUserPIN.name: { _ in
            "unlock it with the security officer PIN (e.g. pkcs11-tool --init-pin --login --login-type so) or the card issuer's tool"
        },
        DCError.Remedy.confirmFinalPINTry.name: { _ in
            "if you are sure of the PIN, pass --allow-final-pin-try"
        },
        DCError.Remedy.givePIN.name: { _ in
            "pass --pin-file FILE, --pin-fd N or --pin-env NAME"
        },
        DCError.Remedy.giveFiles.name: { _ in
            "use --pem TAG=CERT[,KEY], --manifest FILE or --classify CERT[,KEY]"
        },
        DCError.Remedy.tagExplicitly("").name: {
            "give its tag explicitly with --pem TAG=\(argument($0, 0))"
        },
    ]
}
