import DerivedCredentials

/// A credential entry described by files: `--pem TAG=CERT[,KEY]` or `--pkcs12 FILE --tag TAG`.
public struct FileSource: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// A certificate file and, optionally, a separate key file (otherwise the key is in the
        /// certificate file).
        case pem(certificate: String, key: String?)
        case pkcs12(String)
    }

    public var tag: CredentialTag
    public var kind: Kind

    public init(tag: CredentialTag, kind: Kind) {
        self.tag = tag
        self.kind = kind
    }

    /// Parses `TAG=CERT[,KEY]`.
    public init(pemArgument argument: String) throws {
        let (tag, rest) = try Self.splitTag(argument, form: "TAG=CERT[,KEY]")
        let files = rest.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let certificate = files.first, !certificate.isEmpty, files.count == 1 || !files[1].isEmpty else {
            throw DCError(.usage, "expected TAG=CERT[,KEY]", subject: argument)
        }
        self.init(tag: tag, kind: .pem(certificate: certificate, key: files.count == 2 ? files[1] : nil))
    }

    /// Parses `TAG=FILE` for PKCS#12.
    public init(pkcs12Argument argument: String) throws {
        let (tag, file) = try Self.splitTag(argument, form: "TAG=FILE")
        self.init(tag: tag, kind: .pkcs12(file))
    }

    private static func splitTag(_ argument: String, form: String) throws -> (CredentialTag, String) {
        guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
            throw DCError(.usage, "expected \(form)", subject: argument)
        }
        let name = argument[..<equals]
        guard let tag = CredentialTag(wireName: name) else {
            throw DCError(
                .usage, "unknown tag '\(name)'", subject: argument,
                hint: "tags are \(CredentialTag.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let rest = String(argument[argument.index(after: equals)...])
        guard !rest.isEmpty else { throw DCError(.usage, "expected \(form)", subject: argument) }
        return (tag, rest)
    }

    public var files: [String] {
        switch kind {
        case .pem(let certificate, let key): [certificate] + (key.map { [$0] } ?? [])
        case .pkcs12(let file): [file]
        }
    }
}

/// Entries loaded from file sources, with the extra certificates found next to them.
public struct LoadedEntries: Sendable {
    public var entries: [CredentialEntry]
    /// Certificates that came with the entries but are not leaves (chains, PKCS#12 CA certificates).
    public var chain: [Certificate]
    /// For each tag, the files it came from (the escrow history in order).
    public var sources: [CredentialTag: [String]]
    /// For each tag's current pair, the PKCS#12 friendly name, as found (escape before printing).
    public var friendlyNames: [CredentialTag: String] = [:]
}

extension CredentialReader {
    /// Loads tagged entries. A repeated `escrow` source adds to the escrow key history (the first
    /// is the current escrow pair, the rest retired pairs in the order given); any other repeated
    /// tag is an error.
    public func loadEntries(_ sources: [FileSource]) throws -> LoadedEntries {
        var pairs: [CredentialTag: [CertifiedKey]] = [:]
        var files: [CredentialTag: [String]] = [:]
        var chain: [Certificate] = []
        var names: [CredentialTag: String] = [:]
        for source in sources {
            if source.tag != .escrow, pairs[source.tag] != nil {
                throw DCError(
                    .duplicateTag, "tag '\(source.tag)' is given more than once", subject: source.files.joined(separator: ","),
                    hint: "each tag may be used once; only escrow takes several (its key history)")
            }
            let material = try load(source)
            let pair = try material.certifiedKey()
            pairs[source.tag, default: []].append(pair)
            files[source.tag, default: []] += source.files
            if names[source.tag] == nil, let name = material.friendlyNames.first { names[source.tag] = name }
            chain += material.chain.filter { !chain.contains($0) }
        }
        let entries = try CredentialTag.allCases.compactMap { tag -> CredentialEntry? in
            guard let list = pairs[tag], let current = list.first else { return nil }
            return try CredentialEntry(
                tag: tag, certificate: current.certificate, privateKey: current.privateKey,
                keyHistory: Array(list.dropFirst()))
        }
        return LoadedEntries(entries: entries, chain: chain, sources: files, friendlyNames: names)
    }

    private func load(_ source: FileSource) throws -> KeyMaterial {
        switch source.kind {
        case .pkcs12(let file):
            return try read(file: file)
        case .pem(let certificateFile, nil):
            return try read(file: certificateFile)
        case .pem(let certificateFile, let keyFile?):
            let certificates = try read(file: certificateFile)
            let key = try read(file: keyFile)
            guard let privateKey = key.privateKey else {
                throw DCError(.missingMaterial, "no private key found", subject: keyFile)
            }
            if certificates.privateKey != nil {
                throw DCError(
                    .multipleKeys, "the certificate file holds a private key too", subject: certificateFile,
                    hint: "give the key once")
            }
            return try KeyMaterial.pairing(
                certificates: certificates.certificates + key.certificates, privateKey: privateKey,
                source: "\(certificateFile),\(keyFile)")
        }
    }
}
