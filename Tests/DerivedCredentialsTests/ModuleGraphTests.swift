import Foundation
import TestSupport
import Testing

/// The delivery protocol is what both sides link, so it stays free of the token code: a client or
/// a tool that only speaks the protocol does not link `AuthTokens` or `IdentityTokens`. The
/// provider's runtime over it (`ProviderService`) is where the tokens come in.
@Suite("The module graph", .ownThreads, .timeLimit(.minutes(1)))
struct ModuleGraphTests {
    /// The modules `CredentialDelivery` must not import, and `Package.swift` must not give it.
    static let tokenModules = ["AuthTokens", "IdentityTokens"]

    @Test("CredentialDelivery imports no token module")
    func protocolImportsNoTokens() throws {
        let files = Repository.files(under: "Sources/CredentialDelivery").filter { $0.hasSuffix(".swift") }
        #expect(files.count > 5)
        for file in files {
            for line in try Repository.text(file).split(separator: "\n") {
                let words = line.split(whereSeparator: { $0 == " " || $0 == "." }).map(String.init)
                guard let at = words.firstIndex(of: "import"), at + 1 < words.count else { continue }
                let imported = words[(at + 1)...].first { $0.first?.isUppercase == true } ?? ""
                #expect(!Self.tokenModules.contains(imported), "\(file) imports \(imported)")
            }
        }
    }

    @Test("Package.swift gives CredentialDelivery the core, SystemSupport and CredentialCoding only")
    func protocolDependencies() throws {
        let manifest = try Repository.text("Package.swift")
        let target = try #require(
            manifest.firstMatch(of: /\.target\(\s*name: "CredentialDelivery",\s*dependencies: \[([^\]]*)\]/),
            "Package.swift has no CredentialDelivery target written as .target(name:dependencies:)")
        let dependencies = target.output.1.split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines.union(CharacterSet(charactersIn: "\"")))
        }.filter { !$0.isEmpty }
        #expect(dependencies.sorted() == ["CredentialCoding", "DerivedCredentials", "SystemSupport"])
    }
}
