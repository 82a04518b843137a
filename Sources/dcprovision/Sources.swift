import ArgumentParser
import CredentialCoding
import DerivedCredentials
import ExecProvider
import Foundation
import PEMFileProvider
import PKCS11Provider
import TestCAProvider

/// Where a credential comes from (DESIGN.md §5 `<source>`): files through the PEM-file provider,
/// the test CA, or any provider by id with `--option KEY=VALUE`.
struct SourceOptions: ParsableArguments {
    @Option(name: .customLong("pem"), help: ArgumentHelp("A tagged certificate (PEM, DER or PKCS#12) and key.", valueName: "TAG=CERT[,KEY]"))
    var pem: [String] = []

    @Option(name: .customLong("pkcs12"), help: ArgumentHelp("A PKCS#12 file, with --tag or as TAG=FILE.", valueName: "file"))
    var pkcs12: [String] = []

    @Option(name: .customLong("tag"), help: ArgumentHelp("The tag of each --pkcs12 FILE, in order.", valueName: "tag"))
    var tags: [String] = []

    @Option(help: ArgumentHelp("A JSON manifest of tagged files.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("A file whose tag is read from its key usage.", valueName: "CERT[,KEY]"))
    var classify: [String] = []

    @Option(help: ArgumentHelp("Issue a fresh credential from the test CA in DIR.", valueName: "dir"))
    var testca: String?

    @Option(help: ArgumentHelp("A PKCS#11 token (smart card), as an RFC 7512 URI.", valueName: "uri"))
    var pkcs11: String?

    @Option(help: ArgumentHelp("With --pkcs11: piv (ids 01 authentication, 02 signing, 03 encryption).", valueName: "layout"))
    var layout: String?

    @Option(name: .customLong("object"), help: ArgumentHelp("With --pkcs11: the object id (hex) for a tag.", valueName: "TAG=ID"))
    var objects: [String] = []

    @Option(name: .customLong("pkcs11-module"), help: ArgumentHelp("With --pkcs11: a module by p11-kit name or path.", valueName: "module"))
    var pkcs11Modules: [String] = []

    @OptionGroup(title: "PIN (with --pkcs11)") var pin: PINOptions

    @Option(help: ArgumentHelp("A provider by id (see 'dcprovision providers'), or exec:PATH.", valueName: "id"))
    var provider: String?

    @Option(name: .customLong("option"), help: ArgumentHelp("A provider option (repeatable).", valueName: "KEY=VALUE"))
    var providerOptions: [String] = []

    var usesFiles: Bool { !pem.isEmpty || !pkcs12.isEmpty || manifest != nil || !classify.isEmpty }
    var isEmpty: Bool { !usesFiles && testca == nil && provider == nil && pkcs11 == nil }

    func validate() throws {
        let families = [usesFiles, testca != nil, provider != nil, pkcs11 != nil].filter { $0 }.count
        if families > 1 { throw ValidationError("give files (--pem, --pkcs12, --manifest, --classify), --testca, --pkcs11 or --provider, not several") }
        if pkcs11 == nil && (layout != nil || !objects.isEmpty || !pkcs11Modules.isEmpty) {
            throw ValidationError("--layout, --object and --pkcs11-module go with --pkcs11")
        }
        if !providerOptions.isEmpty && provider == nil && testca == nil {
            throw ValidationError("--option goes with --provider or --testca")
        }
        if pkcs12.filter({ !$0.contains("=") }).count != tags.count {
            throw ValidationError("give one --tag for each --pkcs12 FILE (or write --pkcs12 TAG=FILE)")
        }
    }

    /// The provider and its request options.
    func resolve(_ registry: ProviderRegistry) throws -> (any CredentialProvider, [String: [String]]) {
        var options: [String: [String]] = [:]
        for argument in providerOptions {
            guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
                throw DCError(.usage, "expected KEY=VALUE", subject: argument)
            }
            options[String(argument[..<equals]), default: []].append(String(argument[argument.index(after: equals)...]))
        }
        if let testca {
            options["dir"] = [testca]
            return (try registry.provider(id: "testca"), options)
        }
        if let pkcs11 {
            options["uri"] = [pkcs11]
            if let layout { options["layout"] = [layout] }
            if !objects.isEmpty { options["tag"] = objects }
            if !pkcs11Modules.isEmpty { options["module"] = pkcs11Modules }
            if pin.allowFinalPinTry { options["allow-final-pin-try"] = ["true"] }
            return (try registry.provider(id: "pkcs11"), options)
        }
        if let provider {
            return (try ProviderDirectory.provider(provider, registry: registry), options)
        }
        var remainingTags = tags[...]
        options["pem"] = pem + pkcs12.map { $0.contains("=") ? $0 : "\(remainingTags.removeFirst())=\($0)" }
        if let manifest { options["manifest"] = [manifest] }
        if !classify.isEmpty { options["classify"] = classify }
        options = options.filter { !$0.value.isEmpty }
        return (try registry.provider(id: "pem"), options)
    }

    /// Runs the source's provider. A token's PIN comes from the PIN options, anything else's
    /// secret from `passphrase`.
    func provide(passphrase: any PassphraseSource) async throws -> ProvidedCredential {
        let (provider, options) = try resolve(ProviderDirectory.registry())
        let secret = pkcs11 != nil ? try pin.policy().pin : passphrase
        return try await provider.provide(ProviderRequest(options: options, passphrase: secret))
    }
}

/// The providers this tool knows: the built-in ones and exec providers found on
/// `DCPROVISION_PROVIDER_PATH`.
enum ProviderDirectory {
    static var searchPath: String? { ProcessInfo.processInfo.environment["DCPROVISION_PROVIDER_PATH"] }

    static func registry() -> ProviderRegistry {
        var registry = ProviderRegistry([PEMFileProvider(), TestCAProvider(), PKCS11Provider()])
        for found in ExecProvider.discover(searchPath: searchPath) where (try? registry.provider(id: found.name)) == nil {
            registry.register(ExecProvider(path: found.path, id: found.name))
        }
        return registry
    }

    static func provider(_ id: String, registry: ProviderRegistry) throws -> any CredentialProvider {
        if id.hasPrefix("exec:") {
            let path = String(id.dropFirst("exec:".count))
            guard !path.isEmpty else { throw DCError(.usage, "expected exec:PATH") }
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            guard access(absolute, X_OK) == 0 else {
                throw DCError(.fileNotFound, "no executable provider here", subject: path)
            }
            return ExecProvider(path: absolute)
        }
        return try registry.provider(id: id)
    }
}
