import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization
import SystemSupport

/// A provider that is a separate executable speaking a small versioned JSON protocol over
/// standard input and output (docs/PROVIDER-PROTOCOL.md), the way git credential helpers and
/// kubectl exec plug-ins work. Selected with `--provider exec:PATH`, or `--provider NAME` for an
/// executable `dcprovider-NAME` on `DCPROVISION_PROVIDER_PATH`.
///
/// The plug-in is not trusted: it runs with an argv array and no secret in its argv or
/// environment (a passphrase goes over stdin), under a timeout and an output cap, confined to
/// what the protocol gives it (`Confinement.plugIn(executable:namedPaths:relativeTo:temporaryDirectory:directories:)`:
/// the system, its own directory, the paths its options name, a private temporary directory);
/// its answer is parsed strictly and every certificate and key goes through the same strict
/// reader as files. Its stderr is passed on, line by line, with control characters escaped.
public struct ExecProvider: CredentialProvider {
    /// The plug-in executable, run directly with no arguments.
    public let path: String
    /// A local descriptor (`exec:PATH` unless an id was given) with no options;
    /// ``describe()`` asks the plug-in for its own.
    public let descriptor: ProviderDescriptor
    /// The timeout and output caps of each run of the plug-in.
    public var limits: ChildProcess.Limits
    /// Receives the plug-in's stderr, one escaped line at a time, and the warning that it runs
    /// unconfined.
    public var stderrHandler: @Sendable (String) -> Void
    /// Whether the plug-in may run only confined to its paths: on a kernel without Landlock it is
    /// then not started (`DCError.Code.sandboxUnavailable`) instead of running with a warning.
    public var requiresConfinement = false

    /// The file-name prefix that makes an executable on `DCPROVISION_PROVIDER_PATH` a provider: `dcprovider-NAME`.
    public static let namePrefix = "dcprovider-"

    /// A provider for the executable at `path`, known as `id` (default `exec:PATH`); nothing runs until it is asked.
    public init(
        path: String, id: String? = nil, limits: ChildProcess.Limits = ChildProcess.Limits(),
        stderrHandler: @escaping @Sendable (String) -> Void = ExecProvider.writeToStandardError
    ) {
        self.path = path
        self.limits = limits
        self.stderrHandler = stderrHandler
        let name = (path as NSString).lastPathComponent
        descriptor = ProviderDescriptor(
            id: id ?? "exec:\(path)", displayName: "\(name) (external)", version: "protocol \(Wire.version)",
            options: [])
    }

    /// Writes `line` and a newline to this process's standard error: the default ``stderrHandler``.
    @Sendable public static func writeToStandardError(_ line: String) {
        TerminalLine.makeRoom()
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// Asks the plug-in for its descriptor (`describe`).
    public func describe() async throws -> ProviderDescriptor {
        let response = try await exchange(operation: "describe", options: [:], passphrase: nil)
        guard let wire = response.descriptor else {
            throw protocolError("the describe answer has no descriptor")
        }
        return ProviderDescriptor(
            id: wire.id, displayName: wire.displayName, version: wire.version,
            options: (wire.options ?? []).map {
                ProviderOption(
                    name: $0.name, summary: $0.summary, repeatable: $0.repeatable ?? false,
                    required: $0.required ?? false)
            })
    }

    /// Options are passed through; the plug-in checks them. A passphrase is sent only when the
    /// request has a source that yields one.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try Task.checkCancellation()
        let passphrase = try request.passphrase.passphrase(for: descriptor.id)
        let response = try await exchange(
            operation: "provide", options: request.options, passphrase: passphrase,
            workingDirectory: request.workingDirectory)
        guard let credential = response.credential else { throw protocolError("the provide answer has no credential") }
        return try convert(credential)
    }

    // MARK: - Exchange

