import CredentialCoding
import DerivedCredentials
import Foundation

/// A sample vendor provider: the (fictional) Acme vault keeps each user's derived credential as
/// one PKCS#12 file per tag, `<vault>/<user>/<tag>.p12`, all under the user's vault passphrase.
///
/// It shows what a provider does: declare its options, check them, ask for the passphrase only
/// when it needs it, convert strictly with `CredentialReader`, honour cancellation, and report
/// failures as `DCError`s. Register it next to the built-in ones:
///
/// ```swift
/// var registry = ProviderRegistry([PEMFileProvider(), TestCAProvider(), AcmeVaultProvider()])
/// ```
public struct AcmeVaultProvider: CredentialProvider {
    public init() {}

    public let descriptor = ProviderDescriptor(
        id: "acme-vault", displayName: "Acme vault (sample vendor provider)", version: "1.0",
        options: [
            ProviderOption(name: "vault", summary: "the vault directory", required: true),
            ProviderOption(name: "user", summary: "the user whose credential to fetch", required: true),
        ])

    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        let user = try request.value("user")!
        guard !user.isEmpty, !user.contains("/"), !user.hasPrefix(".") else {
            throw DCError(.usage, "invalid user name", subject: user)
        }
        let folder = (request.resolve(try request.value("vault")!) as NSString).appendingPathComponent(user)
        guard FileManager.default.fileExists(atPath: folder) else {
            throw DCError(.fileNotFound, "the vault has no credential for this user", subject: folder)
        }
        let reader = CredentialReader(passphrase: request.passphrase)
        var entries: [CredentialEntry] = []
        for tag in CredentialTag.allCases {
            try Task.checkCancellation()
            let file = (folder as NSString).appendingPathComponent("\(tag).p12")
            guard FileManager.default.fileExists(atPath: file) else { continue }
            let pair = try reader.read(file: file).certifiedKey()
            entries.append(try CredentialEntry(tag: tag, certificate: pair.certificate, privateKey: pair.privateKey))
        }
        guard !entries.isEmpty else {
            throw DCError(.missingMaterial, "no <tag>.p12 files in the user's vault", subject: folder)
        }
        return ProvidedCredential(entries: entries, suggestedName: "\(user) (Acme vault)", suggestedSerialNumber: user)
    }
}
