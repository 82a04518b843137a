import CredentialCoding
import DerivedCredentials
import Foundation

/// The test CA as a provider (id `testca`): each call issues a fresh four-tag credential from the
/// CA in the `dir` option.
public struct TestCAProvider: CredentialProvider {
    /// The provider; it has no state. The CA is opened from `dir` on each call.
    public init() {}

    /// Id `testca`: the required `dir`, and `common-name`, `key-algorithm`, `escrow-history`,
    /// `validity-days`, `email` and `negative`.
    public let descriptor = ProviderDescriptor(
        id: "testca", displayName: "Test CA (for CI; never trust it)", version: "1",
        options: [
            ProviderOption(name: "dir", summary: "the test CA directory (dcprovision testca init DIR)", required: true),
            ProviderOption(name: "common-name", summary: "the subject's CN (default: Test User)"),
            ProviderOption(
                name: "key-algorithm", summary: "p256, p384, rsa2048, rsa3072 (default: the CA's)",
                formerName: "algorithm"),
            ProviderOption(name: "escrow-history", summary: "retired escrow pairs to issue, 0-20 (default 0)"),
            ProviderOption(name: "validity-days", summary: "certificate lifetime in days (default 365)"),
            ProviderOption(name: "email", summary: "an rfc822Name for the subjectAltName"),
            ProviderOption(
                name: "negative",
                summary: "a deliberately broken profile for testing other tools: "
                    + NegativeProfile.allCases.map(\.rawValue).joined(separator: ", ")),
        ])

    /// Opens the CA in `dir`, issues a fresh credential with new keys and records it in the CA's
    /// database (``TestCA/record(_:cardSerial:archiving:now:)``). Throws
    /// `DCError/Code/fileNotFound` if `dir` is not a test CA, `DCError/Code/usage` for a bad option.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try await provide(request, beforeRecording: { _ in })
    }

    /// Issues as ``provide(_:)`` does, and hands the credential to `beforeRecording` before it is
    /// recorded: a caller that writes it somewhere does that first, so that a credential it could
    /// not write is never in the CA's database (and one it wrote can be taken back if recording
    /// fails).
    public func provide(
        _ request: ProviderRequest, beforeRecording: (ProvidedCredential) throws -> Void
    ) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        try Task.checkCancellation()
        let ca = try TestCA(directory: request.resolve(try request.requiredValue("dir")))
        let provided = try ca.issue(try Self.issueRequest(from: request))
        // Recorded, so that the CA can revoke what it handed out and answer OCSP for it; the
        // encryption keys are archived when the CA has a recovery certificate.
        try beforeRecording(provided)
        let encryption = provided.entries.filter { $0.tag == .encryption || $0.tag == .escrow }.flatMap {
            [$0.certifiedKey] + $0.keyHistory
        }
        try ca.record(
            Dictionary(
                uniqueKeysWithValues: provided.entries.map {
                    ($0.tag, [$0.certificate] + $0.keyHistory.map(\.certificate))
                }
            ), archiving: encryption)
        return provided
    }

    /// Parses the provider options into an issue request.
    public static func issueRequest(from request: ProviderRequest) throws -> TestCAIssueRequest {
        var issue = TestCAIssueRequest(progress: { request.report("issuing keys", done: $0, of: $1) })
        if let name = try request.value("common-name") { issue.commonName = name }
        if let algorithm = try request.value("key-algorithm", formerly: "algorithm") {
            guard let parsed = KeyAlgorithm(rawValue: algorithm) else {
                throw DCError(
                    .usage, "unknown key algorithm '\(algorithm)'",
                    hint: "use \(KeyAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            issue.algorithm = parsed
        }
        if let history = try request.value("escrow-history") {
            guard let count = Int(history) else {
                throw DCError(.usage, "escrow-history must be a number", hint: "give 0 to 20")
            }
            issue.escrowHistory = count
        }
        if let days = try request.value("validity-days") {
            guard let count = Int(days) else {
                throw DCError(.usage, "validity-days must be a number", hint: "give a number of days, such as 365")
            }
            issue.validityDays = count
        }
        issue.email = try request.value("email")
        if let negative = try request.value("negative") {
            guard let profile = NegativeProfile(rawValue: negative) else {
                throw DCError(
                    .usage, "unknown negative profile '\(negative)'",
                    hint: "use \(NegativeProfile.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            issue.negative = profile
        }
        return issue
    }
}

extension TestCAProvider: RecoveringProvider {
    /// Options: `dir` and `recovery-key` (a file holding the recovery private key, PEM or DER,
    /// opened with the request's passphrase when encrypted). Returns every pair the CA archived
    /// for `subject`, newest first, at most 20.
    public func recover(_ request: ProviderRequest, subject: [UInt8]) async throws -> [CertifiedKey] {
        try Task.checkCancellation()
        guard let dir = request.options["dir"]?.first, let keyFile = request.options["recovery-key"]?.first else {
            throw DCError(.usage, "recovering needs the test CA's dir and a recovery-key file")
        }
        let ca = try TestCA(directory: request.resolve(dir))
        guard
            let key = try CredentialReader(passphrase: request.passphrase).read(file: request.resolve(keyFile))
                .privateKey
        else {
            throw DCError(.missingMaterial, "no private key", subject: keyFile)
        }
        return try ca.recoverAll(subject: subject, with: key)
    }
}
