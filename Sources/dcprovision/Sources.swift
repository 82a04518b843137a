import ArgumentParser
import CMPProvider
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import ExecProvider
import Foundation
import PEMFileProvider
import PKCS11Provider
import TestCAProvider

/// Where a credential comes from (docs/CLI.md, "Sources"): files through the PEM-file provider,
/// the test CA, a smart card, or any provider by id with `--option KEY=VALUE`. `PIN` says how a
/// card's PIN may be given: any way for a command that runs now, only a file for `register`,
/// whose handler runs later, unattended.
struct SourceOptions<PIN: PINSourceOptions>: ParsableArguments {
    @Option(
        name: .customLong("pem"),
        help: ArgumentHelp("A tagged certificate (PEM, DER or PKCS#12) and key.", valueName: "TAG=CERT[,KEY]"))
    var pem: [String] = []

    @Option(
        name: .customLong("pkcs12"), help: ArgumentHelp("A PKCS#12 file, with --tag or as TAG=FILE.", valueName: "file")
    )
    var pkcs12: [String] = []

    @Option(name: .customLong("tag"), help: ArgumentHelp("The tag of each --pkcs12 FILE, in order.", valueName: "tag"))
    var tags: [TagArgument] = []

    @Option(
        name: .customLong("object"),
        help: ArgumentHelp(
            "With --pkcs11: the object holding a tag's certificate, TAG=ID (hex) or TAG=pkcs11:URI (repeatable).",
            valueName: "TAG=ID"))
    var objects: [TagArgument] = []

