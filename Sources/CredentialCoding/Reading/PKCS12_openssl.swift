internal import COpenSSL
import DerivedCredentials

/// Reads a PKCS#12 file bag by bag instead of through `PKCS12_parse`, which accepts a mismatched
/// key and certificate, drops a second key and happily runs two billion MAC iterations. Every
/// key-derivation count is checked before it is used.
enum PKCS12Reading {
    struct Contents {
        var keys: [PKey] = []
        var certificates: [X509Certificate] = []
        var friendlyNames: [String] = []
    }

    static func read(_ der: [UInt8], passphrase: () throws -> SecretBytes?, limits: ReadLimits) throws -> Contents {
        OpenSSL.ensureLegacyInitialized()
        try DER.validate(der, what: "PKCS#12 file")
        guard let p12 = der.decodeDER({ d2i_PKCS12(nil, $0, $1) }, free: PKCS12_free) else {
            throw DCError(.malformedInput, "not a PKCS#12 file", underlying: OpenSSLError.drain())
        }
        defer { PKCS12_free(p12) }

        guard PKCS12_mac_present(p12) == 1 else {
            throw DCError(
                .missingMAC, "the PKCS#12 file has no integrity MAC",
                hint: "export it with a MAC (do not use openssl pkcs12 -nomac)")
        }
        var iterationsField: UnsafePointer<ASN1_INTEGER>?
        PKCS12_get0_mac(nil, nil, nil, &iterationsField, p12)
        let macIterations = iterationsField.map { ASN1_INTEGER_get($0) } ?? 1
        guard macIterations > 0 else { throw DCError(.malformedInput, "the PKCS#12 MAC iteration count is invalid") }
        guard macIterations <= limits.maximumIterations else {
            throw DCError(
                .iterationLimitExceeded,
                "the PKCS#12 MAC asks for \(macIterations) iterations; the limit is \(limits.maximumIterations)",
                hint: "re-export it with a normal iteration count")
        }

        // Find the password that verifies the MAC. Without a passphrase source, only the empty
        // password (as "" or as no password at all, both of which exist in the wild) is tried.
        let given = try passphrase()
        let password: Password
        if let given {
            if verify(p12, .bytes(given)) {
                password = .bytes(given)
            } else if given.isEmpty && verify(p12, .none) {
                password = .none
            } else {
                throw DCError(
                    .wrongPassphrase, "the passphrase does not open the PKCS#12 file", underlying: OpenSSLError.drain())
            }
        } else if verify(p12, .bytes(SecretBytes([]))) {
            password = .bytes(SecretBytes([]))
        } else if verify(p12, .none) {
            password = .none
        } else {
            OpenSSLError.clear()
            throw DCError(
                .passphraseRequired, "the PKCS#12 file is protected by a passphrase and none was given",
                remedy: .givePassphraseFile)
        }

        guard let safes = PKCS12_unpack_authsafes(p12) else {
            throw DCError(.malformedInput, "the PKCS#12 contents cannot be read", underlying: OpenSSLError.drain())
        }
        defer { dc_sk_PKCS7_pop_free(safes) }
        var contents = Contents()
        for index in 0..<dc_sk_PKCS7_num(safes) {
            guard let p7 = dc_sk_PKCS7_value(safes, index) else { continue }
            let bags: OpaquePointer?
            switch OBJ_obj2nid(p7.pointee.type) {
            case NID_pkcs7_data:
                bags = PKCS12_unpack_p7data(p7)
            case NID_pkcs7_encrypted:
                guard let algorithm = dc_PKCS7_encrypted_algorithm(p7) else {
                    throw DCError(.malformedInput, "a PKCS#12 encrypted section has no algorithm")
                }
                try KeyDecoding.checkIterations(algorithm, limits: limits, what: "a PKCS#12 encrypted section")
                bags = password.with { PKCS12_unpack_p7encdata(p7, $0, $1) }
            default:
                throw DCError(
                    .unsupportedFormat, "the PKCS#12 file has a public-key encrypted section, which is not supported")
            }
            guard let bags else {
                throw DCError(
                    .malformedInput, "a PKCS#12 section cannot be decrypted or read", underlying: OpenSSLError.drain())
            }
            defer { dc_sk_SAFEBAG_pop_free(bags) }
            try collect(bags, into: &contents, password: password, limits: limits, depth: 0)
        }
        return contents
    }

