import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

/// A persistent two-level test CA (root → issuing CA) for CI pipelines, in a directory:
///
/// ```
/// DIR/            0700
///   testca.json   algorithm, organization, creation time
///   root.pem      root certificate
///   root.key      root key, PKCS#8 PEM, 0600
///   issuing.pem   issuing CA certificate
///   issuing.key   issuing CA key, PKCS#8 PEM, 0600
///   index.txt     what it issued, in OpenSSL's CA database format (see Database.swift)
///   credentials/  one record per credential handed out
///   crlnumber     the last CRL's number
///   recovery.pem  with key recovery: the certificate encryption keys are archived to
///   archive/      one SERIAL.cms per archived encryption pair (see Recovery.swift)
/// ```
///
/// It issues four-tag derived credentials following the FPKI derived-PIV profiles.
/// The CA keys are unencrypted: this CA is for tests and must never be trusted for anything else.
public struct TestCA: Sendable {
    /// What `testca.json` holds.
    public struct Metadata: Codable, Sendable {
        /// The directory format version; only 1 is opened.
        public var version: Int
        /// The algorithm of the CA keys, and of issued keys unless a request names another.
        public var algorithm: KeyAlgorithm
        /// The organization (`O=`) of the CA names and of issued subjects.
        public var organization: String
        /// When the CA was created.
        public var created: Date
        /// The OCSP responder URL put into issued certificates (authorityInfoAccess), if any.
        public var ocspURL: String?
        /// The CRL URL put into issued certificates (cRLDistributionPoints), if any.
        public var crlURL: String?

        /// ``ocspURL`` as a list, for a certificate profile.
        var ocspURLs: [String] { ocspURL.map { [$0] } ?? [] }
        /// ``crlURL`` as a list, for a certificate profile.
        var crlURLs: [String] { crlURL.map { [$0] } ?? [] }
    }

    /// The CA's directory, as given.
    public let directory: String
    /// The contents of `testca.json`.
    public let metadata: Metadata
    /// The self-signed root certificate (`root.pem`): the trust anchor for what this CA issues.
    public let rootCertificate: Certificate
    /// The issuing CA certificate (`issuing.pem`), signed by the root; it signs every credential.
    public let issuingCertificate: Certificate
    /// The certificate encryption keys are archived to (`recovery.pem`), or nil when this CA does
    /// not archive. Its private key is not in the CA's directory.
    public let recoveryCertificate: Certificate?
    let issuer: CertificateSigner
    let issuingNotAfter: Date

    /// NIST PKITS test policies (2.16.840.1.101.3.2.1.48.n): clearly test-only, never production OIDs.
    public static let policies = Dictionary(uniqueKeysWithValues: CredentialTag.allCases.map { ($0, policy($0)) })

    /// The policy OID of a certificate for `tag` (``policies``).
    static func policy(_ tag: CredentialTag) -> String {
        switch tag {
        case .authentication: "2.16.840.1.101.3.2.1.48.1"
        case .signing: "2.16.840.1.101.3.2.1.48.2"
        case .encryption, .escrow: "2.16.840.1.101.3.2.1.48.3"
        }
    }

    /// How far back the CA's validity starts, so that retired escrow pairs (up to 20, 90 days apart)
    /// lie inside it.
    static let backdating: TimeInterval = 7 * 365 * 86400

    /// Creates a new CA in `directory`, which must not exist or be empty. Nothing is left behind on
    /// failure. `ocspURL` and `crlURL` (`http://`) go into every certificate it issues, so that
    /// relying parties find its responder (``TestCA/ocspResponder(validity:)``) and CRL. With
    /// `recoveryCertificate`, the encryption keys it hands out are archived, sealed to it
    /// (``TestCA/recover(serial:with:)``).
    @discardableResult
    public static func initialize(
        at directory: String, algorithm: KeyAlgorithm = .p256, organization: String = "Derived Credentials Test",
        ocspURL: String? = nil, crlURL: String? = nil, recoveryCertificate: Certificate? = nil, now: Date = Date()
    ) throws -> TestCA {
        if let existing = try? FileManager.default.contentsOfDirectory(atPath: directory), !existing.isEmpty {
            throw DCError(
                .outputExists, "the directory is not empty; a test CA is never overwritten", subject: directory,
                hint: "choose a new directory")
        }
        for url in [ocspURL, crlURL].compactMap({ $0 }) where !RevocationSources.isAcceptable(url: url) {
            throw DCError(
                .usage, "'\(url.escapingControlCharacters)' is not an http:// URL",
                hint: "give http://host[:port][/path] (no spaces or commas)")
        }
        // All or nothing: a failure removes the directory it made, or what it wrote into an empty one.
        return try Rollback.allOrNothing { rollback in
            rollback.keep(directory)
            try AtomicFileSet.ensureDirectory(directory)
            guard chmod(directory, 0o700) == 0 else {
                throw DCError(.cannotCreateOutput, "cannot make the directory private (0700)", subject: directory)
            }
            return try create(
                at: directory, algorithm: algorithm, organization: organization, ocspURL: ocspURL, crlURL: crlURL,
                recoveryCertificate: recoveryCertificate, now: now, rollback: rollback)
        }
    }

