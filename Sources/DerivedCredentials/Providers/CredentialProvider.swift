import FoundationEssentials

/// Where a credential comes from: files, a smart card, a CA, a vendor's service.
///
/// A provider is a `Sendable` value with a ``descriptor`` and one asynchronous call. It returns
/// entries already converted (DER certificates, PKCS#8 keys) plus suggestions for the credential's
/// name, serial number and expiry. It must honour task cancellation (throw `CancellationError`)
/// and report failures as ``DCError``s. Every provider should pass the conformance kit in
/// `DerivedCredentialsTesting`.
public protocol CredentialProvider: Sendable {
    /// What the provider is and which options it takes; the same on every call.
    var descriptor: ProviderDescriptor { get }
    /// Reads or makes the credential `request` describes. Throws a ``DCError`` on failure and
    /// `CancellationError` when the task is cancelled.
    func provide(_ request: ProviderRequest) async throws -> ProvidedCredential
}

/// What a provider is and which options it takes.
public struct ProviderDescriptor: Sendable, Hashable, Codable {
    /// A stable identifier: lowercase letters, digits and `-` (`pem`, `testca`, `exec:/path`).
    public var id: String
    /// The name shown to people, such as `PEM, DER and PKCS#12 files`.
    public var displayName: String
    /// The provider's version, free text shown by `dcprovision providers`.
    public var version: String
    /// The options the provider accepts; ``ProviderRequest/check(against:)`` refuses any other.
    public var options: [ProviderOption]

    /// A descriptor with these fields as given; `id` is not checked here.
    public init(id: String, displayName: String, version: String, options: [ProviderOption] = []) {
        self.id = id
        self.displayName = displayName
        self.version = version
        self.options = options
    }
}

/// One option a provider takes, passed as `KEY=VALUE` (`--option KEY=VALUE` on the command line).
public struct ProviderOption: Sendable, Hashable, Codable {
    /// The option's key, as written before `=`.
    public var name: String
    /// What the option means, in one line, for listings and error hints.
    public var summary: String
    /// Whether the option may be given several times.
    public var repeatable: Bool
    /// Whether a request without this option is refused.
    public var required: Bool
    /// The option's previous name, still accepted (hidden: not listed, not encoded) for one
    /// release. Read both with ``ProviderRequest/value(_:formerly:)``.
    public var formerName: String?

    private enum CodingKeys: String, CodingKey {
        case name, summary, repeatable, required
    }

    /// An option called `name`, described by `summary`; `formerName` is an old name still accepted.
    public init(
        name: String, summary: String, repeatable: Bool = false, required: Bool = false, formerName: String? = nil
    ) {
        self.name = name
        self.summary = summary
        self.repeatable = repeatable
        self.required = required
        self.formerName = formerName
    }
}

/// The input of ``CredentialProvider/provide(_:)``.
public struct ProviderRequest: Sendable {
    /// Option values by name, in the order given.
    public var options: [String: [String]]
    /// Where a passphrase or PIN comes from if the provider needs one. Providers ask only when
    /// they need it and never retry a refused one.
    public var passphrase: any PassphraseSource
    /// The directory relative paths in options are resolved against.
    public var workingDirectory: String
    /// Told how far slow work has come (the step, and `done` of `total` where it counts, such as
    /// keys generated), by a provider that can say; nil when nobody asks. See ``report(_:done:of:)``.
    public var progress: (@Sendable (ProviderProgress) -> Void)?

    /// A request with these options, no passphrase by default, and the process's current directory.
    public init(
        options: [String: [String]] = [:], passphrase: any PassphraseSource = NoPassphrase(),
        workingDirectory: String = FileManager.default.currentDirectoryPath,
        progress: (@Sendable (ProviderProgress) -> Void)? = nil
    ) {
        self.options = options
        self.passphrase = passphrase
        self.workingDirectory = workingDirectory
        self.progress = progress
    }

    /// Tells whoever asked (``progress``) which step the provider is on, and how far it has come
    /// when it can count. Cheap when nobody asked.
    public func report(_ step: String, done: Int? = nil, of total: Int? = nil) {
        progress?(ProviderProgress(step, done: done, of: total))
    }

    /// The single value of `name`, or nil; an error when it was given more than once.
    public func value(_ name: String) throws -> String? {
        guard let values = options[name] else { return nil }
        guard values.count == 1 else {
            throw DCError(
                .usage, "option '\(name)' was given \(values.count) times; it takes one value",
                remedy: .giveOptionOnce(name))
        }
        return values[0]
    }

    /// The single value of the required option `name`: an error when it is missing or was given
    /// more than once (`DCError/Code/usage`).
    public func requiredValue(_ name: String) throws -> String {
        guard let value = try value(name) else {
            throw DCError(.usage, "the option '\(name)' is missing", remedy: .giveOption(name))
        }
        return value
    }

    /// Every value given for `name`, in order; empty when it was not given.
    public func values(_ name: String) -> [String] { options[name] ?? [] }

    /// The single value of `name`, or of its former name `old`; an error when both are given.
    public func value(_ name: String, formerly old: String) throws -> String? {
        guard options[old] != nil else { return try value(name) }
        guard options[name] == nil else {
            throw DCError(.usage, "option '\(old)' is the former name of '\(name)'", hint: "give '\(name)' only")
        }
        return try value(old)
    }