    /// One run of the plug-in: the request on its standard input, the answer from its standard
    /// output. It starts in `workingDirectory`, against which its options' relative paths resolve.
    func exchange(
        operation: String, options: [String: [String]], passphrase: SecretBytes?, certify: Wire.CertifyFields? = nil,
        subject: String? = nil, workingDirectory: String = FileManager.default.currentDirectoryPath
    ) async throws
        -> Wire.Response
    {
        let input = try Wire.request(
            operation: operation, options: options, passphrase: passphrase, certify: certify, subject: subject)
        if let reason = Confinement.unavailableReason {
            guard !requiresConfinement else {
                throw DCError(.sandboxUnavailable, "the plug-in was not started: \(reason)", subject: path)
            }
            Self.warnUnconfinedOnce { stderrHandler("warning: \(reason)") }
        }
        let temporary = try TemporaryPlace()
        defer { temporary.remove() }
        let outcome = try await ChildProcess.run(
            path, arguments: [], stdin: input,
            environment: ChildEnvironment.minimal().merging(["TMPDIR": temporary.path]) { $1 },
            currentDirectory: workingDirectory, limits: limits,
            confinement: .plugIn(
                executable: path, namedPaths: options.values.flatMap { $0 }, relativeTo: workingDirectory,
                temporaryDirectory: temporary.path))
        forward(outcome.stderr, truncated: outcome.stderrTruncated)
        if outcome.timedOut {
            throw DCError(
                .providerTimedOut, "the provider did not answer within \(limits.timeout) and was stopped", subject: path
            )
        }
        if outcome.stdoutOverflowed {
            throw protocolError("the provider wrote more than \(limits.stdoutLimit) bytes")
        }
        let decoded = Result { try Self.decode(outcome.stdout) }
        if case .signaled(let signal) = outcome.termination {
            throw DCError(.providerFailed, "the provider was killed by signal \(signal)", subject: path)
        }
        // A reported error wins over the exit status: it says why.
        if case .success(let response) = decoded, let failure = response.error {
            throw DCError(
                Self.code(for: failure.code),
                "the provider reported \(failure.code.escapingControlCharacters): \(failure.message.escapingControlCharacters)",
                subject: path)
        }
        if case .exited(let status) = outcome.termination, status != 0 {
            throw DCError(.providerFailed, "the provider exited with status \(status)", subject: path)
        }
        do {
            return try decoded.get()
        } catch var error as DCError {
            error.subject = path
            throw error
        }
    }

    /// Runs `warn` the first time a plug-in of this process runs unconfined: one warning line per
    /// process, however many plug-ins it runs.
    static func warnUnconfinedOnce(_ warn: () -> Void) {
        let first = warnedUnconfined.withLock { warned in
            defer { warned = true }
            return !warned
        }
        if first { warn() }
    }
    private static let warnedUnconfined = Mutex(false)

    /// A private directory for one run of a plug-in, its `TMPDIR` and the one place it may write:
    /// made 0700 under this process's `TMPDIR` (or `/tmp`), removed with whatever the plug-in left.
    struct TemporaryPlace {
        let path: String

        init() throws {
            let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/tmp"
            var template = Array((base + "/dcprovider-XXXXXX").utf8CString)
            guard let made = mkdtemp(&template) else {
                throw DCError(
                    .cannotCreateOutput,
                    "cannot make the plug-in's temporary directory: \(String(cString: strerror(errno)))",
                    subject: base)
            }
            path = String(cString: made)
        }

        /// Removes the directory and what the plug-in left in it, confined to it (`Confinement.removeTree(_:)`).
        func remove() { Confinement.removeTree(path) }
    }

    /// Parses the answer strictly: one JSON object, the protocol version we speak.
    static func decode(_ bytes: [UInt8]) throws -> Wire.Response {
        guard !bytes.isEmpty else {
            throw DCError(.providerProtocol, "the provider gave no answer")
        }
        let response: Wire.Response
        do {
            response = try JSONDecoder().decode(Wire.Response.self, from: Data(bytes))
        } catch {
            throw DCError(
                .providerProtocol, "the provider's answer is not valid protocol JSON (truncated or malformed)")
        }
        guard response.protocol == Wire.version else {
            throw DCError(
                .providerProtocol,
                "the provider speaks protocol version \(response.protocol); this tool speaks \(Wire.version)")
        }
        return response
    }

    static func code(for name: String) -> DCError.Code {
        let known: [DCError.Code] = [
            .passphraseRequired, .wrongPassphrase, .invalid, .notReady, .serviceUnavailable, .fileNotFound,
            .permissionDenied, .usage, .possessionNotProven,
        ]
        return known.first { $0.name == name } ?? .providerFailed
    }

