import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import ExecProvider
import Foundation

struct Providers: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "providers",
        abstract: "List the built-in providers and the exec providers found on DCPROVISION_PROVIDER_PATH.")

    @OptionGroup var format: JSONOutputOptions
    @OptionGroup var sandbox: SandboxOptions

    struct Listing: Encodable {
        var id: String
        var kind: String
        var path: String?
        var descriptor: ProviderDescriptor?
        var problem: String?
    }

    @OptionGroup var output: OutputOptions

    func run() async throws {
        var listings: [Listing] = []
        for provider in sandbox.registry().all {
            if let exec = provider as? ExecProvider {
                do {
                    var quick = exec
                    quick.limits.timeout = .seconds(5)
                    let descriptor = try await quick.describe()
                    listings.append(
                        Listing(id: exec.descriptor.id, kind: "exec", path: exec.path, descriptor: descriptor))
                } catch {
                    listings.append(
                        Listing(id: exec.descriptor.id, kind: "exec", path: exec.path, problem: "\(error)"))
                }
            } else {
                listings.append(
                    Listing(id: provider.descriptor.id, kind: "built-in", descriptor: provider.descriptor))
            }
        }
        if format.json { return try printJSON("providers", listings) }
        for listing in listings {
            let name = listing.descriptor.map { "\($0.displayName), version \($0.version)" } ?? "unavailable"
            Console.print(
                "\(listing.id.escapingControlCharacters)  [\(listing.kind)]  \(name.escapingControlCharacters)")
            if let path = listing.path { Console.print("    path: \(path.escapingControlCharacters)") }
            if let problem = listing.problem { Console.print("    problem: \(problem.escapingControlCharacters)") }
            for option in listing.descriptor?.options ?? [] {
                let flags = [option.required ? "required" : nil, option.repeatable ? "repeatable" : nil].compactMap {
                    $0
                }
                let suffix = flags.isEmpty ? "" : " (\(flags.joined(separator: ", ")))"
                Console.print("    --option \(option.name)=…  \(option.summary)\(suffix)".escapingControlCharacters)
            }
        }
    }
}