    /// Refuses options the descriptor does not list, and missing required ones.
    public func check(against descriptor: ProviderDescriptor) throws {
        let known = Set(descriptor.options.flatMap { [$0.name] + ($0.formerName.map { [$0] } ?? []) })
        for name in options.keys.sorted() where !known.contains(name) {
            throw DCError(
                .usage, "provider '\(descriptor.id)' has no option '\(name)'",
                hint: "its options: \(descriptor.options.map(\.name).joined(separator: ", "))")
        }
        for option in descriptor.options {
            let given = values(option.name) + (option.formerName.map(values) ?? [])
            if option.required && given.isEmpty {
                throw DCError(
                    .usage, "provider '\(descriptor.id)' needs the option '\(option.name)'",
                    remedy: .addOption(option.name, summary: option.summary))
            }
            if !option.repeatable && given.count > 1 {
                throw DCError(
                    .usage, "option '\(option.name)' of provider '\(descriptor.id)' takes one value",
                    remedy: .giveOptionOnce(option.name))
            }
        }
    }

    /// `KEY=VALUE` arguments as options, each key to its values in order; `what` names the flag
    /// in the error for an argument without a key.
    public static func options(parsing arguments: [String], what: String = "KEY=VALUE") throws -> [String: [String]] {
        var options: [String: [String]] = [:]
        for argument in arguments {
            guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
                throw DCError(
                    .usage, "expected \(what)", subject: argument.escapingControlCharacters,
                    hint: "write the option's name, '=' and its value")
            }
            options[String(argument[..<equals]), default: []].append(String(argument[argument.index(after: equals)...]))
        }
        return options
    }

    /// `path` resolved against ``workingDirectory``.
    public func resolve(_ path: String) -> String {
        path.hasPrefix("/") ? path : PathText.appending(path, to: workingDirectory)
    }
}

/// What a provider returns: converted entries and suggestions for the credential around them.
public struct ProvidedCredential: Sendable {
    /// The converted entries; their tags are distinct if the provider is well behaved, which
    /// ``credential(name:serialNumber:expirationDate:)`` checks.
    public var entries: [CredentialEntry]
    /// Certificates that came along but are not entries (issuing CAs, chains).
    public var chain: [Certificate]
    /// A name found in the source, used when the caller gives none.
    public var suggestedName: String?
    /// A serial number found in the source, used when the caller gives none.
    public var suggestedSerialNumber: String?
    /// An expiration date found in the source, used when the caller gives none.
    public var suggestedExpirationDate: Date?
    /// For each tag, a name found inside the source (a PKCS#12 friendly name), as found.
    public var friendlyNames: [CredentialTag: String]
    /// What the person running the command should know that did not stop it, one line each
    /// (such as a card certificate whose revocation status could not be checked, allowed by
    /// name); the command-line tools print them as warnings.
    public var warnings: [String]

    /// A result holding `entries` and whatever the source suggested.
    public init(
        entries: [CredentialEntry], chain: [Certificate] = [], suggestedName: String? = nil,
        suggestedSerialNumber: String? = nil, suggestedExpirationDate: Date? = nil,
        friendlyNames: [CredentialTag: String] = [:], warnings: [String] = []
    ) {
        self.warnings = warnings
        self.entries = entries
        self.chain = chain
        self.suggestedName = suggestedName
        self.suggestedSerialNumber = suggestedSerialNumber
        self.suggestedExpirationDate = suggestedExpirationDate
        self.friendlyNames = friendlyNames
    }

    /// The credential, with explicit values taking precedence over the provider's suggestions.
    public func credential(name: String? = nil, serialNumber: String? = nil, expirationDate: Date? = nil) throws
        -> Credential
    {
        try Credential(
            name: name ?? suggestedName ?? "", serialNumber: serialNumber ?? suggestedSerialNumber ?? "",
            expirationDate: expirationDate ?? suggestedExpirationDate, entries: entries)
    }
}

/// Providers by id. The command-line tools register the built-in ones and add exec providers
/// found on `DCPROVISION_PROVIDER_PATH`.
public struct ProviderRegistry: Sendable {
    private var providers: [String: any CredentialProvider] = [:]

    /// A registry holding `providers`; a later one replaces an earlier one with the same id.
    public init(_ providers: [any CredentialProvider] = []) {
        for provider in providers { register(provider) }
    }

    /// Adds `provider` under its descriptor's id, replacing any provider already there.
    public mutating func register(_ provider: any CredentialProvider) {
        providers[provider.descriptor.id] = provider
    }

    /// The provider registered as `id`. Throws ``DCError/Code/usage``, listing the known ids, if none is.
    public func provider(id: String) throws -> any CredentialProvider {
        guard let provider = providers[id] else {
            throw DCError(
                .usage, "no provider '\(id.escapingControlCharacters)'",
                hint:
                    "use one of: \(ids.joined(separator: ", ")); or put an executable dcprovider-\(id.escapingControlCharacters) in a directory on DCPROVISION_PROVIDER_PATH"
            )
        }
        return provider
    }

    /// The registered ids, sorted.
    public var ids: [String] { providers.keys.sorted() }
    /// The registered providers, in the order of their sorted ids.
    public var all: [any CredentialProvider] { ids.compactMap { providers[$0] } }
}

/// How far a provider's slow work has come, for a person watching a terminal: the step it is on
/// (`logging in to PIV Card`, `issuing keys`) and, for a step that counts, how many of how many.
public struct ProviderProgress: Sendable, Equatable {
    /// What the provider is doing now, in a few words.
    public var step: String
    /// How many of ``total`` are done; nil for a step that cannot count (one call to a card).
    public var done: Int?
    /// How many there are; nil when not known.
    public var total: Int?

    /// The step `step`, `done` of `total` when it counts.
    public init(_ step: String, done: Int? = nil, of total: Int? = nil) {
        self.step = step
        self.done = done
        self.total = total
    }
}
