internal import COpenSSL
import DerivedCredentials

/// Turns the private-key encodings people have into an `EVP_PKEY`, strictly.
enum KeyDecoding {
    /// PKCS#8 PrivateKeyInfo DER.
    static func pkcs8(_ der: [UInt8]) throws -> PKey {
        let top = try DER.validate(der, what: "PKCS#8 private key")
        // OpenSSL's PrivateKeyInfo decoder also takes PKCS#1 and SEC1: insist on the structure.
        guard try DER.shape(der, top) == .pkcs8 else {
            throw DCError(.malformedInput, "not a PKCS#8 private key (wrong structure)")
        }
        guard let key = PKey.fromPKCS8(der) else {
            throw DCError(.malformedInput, "not a PKCS#8 private key", underlying: OpenSSLError.drain())
        }
        return try checked(key)
    }

    /// PKCS#8 EncryptedPrivateKeyInfo DER. The KDF iteration count is checked before anything is derived.
    static func encryptedPKCS8(_ der: [UInt8], passphrase: () throws -> SecretBytes, limits: ReadLimits) throws -> PKey
    {
        OpenSSL.ensureLegacyInitialized()
        try DER.validate(der, what: "encrypted PKCS#8 private key")
        guard let sig = der.decodeDER({ d2i_X509_SIG(nil, $0, $1) }, free: X509_SIG_free) else {
            throw DCError(.malformedInput, "not an encrypted PKCS#8 private key", underlying: OpenSSLError.drain())
        }
        defer { X509_SIG_free(sig) }
        var algorithm: UnsafePointer<X509_ALGOR>?
        X509_SIG_get0(sig, &algorithm, nil)
        guard let algorithm else { throw DCError(.malformedInput, "encrypted key without an algorithm") }
        try checkIterations(algorithm, limits: limits, what: "the encrypted private key")
        let secret = try passphrase()
        let info = secret.withUnsafeBytes { bytes in
            PKCS8_decrypt(sig, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
        }
        guard let info else {
            throw DCError(
                .wrongPassphrase, "the passphrase does not decrypt the private key", underlying: OpenSSLError.drain())
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        guard let key = PKey.fromPKCS8Info(info) else {
            throw DCError(.malformedInput, "the decrypted private key is not valid", underlying: OpenSSLError.drain())
        }
        return try checked(key)
    }

    /// PKCS#1 RSAPrivateKey DER.
    static func rsa(_ der: [UInt8]) throws -> PKey {
        let top = try DER.validate(der, what: "RSA private key")
        guard try DER.shape(der, top) == .rsa else {
            throw DCError(.malformedInput, "not a PKCS#1 RSA private key (wrong structure)")
        }
        guard let key = PKey.fromTypeSpecific(der, type: EVP_PKEY_RSA) else {
            throw DCError(.malformedInput, "not a PKCS#1 RSA private key", underlying: OpenSSLError.drain())
        }
        return try checked(key)
    }

    /// SEC1 ECPrivateKey DER, with the curve from a separate `EC PARAMETERS` block when the key has none.
    static func sec1(_ der: [UInt8], parameters: [UInt8]?) throws -> PKey {
        let top = try DER.validate(der, what: "EC private key")
        guard try DER.shape(der, top) == .sec1 else {
            throw DCError(.malformedInput, "not a SEC1 EC private key (wrong structure)")
        }
        var der = der
        if let parameters {
            let parametersNode = try DER.validate(parameters, what: "EC parameters")
            guard parametersNode.identifier == 0x06 else {
                throw DCError(
                    .unsupportedAlgorithm, "the EC parameters are explicit, not a named curve",
                    hint: "export the key with a named curve (openssl ec -param_enc named_curve)")
            }
            let children = try DER.children(der, of: top)
            if let explicitTag = children.first(where: { $0.identifier == 0xA0 }) {
                let inner = try DER.children(der, of: explicitTag)
                guard inner.count == 1, Array(der[inner[0].range]) == parameters else {
                    throw DCError(.malformedInput, "the EC PARAMETERS block names a different curve than the key")
                }
            } else {
                // Insert [0] parameters after the version and the private key octets.
                guard children.count >= 2 else { throw DCError(.malformedInput, "not a SEC1 EC private key") }
                var content: [UInt8] = []
                for child in children.prefix(2) { content += der[child.range] }
                content += DER.wrap(0xA0, parameters)
                for child in children.dropFirst(2) { content += der[child.range] }
                der = DER.wrap(0x30, content)
            }
        }
        guard let key = PKey.fromTypeSpecific(der, type: EVP_PKEY_EC) else {
            throw DCError(
                .malformedInput, "not a SEC1 EC private key (or its curve is missing)", underlying: OpenSSLError.drain()
            )
        }
        return try checked(key)
    }

    /// A legacy `Proc-Type: 4,ENCRYPTED` PEM body (OpenSSL's traditional format): decrypts it with
    /// `PEM_do_header` and our non-prompting callback, then decodes the PKCS#1 or SEC1 inside.
    static func legacyEncrypted(
        _ block: PEMDocument.Block, type: Int32, parameters: [UInt8]?, passphrase: () throws -> SecretBytes
    ) throws -> PKey {
        OpenSSL.ensureLegacyInitialized()
        guard block.header("Proc-Type") == "4,ENCRYPTED", let dekInfo = block.header("DEK-Info") else {
            throw DCError(.malformedInput, "unsupported PEM headers on the \(block.label) block")
        }
        var cipher = EVP_CIPHER_INFO()
        var headerText = Array("Proc-Type: 4,ENCRYPTED\nDEK-Info: \(dekInfo)\n".utf8CString)
        guard PEM_get_EVP_CIPHER_INFO(&headerText, &cipher) == 1, cipher.cipher != nil else {
            throw DCError(
                .unsupportedFormat, "unsupported legacy PEM encryption '\(dekInfo.escapingControlCharacters)'",
                underlying: OpenSSLError.drain())
        }
        let secret = try passphrase()
        var body = block.der
        var length = body.count
        let ok = secret.withUnsafeBytes { bytes -> Int32 in
            var password = dc_password(
                bytes: bytes.baseAddress?.assumingMemoryBound(to: CChar.self), length: Int32(bytes.count))
            return body.withUnsafeMutableBufferPointer { buffer in
                PEM_do_header(&cipher, buffer.baseAddress, &length, dc_password_callback_pointer(), &password)
            }
        }
        defer { body.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        guard ok == 1 else {
            throw DCError(
                .wrongPassphrase, "the passphrase does not decrypt the private key", underlying: OpenSSLError.drain())
        }
        let plain = Array(body.prefix(length))
        do {
            return type == EVP_PKEY_RSA ? try rsa(plain) : try sec1(plain, parameters: parameters)
        } catch let error as DCError
            where error.code == .malformedInput || error.code == .notDER
            || error.code == .trailingData
        {
            // Legacy PEM has no integrity check: a wrong passphrase usually fails the padding, and
            // otherwise yields garbage that does not parse.
            throw DCError(.wrongPassphrase, "the passphrase does not decrypt the private key")
        }
    }

    /// Refuses a PBE whose key derivation is unknown or runs more iterations than allowed, before
    /// any derivation happens (a count of 2^31-1 would take minutes of CPU).
    static func checkIterations(_ algorithm: UnsafePointer<X509_ALGOR>, limits: ReadLimits, what: String) throws {
        var known: Int32 = 1
        let iterations = dc_pbe_iterations(algorithm, &known)
        OpenSSLError.clear()
        guard known == 1 else {
            let name = X509Certificate.oid(algorithm.pointee.algorithm)
            throw DCError(.unsupportedAlgorithm, "\(what) uses an unsupported encryption scheme (\(name))")
        }
        guard iterations > 0 else {
            throw DCError(.malformedInput, "\(what) has unreadable key-derivation parameters")
        }
        guard iterations <= limits.maximumIterations else {
            throw DCError(
                .iterationLimitExceeded,
                "\(what) asks for \(iterations) key-derivation iterations; the limit is \(limits.maximumIterations)",
                hint: "re-export it with a normal iteration count")
        }
    }

    /// Only RSA and EC keys on named curves occur in the derived-PIV profiles.
    static func checked(_ key: PKey) throws -> PKey {
        switch key.kind {
        case .rsa:
            return key
        case .ec:
            if key.hasExplicitCurveParameters {
                throw DCError(
                    .unsupportedAlgorithm, "the EC key carries explicit curve parameters instead of a named curve",
                    hint: "export the key with a named curve (openssl ec -param_enc named_curve)")
            }
            return key
        case .other(let name):
            throw DCError(
                .unsupportedAlgorithm, "unsupported key algorithm \(name)",
                hint: "derived credentials use RSA or EC keys")
        }
    }
}