    @Option(help: ArgumentHelp("A JSON manifest of tagged files.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("A file whose tag is read from its key usage.", valueName: "CERT[,KEY]"))
    var classify: [String] = []

    @Option(help: ArgumentHelp("Issue a fresh credential from the test CA in DIR.", valueName: "dir"))
    var testca: String?

    @Option(help: ArgumentHelp("A PKCS#11 token (smart card), as an RFC 7512 URI.", valueName: "uri"))
    var pkcs11: PKCS11URIArgument?

    @Option(
        help: ArgumentHelp(
            "With --pkcs11: piv (ids 01 authentication, 02 signing, 03 encryption, 05-09 and 10-24 escrow).",
            valueName: "layout")
    )
    var layout: CardLayout?

    @Flag(help: "With --pkcs11: derive new keys (SP 800-157), certified by --testca DIR or --provider CA.")
    var derive = false

    @Option(
        name: .customLong("card-trust-anchor"),
        help: ArgumentHelp(
            "With --derive (required): CA certificates the card's certificate must chain to.", valueName: "file"))
    var cardTrustAnchors: [String] = []

    @Option(
        name: .customLong("key-algorithm"),
        help: ArgumentHelp(
            "With --derive: p256, p384, rsa2048, rsa3072 (default: as the card's).", valueName: "algorithm"))
    var keyAlgorithm: KeyAlgorithm?

    @Option(
        name: .customLong("module"),
        help: ArgumentHelp(
            "With --pkcs11: a module by p11-kit name or absolute path (repeatable).", valueName: "module"))
    var pkcs11Modules: [String] = []

    @OptionGroup(title: "PIN (with --pkcs11)") var pin: PIN

    @OptionGroup(title: "Revocation (the credential's certificates; with --derive, the card's)")
    var revocation: RevocationOptions

    @Option(help: ArgumentHelp("A provider by id (see 'dcprovision providers'), or exec:PATH.", valueName: "id"))
    var provider: String?

    @Option(name: .customLong("option"), help: ArgumentHelp("A provider option (repeatable).", valueName: "KEY=VALUE"))
    var providerOptions: [String] = []

    @OptionGroup var sandbox: SandboxOptions

    var usesFiles: Bool { !pem.isEmpty || !pkcs12.isEmpty || manifest != nil || !classify.isEmpty }
    var isEmpty: Bool { !usesFiles && testca == nil && provider == nil && pkcs11 == nil }

    func validate() throws {
        // With --derive, --testca or --provider names the CA rather than a second source.
        let issuer = derive ? 0 : [testca != nil, provider != nil].filter { $0 }.count
        let families = [usesFiles, pkcs11 != nil].filter { $0 }.count + issuer
        if families > 1 {
            throw ValidationError(
                "give files (--pem, --pkcs12, --manifest, --classify), --testca, --pkcs11 or --provider, not several")
        }
        if pkcs11 == nil && (layout != nil || !pkcs11Modules.isEmpty || derive) {
            throw ValidationError("--layout, --derive and --module go with --pkcs11")
        }
        if derive && (testca == nil) == (provider == nil) {
            throw ValidationError("--derive needs the CA that certifies the new keys: --testca DIR or --provider ID")
        }
        if derive && cardTrustAnchors.isEmpty {
            // Checked here, before any card is opened or PIN asked for: a card certificate that
            // chains to nothing proves nothing.
            throw ValidationError(
                "--derive needs --card-trust-anchor FILE: the CA certificates the card's certificate must chain to")
        }
        if derive, let provider, provider.hasPrefix("exec:") {
            throw ValidationError(
                "with --derive, name the CA plug-in as NAME (dcprovider-NAME on DCPROVISION_PROVIDER_PATH), not exec:PATH"
            )
        }
        if !derive && (!cardTrustAnchors.isEmpty || keyAlgorithm != nil) {
            throw ValidationError("--card-trust-anchor and --key-algorithm go with --derive")
        }
        if !providerOptions.isEmpty && provider == nil && testca == nil {
            throw ValidationError("--option goes with --provider or --testca")
        }
        if let tagged = tags.first(where: { $0.object != nil }) {
            throw ValidationError(
                "--tag is a bare tag (of a --pkcs12 FILE); for a token's object write --object \(tagged.text)")
        }
        if let bare = objects.first(where: { $0.object == nil }) {
            throw ValidationError("--object is TAG=ID or TAG=pkcs11:URI, not '\(bare.text)'")
        }
        if pkcs11 == nil && !objects.isEmpty { throw ValidationError("--object goes with --pkcs11") }
        if pkcs11 != nil && !tags.isEmpty {
            throw ValidationError("with --pkcs11, name a tag's object with --object TAG=ID or TAG=pkcs11:URI")
        }
        if pkcs11 == nil && pkcs12.filter({ !$0.contains("=") }).count != tags.count {
            throw ValidationError("give one --tag for each --pkcs12 FILE (or write --pkcs12 TAG=FILE)")
        }
    }

    /// The provider and its request options.
    func resolve(_ registry: ProviderRegistry) throws -> (any CredentialProvider, [String: [String]]) {
        var options = try ProviderRequest.options(parsing: providerOptions)
        if let pkcs11 {
            var card: [String: [String]] = ["uri": [pkcs11.text]]
            if let layout { card["layout"] = [layout.rawValue] }
            if !objects.isEmpty { card["tag"] = objects.map(\.text) }
            if !pkcs11Modules.isEmpty { card["module"] = pkcs11Modules }
            if pin.allowFinalPinTry { card["allow-final-pin-try"] = ["true"] }
            guard derive else { return (try registry.provider(id: "pkcs11"), card) }
            // The CA's own options travel as ca-option KEY=VALUE.
            guard let ca = testca != nil ? "testca" : provider else {
                throw DCError(
                    .usage, "--derive needs the CA that certifies the new keys: --testca DIR or --provider ID")
            }
            card["ca"] = [ca]
            card["ca-option"] = providerOptions + (testca.map { ["dir=\($0)"] } ?? [])
            if !cardTrustAnchors.isEmpty { card["trust-anchor"] = cardTrustAnchors }
            if let keyAlgorithm { card["key-algorithm"] = [keyAlgorithm.rawValue] }
            card.merge(revocation.providerOptions) { $1 }
            return (try registry.provider(id: "derive"), card.filter { !$0.value.isEmpty })
        }
        if let testca {
            options["dir"] = [testca]
            return (try registry.provider(id: "testca"), options)
        }
        if let provider {
            return (
                try ProviderDirectory.provider(
                    provider, registry: registry, requiringConfinement: sandbox.confinementRequired), options
            )
        }
        var remainingTags = tags[...]
        options["pem"] = pem + pkcs12.map { $0.contains("=") ? $0 : "\(remainingTags.removeFirst().text)=\($0)" }
        if let manifest { options["manifest"] = [manifest] }
        if !classify.isEmpty { options["classify"] = classify }
        options = options.filter { !$0.value.isEmpty }
        return (try registry.provider(id: "pem"), options)
    }

    /// Runs the source's provider. A token's PIN comes from the PIN options, anything else's
    /// secret from `passphrase`.
    func provide(passphrase: PromptingPassphraseOptions) async throws -> ProvidedCredential {
        let (provider, options) = try resolve(sandbox.registry())
        let secret = pkcs11 != nil ? try pin.pinSource() : try passphrase.source()
        // A card or a CA may take seconds per step: a person at a terminal sees which one.
        let progress = ProgressLine.steps("provider \(provider.descriptor.id)")
        defer { progress.finish() }
        let provided = try await provider.provide(
            ProviderRequest(options: options, passphrase: secret, progress: { progress.report($0) }))
        progress.finish()
        for warning in provided.warnings { Console.warning(warning) }
        return provided
    }

    /// The revocation policy for validating the credential itself (inspect, send), or nil when
    /// no source was named. With `--derive` the flags are the card's (its certificate is checked
    /// before anything is certified) and the new certificates, just issued, are not checked.
    func revocationPolicy() throws -> RevocationPolicy? { derive ? nil : try revocation.policy() }

    /// Refuses revocation flags for a command that would not use them (a source other than
    /// `--derive`, for a command that does not validate).
    func requireRevocationFlagsOnlyWithDerive(_ command: String) throws {
        guard !derive, revocation.hasSources || revocation.allowUncheckedRevocation else { return }
        throw ValidationError(
            "with \(command), --crl, --ocsp and --allow-unchecked-revocation go with --derive (the card's certificate); dcprovision inspect checks a credential's revocation"
        )
    }
}

/// `--require-sandbox`: an exec plug-in runs only confined to its paths (Landlock), or not at
/// all. Without the flag the provider's configuration decides (`requireSandbox`, set by
/// `register --require-sandbox`); without either, a plug-in on a kernel without Landlock runs
/// unconfined, with one warning line.
struct SandboxOptions: ParsableArguments {
    @Flag(help: "Run an exec plug-in only when it can be confined (Landlock); never unconfined.")
    var requireSandbox = false

    /// Whether exec plug-ins must run confined: the flag, or the registered configuration.
    var confinementRequired: Bool { requireSandbox || ProviderConfig.requiresSandbox() }

    /// The providers, with exec plug-ins that honour ``confinementRequired``.
    func registry() -> ProviderRegistry { ProviderDirectory.registry(requiringConfinement: confinementRequired) }
}

/// The providers this tool knows: the built-in ones and exec providers found on
/// `DCPROVISION_PROVIDER_PATH`.
enum ProviderDirectory {
    static var searchPath: String? { ProcessInfo.processInfo.environment["DCPROVISION_PROVIDER_PATH"] }

    /// The built-in providers and the plug-ins on the provider path; with `requiringConfinement`,
    /// each exec plug-in on the path runs only confined.
    static func registry(requiringConfinement: Bool) -> ProviderRegistry {
        var registry = ProviderRegistry([PEMFileProvider(), TestCAProvider(), PKCS11Provider(), CMPProvider()])
        for found in ExecProvider.discover(searchPath: searchPath) where (try? registry.provider(id: found.name)) == nil
        {
            var plugIn = ExecProvider(path: found.path, id: found.name)
            plugIn.requiresConfinement = requiringConfinement
            registry.register(plugIn)
        }
        registry.register(DerivationProvider(registry: registry))
        return registry
    }

    /// The provider `id` names: `exec:PATH` (confined as `requiringConfinement` says), or one in `registry`.
    static func provider(_ id: String, registry: ProviderRegistry, requiringConfinement: Bool) throws
        -> any CredentialProvider
    {
        if id.hasPrefix("exec:") {
            let path = String(id.dropFirst("exec:".count))
            guard !path.isEmpty else {
                throw DCError(
                    .usage, "expected exec:PATH", hint: "name the plug-in's executable: --provider exec:./my-plugin")
            }
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            guard access(absolute, X_OK) == 0 else {
                throw DCError(
                    .fileNotFound, "no executable provider here", subject: path,
                    hint: "give the path of an executable that speaks docs/PROVIDER-PROTOCOL.md (chmod +x)")
            }
            var plugIn = ExecProvider(path: absolute)
            plugIn.requiresConfinement = requiringConfinement
            return plugIn
        }
        guard registry.ids.contains(id) else { throw notFound(id, registry: registry) }
        return try registry.provider(id: id)
    }

    /// A provider that is neither built in nor an exec plug-in on the provider path.
    static func notFound(_ id: String, registry: ProviderRegistry) -> DCError {
        let path = searchPath.map { "DCPROVISION_PROVIDER_PATH=\($0)" } ?? "DCPROVISION_PROVIDER_PATH is not set"
        return DCError(
            .usage,
            "no provider '\(id.escapingControlCharacters)' (built in, or dcprovider-\(id.escapingControlCharacters) on the provider path; \(path.escapingControlCharacters))",
            hint:
                "put the directory that holds dcprovider-\(id.escapingControlCharacters) on DCPROVISION_PROVIDER_PATH, give --provider exec:PATH, or use one of: \(registry.ids.joined(separator: ", "))"
        )
    }
}
