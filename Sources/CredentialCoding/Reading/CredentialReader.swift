internal import COpenSSL
import DerivedCredentials
import FoundationEssentials
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Reads certificate and key files — PEM, DER or PKCS#12 — and converts what they hold to DER
/// certificates and PKCS#8 DER keys, strictly.
///
/// Where OpenSSL is lenient the reader refuses: trailing bytes, BER, two keys in one file, a key
/// that does not match its certificate, MAC-less PKCS#12, hostile iteration counts, explicit curve
/// parameters, unknown algorithms, wrong PEM labels, broken base64, NUL bytes, missing END lines.
/// Every refusal is a `DCError` whose subject is the input.
public struct CredentialReader: Sendable {
    /// Asked at most once per input, and only when the input is encrypted.
    public var passphrase: any PassphraseSource
    /// The size and iteration caps applied to every input.
    public var limits: ReadLimits
    private let logger: Logger

    /// A reader that refuses encrypted input unless `passphrase` can open it; loads OpenSSL's `default` provider once
    /// (and `legacy` at the first encrypted key or PKCS#12 file).
    public init(
        passphrase: any PassphraseSource = NoPassphrase(),
        limits: ReadLimits = ReadLimits(),
        logger: Logger = Logger(label: "dcprovision.reader")
    ) {
        self.passphrase = passphrase
        self.limits = limits
        self.logger = logger
        OpenSSL.ensureInitialized()
    }

    /// Reads and converts one file.
    public func read(file path: String) throws -> KeyMaterial {
        let bytes = try readFile(path)
        return try read(bytes: bytes, source: path)
    }

    /// Converts the bytes of one input; `source` names it in errors.
    public func read(bytes: [UInt8], source: String) throws -> KeyMaterial {
        do {
            guard bytes.count <= limits.maximumFileSize else {
                throw DCError(
                    .inputTooLarge, "the input is \(bytes.count) bytes; the limit is \(limits.maximumFileSize)")
            }
            defer { OpenSSLError.clear() }
            var parts = Parts()
            let ask = PassphraseOnce(source: passphrase, subject: source)
            if PEMDocument.looksLikePEM(bytes) {
                try readPEM(bytes, into: &parts, passphrase: ask)
            } else {
                try readDER(bytes, into: &parts, passphrase: ask)
            }
            return try parts.material(source: source)
        } catch var error as DCError {
            if error.subject == nil { error.subject = source }
            throw error
        }
    }

    // MARK: - Formats

    private func readPEM(_ bytes: [UInt8], into parts: inout Parts, passphrase: PassphraseOnce) throws {
        let document = try PEMDocument(parsing: bytes)
        guard !document.blocks.isEmpty else { throw DCError(.malformedInput, "no PEM block found") }
        let parameterBlocks = document.blocks.filter { $0.label == "EC PARAMETERS" }
        guard parameterBlocks.count <= 1 else { throw DCError(.malformedInput, "more than one EC PARAMETERS block") }
        let parameters = parameterBlocks.first?.der
        for block in document.blocks {
            let isLegacyKey = block.label == "RSA PRIVATE KEY" || block.label == "EC PRIVATE KEY"
            if !block.headers.isEmpty && !isLegacyKey {
                throw DCError(.malformedInput, "line \(block.line): unexpected PEM headers in the \(block.label) block")
            }
            switch block.label {
            case "CERTIFICATE", "X509 CERTIFICATE":
                parts.certificates.append(try X509Certificate(der: block.der))
            case "PRIVATE KEY":
                parts.keys.append(try KeyDecoding.pkcs8(block.der))
            case "ENCRYPTED PRIVATE KEY":
                parts.keys.append(try KeyDecoding.encryptedPKCS8(block.der, passphrase: passphrase.get, limits: limits))
            case "RSA PRIVATE KEY", "EC PRIVATE KEY":
                let type = block.label == "RSA PRIVATE KEY" ? EVP_PKEY_RSA : EVP_PKEY_EC
                if !block.headers.isEmpty {
                    parts.keys.append(
                        try KeyDecoding.legacyEncrypted(
                            block, type: type, parameters: parameters, passphrase: passphrase.get))
                } else if type == EVP_PKEY_RSA {
                    parts.keys.append(try KeyDecoding.rsa(block.der))
                } else {
                    parts.keys.append(try KeyDecoding.sec1(block.der, parameters: parameters))
                }
            case "EC PARAMETERS":
                if !document.blocks.contains(where: { $0.label == "EC PRIVATE KEY" }) {
                    throw DCError(.malformedInput, "an EC PARAMETERS block without an EC PRIVATE KEY")
                }
            default:
                throw DCError(
                    .unsupportedFormat,
                    "line \(block.line): unsupported PEM block '\(block.label.escapingControlCharacters)'",
                    hint: "expected CERTIFICATE, PRIVATE KEY, ENCRYPTED PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY")
            }
        }
    }

