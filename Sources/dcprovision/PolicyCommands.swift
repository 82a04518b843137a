import ArgumentParser
import CommandLineSupport
import CredentialDelivery
import DerivedCredentials
import Foundation
import ProviderService
import SchemeHandlers
import SystemSupport

/// The options every policy command takes: which client, and the message for its user.
struct PolicyTarget: ParsableArguments {
    @Option(help: ArgumentHelp("The managed client's URL scheme (dcclient init).", valueName: "scheme"))
    var clientScheme: URLScheme
    @Option(
        help: ArgumentHelp(
            "Why, for the app's user (at most 200 bytes, one line); authorize, unauthorize and retire clear it when not given, policy keeps it.",
            valueName: "text"))
    var message: String?

    /// Sets the client's policy with `change`, sends it now or queues it, and says which.
    func apply(keepingMessage: Bool = false, _ change: @escaping (inout ClientPolicy) -> Void) async throws {
        try await applyPolicy(
            clientScheme: clientScheme, message: message,
            keepingMessage: keepingMessage, change)
    }
}

/// Sets the policy of the client with `clientScheme` with `change` and `message` (nil clears the
/// message unless `keepingMessage`), sends it now or queues it, and says which. The one way the
/// policy commands and `terminate` change a client's policy.
func applyPolicy(
    clientScheme: URLScheme, message: String?, keepingMessage: Bool = false,
    _ change: @escaping (inout ClientPolicy) -> Void
) async throws {
    try PolicyText.check(message ?? "")
    let config = try ProviderConfig.load()
    let service = try service(brand: config.brand, scheme: config.scheme)
    let receipt = try await service.setPolicy(
        clientScheme: clientScheme, progress: { Console.say($0) },
        { policy in
            change(&policy)
            if let message {
                policy.message = message
            } else if !keepingMessage {
                policy.message = ""
            }
        })
    let record = receipt.record
    let acknowledgement = record.authAcknowledgement.flatMap { $0.sequence == record.policy.sequence ? $0 : nil }
    Console.say(
        "client \(record.clientId): \(record.policy.state) (policy \(record.policy.sequence)); \(acknowledgement.map { "acknowledged: \($0.state)" } ?? "not acknowledged yet")"
    )
}

/// `authorize`, `unauthorize` and `retire`: each sets a paired client's authorization state to
/// `Change.state`, with the message for its user, and does nothing else.
struct SetClientState<Change: ClientStateChange>: AsyncParsableCommand, OutputCommand {
    static var configuration: CommandConfiguration { Change.configuration }
    @OptionGroup var target: PolicyTarget
    @OptionGroup var output: OutputOptions

    func run() async throws { try await target.apply { $0.state = Change.state } }
}

/// The state one of those commands sets, and the command's name and abstract.
protocol ClientStateChange {
    static var configuration: CommandConfiguration { get }
    static var state: AuthState { get }
}

enum Authorize: ClientStateChange {
    static let configuration = CommandConfiguration(
        commandName: "authorize",
        abstract: "Authorize a paired client's app: its credential and secure files can be used.")
    static let state = AuthState.authorized
}

enum Unauthorize: ClientStateChange {
    static let configuration = CommandConfiguration(
        commandName: "unauthorize",
        abstract: "Withdraw a paired client's authorization: it reads nothing sensitive and is sent nothing.")
    static let state = AuthState.unauthorized
}

enum Retire: ClientStateChange {
    static let configuration = CommandConfiguration(
        commandName: "retire",
        abstract: "Retire a paired client: it erases its keys, credential and files; it must be set up afresh.")
    static let state = AuthState.retired
}

struct Policy: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "policy",
        abstract:
            "Set a paired client's auto-lock (how long its store stays unlocked) and how programs log in to its PKCS#11 token."
    )
    @OptionGroup var target: PolicyTarget
    @Option(help: ArgumentHelp("A duration, 1 s to 7 days; a bare number is seconds.", valueName: "duration"))
    var autoLock: DurationArgument<BareSeconds>?
    @Option(
        help: ArgumentHelp(
            "passphrase: programs log in to the PKCS#11 token with the store passphrase (the default); secure-services: its keys are usable whenever the client is authorized and unlocked, without a login.",
            valueName: "login"))
    var tokenLogin: TokenLogin?
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard autoLock != nil || tokenLogin != nil else {
            throw ValidationError("give --auto-lock, --token-login or both")
        }
    }

    func run() async throws {
        let seconds = try autoLock.map(Self.seconds)
        try await target.apply(keepingMessage: true) { policy in
            if let seconds { policy.autoLock = seconds }
            if let tokenLogin { policy.tokenLogin = tokenLogin }
        }
    }

    /// The auto-lock time in whole seconds, within the policy's range.
    static func seconds(_ duration: DurationArgument<BareSeconds>) throws -> Int {
        guard let seconds = duration.whole(.seconds), ClientPolicy.autoLockRange.contains(seconds) else {
            throw DCError(
                .usage, "'\(duration.text.escapingControlCharacters)' is not an auto-lock time",
                hint: "write 90s, 15m, 2h or 1d (1 s to 7 days)")
        }
        return seconds
    }
}
