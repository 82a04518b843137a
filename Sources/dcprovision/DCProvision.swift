import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import Logging
import SystemSupport

@main
struct DCProvision: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcprovision",
        abstract: "Provision derived credentials (certificates and keys, by tag) into a managed client.",
        discussion: Toolkit.exitStatuses,
        version: Toolkit.version,
        subcommands: [
            Demo.self, Send.self, HandleURL.self, Register.self, Pair.self, Unregister.self, Status.self, Convert.self,
            Inspect.self,
            Providers.self, TestCACommand.self, Tokens.self, Objects.self,
        ]
    )

    /// Flags renamed so that one idea has one name on both tools (docs/CLI.md); the old names
    /// keep working, hidden, for one release.
    static let formerNames = FormerNames([
        "register": ["scheme": "provider-scheme", "pkcs11-module": "module"],
        "send": ["callback-scheme": "provider-scheme", "pkcs11-module": "module"],
        "convert": ["pkcs11-module": "module"],
        "inspect": ["pkcs11-module": "module"],
        "testca init": ["algorithm": "key-algorithm"],
        "testca issue": ["algorithm": "key-algorithm"],
    ])

    static func main() async {
        await main(formerNames.rewrite(Array(CommandLine.arguments.dropFirst())))
    }
}

/// Runs a command body, turning a ``DCError`` into one line on stderr and a sysexits status.
func runReportingErrors(_ body: () async throws -> Void) async throws {
    // A file-size limit (RLIMIT_FSIZE) must surface as EFBIG and a clean error, not a signal.
    signal(SIGXFSZ, SIG_IGN)
    do {
        try await body()
    } catch let error as DCError {
        printError(error.description)
        throw ExitCode(error.code.category.exitStatus)
    }
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data("dcprovision: \(line)\n".utf8))
}

struct GlobalOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Log what is being done to stderr.")
    var verbose = false

    func bootstrapLogging() {
        let level: Logger.Level = verbose ? .debug : .warning
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// Where a passphrase comes from: a file, an inherited descriptor, or a prompt the user asked for.
/// Never a flag's value.
struct PassphraseOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Read the passphrase from the first line of FILE.", valueName: "file"))
    var passphraseFile: String?

    @Option(help: ArgumentHelp("Read the passphrase from file descriptor N.", valueName: "n"))
    var passphraseFd: Int32?

    @Flag(help: "Prompt for the passphrase on the terminal (only when encrypted input needs one).")
    var passphrasePrompt = false

    func validate() throws {
        let count = [passphraseFile != nil, passphraseFd != nil, passphrasePrompt].filter { $0 }.count
        if count > 1 {
            throw ValidationError("give at most one of --passphrase-file, --passphrase-fd, --passphrase-prompt")
        }
    }

    func source() throws -> any PassphraseSource {
        if let passphraseFile { return FixedPassphrase(try SecretInput.read(file: passphraseFile)) }
        if let passphraseFd {
            return FixedPassphrase(try SecretInput.read(inheritedDescriptor: passphraseFd))
        }
        if passphrasePrompt { return TerminalPassphrase() }
        return NoPassphrase()
    }
}
