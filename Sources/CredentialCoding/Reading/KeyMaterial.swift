import DerivedCredentials

/// What one input file held, converted: DER certificates (the one that belongs to the key first)
/// and at most one PKCS#8 private key.
public struct KeyMaterial: Sendable, Equatable {
    /// Where it came from, for messages.
    public var source: String
    /// Certificates in DER; when there is a key, the first certificate is the one that matches it.
    public var certificates: [Certificate]
    /// The private key as PKCS#8 DER, if the input held one.
    public var privateKey: PrivateKey?
    /// PKCS#12 friendly names, as found (print them with `escapingControlCharacters`).
    public var friendlyNames: [String]

    /// Material as given; ``CredentialReader`` is what checks that the key matches the first certificate.
    public init(source: String, certificates: [Certificate], privateKey: PrivateKey?, friendlyNames: [String] = []) {
        self.source = source
        self.certificates = certificates
        self.privateKey = privateKey
        self.friendlyNames = friendlyNames
    }

    /// The leaf certificate and its key, or an error naming what is missing.
    public func certifiedKey() throws -> CertifiedKey {
        guard let certificate = certificates.first else {
            throw DCError(.missingMaterial, "no certificate found", subject: source)
        }
        guard let privateKey else {
            throw DCError(
                .missingMaterial, "no private key found", subject: source, hint: "give the key file too (TAG=CERT,KEY)")
        }
        return CertifiedKey(certificate: certificate, privateKey: privateKey)
    }

    /// The certificates after the leaf (a chain or CA certificates).
    public var chain: [Certificate] { Array(certificates.dropFirst()) }
}

/// Caps that keep hostile input cheap to refuse.
public struct ReadLimits: Sendable, Equatable {
    /// Largest input file read, in bytes.
    public var maximumFileSize: Int
    /// Largest PBKDF2 / PKCS#12 KDF / MAC iteration count computed.
    public var maximumIterations: Int

    /// Defaults: 4 MiB per file, 1,000,000 iterations.
    public init(maximumFileSize: Int = 4 << 20, maximumIterations: Int = 1_000_000) {
        self.maximumFileSize = maximumFileSize
        self.maximumIterations = maximumIterations
    }
}