    private func readDER(_ bytes: [UInt8], into parts: inout Parts, passphrase: PassphraseOnce) throws {
        guard bytes.first == 0x30 else {
            throw DCError(
                .unsupportedFormat, "not a certificate, key or PKCS#12 file (neither PEM nor DER)",
                hint: "expected PEM, DER or PKCS#12")
        }
        let top = try DER.validate(bytes, what: "DER input")
        guard let shape = try DER.shape(bytes, top) else {
            throw DCError(.unsupportedFormat, "not a certificate, key or PKCS#12 file")
        }
        switch shape {
        case .certificate:
            parts.certificates.append(try X509Certificate(der: bytes))
        case .pkcs12:
            let contents = try PKCS12Reading.read(bytes, passphrase: passphrase.getOptional, limits: limits)
            parts.certificates += contents.certificates
            parts.keys += contents.keys
            parts.friendlyNames = contents.friendlyNames
        case .pkcs8:
            parts.keys.append(try KeyDecoding.pkcs8(bytes))
        case .encryptedPKCS8:
            parts.keys.append(try KeyDecoding.encryptedPKCS8(bytes, passphrase: passphrase.get, limits: limits))
        case .rsa:
            parts.keys.append(try KeyDecoding.rsa(bytes))
        case .sec1:
            parts.keys.append(try KeyDecoding.sec1(bytes, parameters: nil))
        }
    }

    private func readFile(_ path: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            switch errno {
            case ENOENT, ENOTDIR: throw DCError(.fileNotFound, "no such file", subject: path)
            case EACCES, EPERM: throw DCError(.permissionDenied, "cannot open: \(reason)", subject: path)
            default: throw DCError(.ioError, "cannot open: \(reason)", subject: path)
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw DCError(.malformedInput, "not a regular file", subject: path)
        }
        guard Int(info.st_size) <= limits.maximumFileSize else {
            throw DCError(
                .inputTooLarge, "the file is \(info.st_size) bytes; the limit is \(limits.maximumFileSize)",
                subject: path)
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes {
                Glibc.read(fd, $0.baseAddress?.advanced(by: filled), $0.count - filled)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw DCError(.ioError, "cannot read: \(String(cString: strerror(errno)))", subject: path)
            }
            if count == 0 { break }
            filled += count
        }
        guard filled <= limits.maximumFileSize else {
            throw DCError(
                .inputTooLarge, "the file grew past the limit of \(limits.maximumFileSize) bytes", subject: path)
        }
        logger.debug("read \(filled) bytes", metadata: ["file": "\(path)"])
        return Array(bytes.prefix(filled))
    }

    // MARK: - Assembly

    /// What a file held before pairing.
    private struct Parts {
        var certificates: [X509Certificate] = []
        var keys: [PKey] = []
        var friendlyNames: [String] = []

        /// Checks the rules (one key at most, the key matches a certificate) and converts.
        func material(source: String) throws -> KeyMaterial {
            guard keys.count <= 1 else {
                throw DCError(
                    .multipleKeys, "\(keys.count) private keys in one input; expected at most one",
                    hint: "split the keys into separate files")
            }
            guard !(keys.isEmpty && certificates.isEmpty) else {
                throw DCError(.missingMaterial, "no certificate or private key found")
            }
            var ordered = certificates
            var privateKey: PrivateKey?
            if let key = keys.first {
                let spki = try key.subjectPublicKeyInfo()
                if !certificates.isEmpty {
                    guard let index = try certificates.firstIndex(where: { try $0.subjectPublicKeyInfo() == spki })
                    else {
                        throw DCError(
                            .keyCertificateMismatch, "the private key does not belong to any certificate in the input")
                    }
                    ordered.insert(ordered.remove(at: index), at: 0)
                }
                privateKey = try key.pkcs8()
            }
            return KeyMaterial(
                source: source, certificates: try ordered.map { Certificate(derBytes: try $0.der()) },
                privateKey: privateKey, friendlyNames: friendlyNames)
        }
    }
}

/// Asks the source at most once per input and remembers the answer.
private final class PassphraseOnce {
    let source: any PassphraseSource
    let subject: String
    private var answer: SecretBytes??

    init(source: any PassphraseSource, subject: String) {
        self.source = source
        self.subject = subject
    }

    func getOptional() throws -> SecretBytes? {
        if let answer { return answer }
        let value = try source.passphrase(for: subject)
        answer = .some(value)
        return value
    }

    func get() throws -> SecretBytes {
        guard let value = try getOptional() else {
            throw DCError(
                .passphraseRequired, "the input is encrypted and no passphrase was given",
                remedy: .givePassphraseFile)
        }
        return value
    }
}

extension CredentialReader {
    /// Exactly one DER certificate, strictly (for protocols that carry certificates as DER).
    public func certificate(der bytes: [UInt8], source: String) throws -> Certificate {
        do {
            return Certificate(derBytes: try X509Certificate(der: bytes).der())
        } catch var error as DCError {
            if error.subject == nil { error.subject = source }
            throw error
        }
    }

    /// Exactly one PKCS#8 DER private key, strictly, in OpenSSL's canonical PKCS#8 form.
    public func privateKey(pkcs8 bytes: [UInt8], source: String) throws -> PrivateKey {
        do {
            return try KeyDecoding.pkcs8(bytes).pkcs8()
        } catch var error as DCError {
            if error.subject == nil { error.subject = source }
            throw error
        }
    }
}
