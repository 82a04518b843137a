import CredentialCoding
import DerivedCredentials
import NIOSSL

/// The TLS configuration of the service: the certificate and key read by our own conversion
/// engine (``CredentialReader``: PEM, DER or PKCS#12, strictly) and handed to NIOSSL as DER.
enum ServerTLS {
    /// A server configuration for `files`, TLS 1.2 at least (NIOSSL's default minimum is 1.0).
    static func configuration(_ files: TLSFiles) throws -> TLSConfiguration {
        // An encrypted key opens with the passphrase given; without one it is refused.
        let reader = CredentialReader(
            passphrase: files.keyPassphrase.map { FixedPassphrase($0) as any PassphraseSource } ?? NoPassphrase())
        let certificateMaterial = try reader.read(file: files.certificate)
        let keyMaterial = files.key == files.certificate ? certificateMaterial : try reader.read(file: files.key)
        guard let key = keyMaterial.privateKey else {
            throw DCError(.missingMaterial, "no private key found", subject: files.key)
        }
        let certificates = certificateMaterial.certificates
        guard !certificates.isEmpty else {
            throw DCError(.missingMaterial, "no certificate found", subject: files.certificate)
        }
        // The leaf is the certificate of the key (compared by public key), then the chain.
        let pair = try KeyMaterial.paired(certificates: certificates, privateKey: key, source: files.certificate)
        let chain = try pair.certificates.map {
            NIOSSLCertificateSource.certificate(try NIOSSLCertificate(bytes: $0.derBytes, format: .der))
        }
        let nioKey = try key.withPKCS8DER { der -> NIOSSLPrivateKey in
            var copy = Array(der)
            defer { copy.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0) } }
            return try NIOSSLPrivateKey(bytes: copy, format: .der)
        }
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(nioKey))
        tls.minimumTLSVersion = .tlsv12
        return tls
    }
}