    /// Makes the CA's keys and certificates and writes them into `directory`, which exists and is
    /// empty (``initialize(at:algorithm:organization:ocspURL:crlURL:recoveryCertificate:now:)``).
    private static func create(
        at directory: String, algorithm: KeyAlgorithm, organization: String, ocspURL: String?, crlURL: String?,
        recoveryCertificate: Certificate?, now: Date, rollback: Rollback
    ) throws -> TestCA {
        let start = now.addingTimeInterval(-backdating)
        let rootKey = try KeyGeneration.generate(algorithm)
        let rootProfile = CertificateProfile(
            subject: DistinguishedName([.init("O", organization), .init("CN", "\(organization) Root CA")]),
            notBefore: start, notAfter: now.addingTimeInterval(20 * 365 * 86400),
            keyUsage: [.keyCertSign, .cRLSign], isCA: true, pathLength: 1)
        let root = try CertificateSigner(selfSigningWith: rootKey).issue(rootProfile, for: rootKey)
        let issuingKey = try KeyGeneration.generate(algorithm)
        let issuingProfile = CertificateProfile(
            subject: DistinguishedName([.init("O", organization), .init("CN", "\(organization) Issuing CA")]),
            notBefore: start, notAfter: now.addingTimeInterval(10 * 365 * 86400),
            keyUsage: [.keyCertSign, .cRLSign], isCA: true, pathLength: 0)
        let issuing = try CertificateSigner(certificate: root, privateKey: rootKey).issue(
            issuingProfile, for: issuingKey)

        let metadata = Metadata(
            version: 1, algorithm: algorithm, organization: organization, created: now, ocspURL: ocspURL,
            crlURL: crlURL)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        var files = AtomicFileSet(directory: directory)
        try files.add("testca.json", .bytes(Array(try encoder.encode(metadata)) + [0x0A]), mode: 0o644)
        try files.add("root.pem", .bytes(PEM.certificate(root)), mode: 0o644)
        try files.add("root.key", .secret(PEM.privateKey(rootKey)), mode: 0o600)
        try files.add("issuing.pem", .bytes(PEM.certificate(issuing)), mode: 0o644)
        try files.add("issuing.key", .secret(PEM.privateKey(issuingKey)), mode: 0o600)
        if let recoveryCertificate {
            try files.add("recovery.pem", .bytes(PEM.certificate(recoveryCertificate)), mode: 0o644)
        }
        rollback.keep(files)
        try files.commit()
        return try TestCA(directory: directory)
    }

    /// Opens an existing CA.
    public init(directory: String) throws {
        let reader = CredentialReader()
        let path = { (name: String) in (directory as NSString).appendingPathComponent(name) }
        guard FileManager.default.fileExists(atPath: path("testca.json")) else {
            throw DCError(
                .fileNotFound, "not a test CA (no testca.json)", subject: directory,
                remedy: .createTestCA(in: directory))
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            metadata = try decoder.decode(
                Metadata.self, from: Data(contentsOf: URL(fileURLWithPath: path("testca.json"))))
        } catch {
            throw DCError(.malformedInput, "testca.json cannot be read: \(error)", subject: directory)
        }
        guard metadata.version == 1 else {
            throw DCError(
                .unsupportedFormat, "test CA format version \(metadata.version) is not supported", subject: directory)
        }
        rootCertificate = try reader.read(file: path("root.pem")).certifiedCertificate()
        issuingCertificate = try reader.read(file: path("issuing.pem")).certifiedCertificate()
        recoveryCertificate =
            FileManager.default.fileExists(atPath: path("recovery.pem"))
            ? try reader.read(file: path("recovery.pem")).certifiedCertificate() : nil
        guard let key = try reader.read(file: path("issuing.key")).privateKey else {
            throw DCError(.missingMaterial, "no issuing CA key", subject: path("issuing.key"))
        }
        issuer = try CertificateSigner(certificate: issuingCertificate, privateKey: key)
        issuingNotAfter = try CertificateDetails(issuingCertificate).notAfter ?? Date.distantPast
        self.directory = directory
    }
}

extension KeyMaterial {
    fileprivate func certifiedCertificate() throws -> Certificate {
        guard let first = certificates.first else { throw DCError(.missingMaterial, "no certificate", subject: source) }
        return first
    }
}