    func protocolError(_ message: String) -> DCError {
        DCError(.providerProtocol, message, subject: path)
    }

    func forward(_ stderr: [UInt8], truncated: Bool) {
        guard !stderr.isEmpty else { return }
        let name = (path as NSString).lastPathComponent
        for line in String(decoding: stderr, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true) {
            stderrHandler("\(name): \(line.escapingControlCharacters)")
        }
        if truncated { stderrHandler("\(name): (further output dropped)") }
    }

    // MARK: - Conversion

    func convert(_ credential: Wire.Credential) throws -> ProvidedCredential {
        let reader = CredentialReader()
        var seen = Set<CredentialTag>()
        var entries: [CredentialEntry] = []
        for (index, entry) in credential.entries.enumerated() {
            let place = "entry \(index)"
            guard let tag = CredentialTag(rawValue: entry.tag) else {
                throw protocolError("\(place) has an unknown tag '\(entry.tag.escapingControlCharacters)'")
            }
            guard seen.insert(tag).inserted else {
                throw DCError(.duplicateTag, "the provider returned tag '\(tag)' more than once", subject: path)
            }
            let current = try pair(entry.certificate, entry.privateKey, place: "\(tag)", reader: reader)
            let history = try (entry.keyHistory ?? []).enumerated().map {
                try pair(
                    $0.element.certificate, $0.element.privateKey, place: "\(tag) history \($0.offset)", reader: reader)
            }
            do {
                entries.append(
                    try CredentialEntry(
                        tag: tag, certificate: current.certificate, privateKey: current.privateKey, keyHistory: history)
                )
            } catch var error as DCError {
                error.subject = path
                throw error
            }
        }
        guard !entries.isEmpty else { throw protocolError("the provider returned no entries") }
        // Without a suggestion, the same rule as files and cards: the earliest expiry of the
        // certificates in use (escrow excluded: it may be expired).
        var expiry = try entries.filter { $0.tag != .escrow }.compactMap {
            try CertificateDetails($0.certificate).notAfter
        }.min()
        if let text = credential.expirationDate {
            guard let date = ISO8601DateFormatter().date(from: text) else {
                throw protocolError("expirationDate is not an ISO 8601 date")
            }
            expiry = date
        }
        return ProvidedCredential(
            entries: entries, suggestedName: credential.name, suggestedSerialNumber: credential.serialNumber,
            suggestedExpirationDate: expiry)
    }

    func pair(_ certificate: String, _ key: String, place: String, reader: CredentialReader) throws -> CertifiedKey {
        guard let certificateDER = Data(base64Encoded: certificate) else {
            throw protocolError("\(place): the certificate is not base64")
        }
        guard var keyDER = Data(base64Encoded: key).map(Array.init) else {
            throw protocolError("\(place): the private key is not base64")
        }
        defer { keyDER.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        let source = "\(path) (\(place))"
        let material = try KeyMaterial.paired(
            certificates: [try reader.certificate(der: Array(certificateDER), source: source)],
            privateKey: try reader.privateKey(pkcs8: keyDER, source: source), source: source)
        return try material.certifiedKey()
    }

    // MARK: - Certification

    // MARK: - Discovery

    /// Executables named `dcprovider-NAME` in the directories of `searchPath` (colon-separated,
    /// as `DCPROVISION_PROVIDER_PATH`), first one per name wins.
    public static func discover(searchPath: String?) -> [(name: String, path: String)] {
        guard let searchPath, !searchPath.isEmpty else { return [] }
        var found: [(String, String)] = []
        var names = Set<String>()
        for directory in searchPath.split(separator: ":").map(String.init) {
            guard let files = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for file in files.sorted() where file.hasPrefix(namePrefix) {
                let name = String(file.dropFirst(namePrefix.count))
                guard !name.isEmpty, name.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }),
                    !names.contains(name)
                else { continue }
                // Absolute: the plug-in starts in the request's working directory, not this one.
                let base =
                    directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
                let path = (base as NSString).appendingPathComponent(file)
                var info = stat()
                guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(path, X_OK) == 0 else {
                    continue
                }
                names.insert(name)
                found.append((name, path))
            }
        }
        return found
    }
}

