import CredentialCoding
import DerivedCredentials
import Foundation

/// Certificates and keys from files (id `pem`): PEM, DER and PKCS#12, tagged on the command line
/// (`pem` option, `TAG=CERT[,KEY]`), in a ``Manifest``, or classified (`classify`, `CERT[,KEY]`).
///
/// Several escrow sources form the escrow key history, ordered by validity: the newest is the
/// escrow entry, the rest its history, newest first. When classifying, several encryption
/// certificates are ordered the same way: the newest is the encryption entry, the rest go to
/// escrow. Any other tag given twice is an error naming both files.
public struct PEMFileProvider: CredentialProvider {
    /// The provider; it has no state.
    public init() {}

    /// Id `pem`, with the repeatable options `pem` and `classify` and the single option `manifest`.
    public let descriptor = ProviderDescriptor(
        id: "pem", displayName: "PEM, DER and PKCS#12 files", version: "1",
        options: [
            ProviderOption(
                name: "pem", summary: "TAG=CERT[,KEY]: a tagged certificate (PEM, DER or PKCS#12) and key",
                repeatable: true),
            ProviderOption(name: "manifest", summary: "a JSON manifest of tagged files (docs/MANIFEST.md)"),
            ProviderOption(
                name: "classify", summary: "CERT[,KEY]: a file whose tag is read from its key usage", repeatable: true),
        ])

    /// Reads every file named by the request's options, tags or classifies each, and assembles the
    /// entries. Throws `DCError/Code/usage` when no file is given, and the reader's errors for a bad file.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        var sources = try request.values("pem").map { try FileSource(argument: $0) }
        var manifest: Manifest?
        if let path = try request.value("manifest") {
            let loaded = try Manifest.load(request.resolve(path))
            manifest = loaded.manifest
            sources += loaded.sources
        }
        sources += try request.values("classify").map { try FileSource(argument: $0, tagged: false) }
        sources = sources.map {
            FileSource(tag: $0.tag, certificate: request.resolve($0.certificate), key: $0.key.map(request.resolve))
        }
        guard !sources.isEmpty else {
            throw DCError(
                .usage, "no files given", remedy: .giveFiles)
        }

        let reader = CredentialReader(passphrase: request.passphrase)
        var loaded: [Loaded] = []
        for source in sources {
            try Task.checkCancellation()
            let material = try Self.load(source, reader: reader)
            let pair = try material.certifiedKey()
            let details = try CertificateDetails(pair.certificate)
            let tag = try source.tag ?? Classification.tag(details, source: source.name)
            loaded.append(
                Loaded(
                    source: source, tag: tag, classified: source.tag == nil, pair: pair, details: details,
                    material: material))
        }
        return try Self.assemble(loaded, manifest: manifest)
    }

    struct Loaded {
        var source: FileSource
        var tag: CredentialTag
        var classified: Bool
        var pair: CertifiedKey
        var details: CertificateDetails
        var material: KeyMaterial
    }

    static func load(_ source: FileSource, reader: CredentialReader) throws -> KeyMaterial {
        let certificates = try reader.read(file: source.certificate)
        guard let keyFile = source.key else { return certificates }
        let key = try reader.read(file: keyFile)
        guard let privateKey = key.privateKey else {
            throw DCError(.missingMaterial, "no private key found", subject: keyFile)
        }
        if certificates.privateKey != nil {
            throw DCError(
                .multipleKeys, "the certificate file holds a private key too", subject: source.certificate,
                hint: "give the key once")
        }
        return try KeyMaterial.paired(
            certificates: certificates.certificates + key.certificates, privateKey: privateKey, source: source.name)
    }

    static func assemble(_ loaded: [Loaded], manifest: Manifest?) throws -> ProvidedCredential {
        // Classified encryption certificates: the newest is the encryption entry (unless one was
        // tagged explicitly), the others go to escrow.
        var items = loaded
        let explicitEncryption = items.contains { !$0.classified && $0.tag == .encryption }
        let classifiedEncryption = items.indices.filter { items[$0].classified && items[$0].tag == .encryption }
            .sorted { newer(items[$0].details, items[$1].details) }
        for (rank, index) in classifiedEncryption.enumerated() where explicitEncryption || rank > 0 {
            items[index].tag = .escrow
        }

        var entries: [CredentialEntry] = []
        var friendlyNames: [CredentialTag: String] = [:]
        var chain: [Certificate] = []
        for tag in CredentialTag.allCases {
            let group = items.filter { $0.tag == tag }.sorted { newer($0.details, $1.details) }
            guard let current = group.first else { continue }
            if tag != .escrow && group.count > 1 {
                throw DCError(
                    .duplicateTag, "tag '\(tag)' is given more than once",
                    subject: group.map(\.source.name).joined(separator: " and "),
                    hint: "each tag may be used once; only escrow takes several (its key history)")
            }
            entries.append(
                try CredentialEntry(
                    tag: tag, certificate: current.pair.certificate, privateKey: current.pair.privateKey,
                    keyHistory: group.dropFirst().map(\.pair)))
            if let name = current.material.friendlyNames.first { friendlyNames[tag] = name }
            for item in group { chain += item.material.chain.filter { !chain.contains($0) } }
        }
        let primary = items.first { $0.tag == .authentication } ?? items[0]
        let expiry = items.filter { $0.tag != .escrow }.compactMap(\.details.notAfter).min()
        return ProvidedCredential(
            entries: entries, chain: chain,
            suggestedName: manifest?.name ?? primary.details.commonName,
            suggestedSerialNumber: manifest?.serialNumber ?? primary.details.serialNumber,
            suggestedExpirationDate: expiry, friendlyNames: friendlyNames)
    }

    /// Newer first: later notBefore, then later notAfter.
    static func newer(_ a: CertificateDetails, _ b: CertificateDetails) -> Bool {
        let (aStart, bStart) = (a.notBefore ?? .distantPast, b.notBefore ?? .distantPast)
        if aStart != bStart { return aStart > bStart }
        return (a.notAfter ?? .distantPast) > (b.notAfter ?? .distantPast)
    }
}
