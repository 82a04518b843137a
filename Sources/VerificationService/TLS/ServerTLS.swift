import CredentialCoding
import DerivedCredentials
import HummingbirdCore

#if TLS
    import HummingbirdTLS
    import NIOSSL

    /// The TLS configuration of the service: the certificate and key read by our own conversion
    /// engine (``CredentialReader``: PEM, DER or PKCS#12, strictly) and handed to NIOSSL as DER.
    struct ServerTLS: Sendable {
        private let configuration: TLSConfiguration

        /// A server configuration for `files`, TLS 1.2 at least (NIOSSL's default minimum is 1.0).
        init(_ files: TLSFiles) throws {
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
            configuration = tls
        }

        /// `base` behind a TLS handshake with this configuration.
        func channel<Base: ServerChildChannel>(_ base: Base) throws -> TLSChannel<Base> {
            try TLSChannel(base, tlsConfiguration: configuration)
        }
    }
#else
    /// HTTPS in a build without the `TLS` trait: the TLS engine (swift-nio-ssl, which compiles its own
    /// BoringSSL, two thirds more on a fresh clone's first build) is not linked, so asking for HTTPS
    /// stops the service before it listens, with one line that says how to get it.
    struct ServerTLS: Sendable {
        /// Refuses: this build cannot serve HTTPS.
        init(_ files: TLSFiles) throws {
            throw DCError(
                .notInThisBuild, "this build cannot serve HTTPS (it was built without the TLS trait)",
                subject: files.certificate)
        }

        /// Never called: no value of this type exists.
        func channel<Base: ServerChildChannel>(_ base: Base) throws -> Base { base }
    }
#endif