extension ExecProvider: CertifyingProvider {
    /// The `challenge` operation: the CA plug-in issues the bytes the card signs, remembers them and
    /// accepts a proof over them in one `certify` only. The answer must be a dcprovision possession
    /// challenge (the context and at least 32 bytes), or it is a protocol error.
    public func challenge(_ request: ProviderRequest) async throws -> [UInt8] {
        try Task.checkCancellation()
        let passphrase = try request.passphrase.passphrase(for: descriptor.id)
        let response = try await exchange(
            operation: "challenge", options: request.options, passphrase: passphrase,
            workingDirectory: request.workingDirectory)
        guard let text = response.challenge, let bytes = Data(base64Encoded: text).map(Array.init),
            bytes.starts(with: PossessionCheck.challengeContext),
            bytes.count >= PossessionCheck.challengeContext.count + 32, bytes.count <= 4096
        else {
            throw protocolError("the challenge answer has no dcprovision possession challenge")
        }
        return bytes
    }

    /// The `certify` operation: a vendor's CA as an executable. The answer's certificates go
    /// through the strict reader; whether each is for the right key and subject is checked by the
    /// caller (the derive provider), which trusts no CA's word for it.
    public func certify(_ request: CertificationRequest) async throws -> Certification {
        try Task.checkCancellation()
        let base64 = { (bytes: [UInt8]) in Data(bytes).base64EncodedString() }
        let fields = Wire.CertifyFields(
            subject: base64(request.subject),
            publicKeys: Dictionary(
                uniqueKeysWithValues: request.publicKeys.map { ($0.key.rawValue, base64($0.value)) }),
            proof: .init(
                certificate: base64(request.proof.certificate.derBytes), challenge: base64(request.proof.challenge),
                signature: base64(request.proof.signature)))
        let passphrase = try request.request.passphrase.passphrase(for: descriptor.id)
        let response = try await exchange(
            operation: "certify", options: request.request.options, passphrase: passphrase, certify: fields,
            workingDirectory: request.request.workingDirectory)
        guard let answer = response.certification else {
            throw protocolError("the certify answer has no certification")
        }
        let reader = CredentialReader()
        let read = { (text: String, place: String) throws -> Certificate in
            guard let der = Data(base64Encoded: text) else {
                throw protocolError("\(place): the certificate is not base64")
            }
            return try reader.certificate(der: Array(der), source: "\(path) (\(place))")
        }
        var certificates: [CredentialTag: Certificate] = [:]
        for (name, text) in answer.certificates.sorted(by: { $0.key < $1.key }) {
            guard let tag = CredentialTag(rawValue: name) else {
                throw protocolError("the certification has an unknown tag '\(name.escapingControlCharacters)'")
            }
            certificates[tag] = try read(text, name)
        }
        let chain = try (answer.chain ?? []).enumerated().map { try read($0.element, "chain \($0.offset)") }
        return Certification(certificates: certificates, chain: chain)
    }
}

extension ExecProvider: RecoveringProvider {
    /// The `recover` operation: the plug-in returns the encryption pairs its CA archived for
    /// `subject`, newest first. Each pair goes through the strict reader and must match; more than
    /// `CredentialEntry.maximumKeyHistory` is a protocol error.
    public func recover(_ request: ProviderRequest, subject: [UInt8]) async throws -> [CertifiedKey] {
        try Task.checkCancellation()
        let passphrase = try request.passphrase.passphrase(for: descriptor.id)
        let response = try await exchange(
            operation: "recover", options: request.options, passphrase: passphrase,
            subject: Data(subject).base64EncodedString(), workingDirectory: request.workingDirectory)
        guard let recovered = response.recovered else {
            throw protocolError("the recover answer has no recovered pairs")
        }
        guard recovered.count <= CredentialEntry.maximumKeyHistory else {
            throw protocolError("the provider recovered more than \(CredentialEntry.maximumKeyHistory) pairs")
        }
        let reader = CredentialReader()
        return try recovered.enumerated().map {
            try pair($0.element.certificate, $0.element.privateKey, place: "recovered \($0.offset)", reader: reader)
        }
    }
}