    private static func collect(
        _ bags: OpaquePointer, into contents: inout Contents, password: Password, limits: ReadLimits, depth: Int
    ) throws {
        guard depth < 4 else { throw DCError(.malformedInput, "PKCS#12 safe contents are nested too deeply") }
        for index in 0..<dc_sk_SAFEBAG_num(bags) {
            guard let bag = dc_sk_SAFEBAG_value(bags, index) else { continue }
            if let name = PKCS12_get_friendlyname(bag) {
                contents.friendlyNames.append(String(cString: name))
                CRYPTO_free(name, #fileID, #line)
            }
            switch PKCS12_SAFEBAG_get_nid(bag) {
            case NID_keyBag:
                guard let info = PKCS12_SAFEBAG_get0_p8inf(bag), let key = PKey.fromPKCS8Info(info) else {
                    throw DCError(.malformedInput, "a PKCS#12 key bag is not valid", underlying: OpenSSLError.drain())
                }
                contents.keys.append(try KeyDecoding.checked(key))
            case NID_pkcs8ShroudedKeyBag:
                guard let sig = PKCS12_SAFEBAG_get0_pkcs8(bag) else {
                    throw DCError(.malformedInput, "a PKCS#12 shrouded key bag is not valid")
                }
                var algorithm: UnsafePointer<X509_ALGOR>?
                X509_SIG_get0(sig, &algorithm, nil)
                guard let algorithm else { throw DCError(.malformedInput, "a PKCS#12 key bag has no algorithm") }
                try KeyDecoding.checkIterations(algorithm, limits: limits, what: "the PKCS#12 private key")
                guard let info = password.with({ PKCS8_decrypt(sig, $0, $1) }) else {
                    throw DCError(
                        .wrongPassphrase, "the PKCS#12 private key cannot be decrypted",
                        underlying: OpenSSLError.drain())
                }
                defer { PKCS8_PRIV_KEY_INFO_free(info) }
                guard let key = PKey.fromPKCS8Info(info) else {
                    throw DCError(
                        .malformedInput, "the PKCS#12 private key is not valid", underlying: OpenSSLError.drain())
                }
                contents.keys.append(try KeyDecoding.checked(key))
            case NID_certBag:
                guard PKCS12_SAFEBAG_get_bag_nid(bag) == NID_x509Certificate else {
                    throw DCError(.unsupportedFormat, "the PKCS#12 file holds a certificate that is not X.509")
                }
                guard let x509 = PKCS12_SAFEBAG_get1_cert(bag) else {
                    throw DCError(
                        .malformedInput, "a PKCS#12 certificate bag is not valid", underlying: OpenSSLError.drain())
                }
                let certificate = X509Certificate(taking: x509)
                // Re-check the certificate as strict DER, like any other certificate we read.
                contents.certificates.append(try X509Certificate(der: try certificate.der()))
            case NID_safeContentsBag:
                guard let nested = PKCS12_SAFEBAG_get0_safes(bag) else { continue }
                try collect(nested, into: &contents, password: password, limits: limits, depth: depth + 1)
            case NID_crlBag, NID_secretBag:
                continue
            default:
                throw DCError(.unsupportedFormat, "the PKCS#12 file holds an unknown kind of bag")
            }
        }
    }

    private enum Password {
        case none
        case bytes(SecretBytes)

        func with<R>(_ body: (UnsafePointer<CChar>?, Int32) -> R) -> R {
            switch self {
            case .none:
                return body(nil, 0)
            case .bytes(let secret):
                // OpenSSL wants a C string for PKCS#12 (it converts to BMPString); add the NUL.
                var buffer = [CChar](repeating: 0, count: secret.count + 1)
                defer { buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
                secret.withUnsafeBytes { bytes in
                    for i in 0..<bytes.count { buffer[i] = CChar(bitPattern: bytes[i]) }
                }
                return buffer.withUnsafeBufferPointer { body($0.baseAddress, Int32(secret.count)) }
            }
        }
    }

    private static func verify(_ p12: OpaquePointer, _ password: Password) -> Bool {
        let ok = password.with { PKCS12_verify_mac(p12, $0, $1) } == 1
        if !ok { OpenSSLError.clear() }
        return ok
    }
}
