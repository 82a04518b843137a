internal import COpenSSL
import DerivedCredentials

/// Sealing a payload to a recipient's certificate: CMS AuthEnvelopedData (RFC 5083) with
/// AES-256-GCM, the content key agreed by ECDH (or transported with RSA-OAEP's OpenSSL default)
/// to the recipient's public key. Only the holder of the private key can open it, and any change
/// to the sealed bytes makes opening fail (the GCM tag covers the content).
public enum Sealing {
    /// Largest sealed message accepted by ``open(_:with:certificate:maximumSize:)`` by default.
    public static let defaultMaximumSize = 8 << 20

    /// Seals `plaintext` to the public key of `recipient`, as DER. Throws `DCError/Code/cryptoFailure`
    /// when OpenSSL cannot encrypt to that key.
    public static func seal(_ plaintext: SecretBytes, to recipient: Certificate) throws -> [UInt8] {
        OpenSSL.ensureInitialized()
        let certificate = try X509Certificate(recipient)
        guard let recipients = dc_sk_X509_new_null() else { throw OpenSSL.failure("allocating") }
        defer { dc_sk_X509_free(recipients) }
        _ = dc_sk_X509_push(recipients, certificate.pointer)
        // The stack borrows the certificate: its owner lives until CMS_encrypt has run.
        let sealed = try withExtendedLifetime(certificate) {
            try plaintext.withUnsafeBytes { bytes -> [UInt8] in
                guard let input = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else {
                    throw OpenSSL.failure("BIO_new_mem_buf")
                }
                defer { BIO_free(input) }
                guard let cms = CMS_encrypt(recipients, input, EVP_aes_256_gcm(), UInt32(CMS_BINARY)) else {
                    throw DCError(
                        .cryptoFailure, "cannot seal to the recipient's certificate", underlying: OpenSSLError.drain())
                }
                defer { CMS_ContentInfo_free(cms) }
                guard let der = encodeDER({ i2d_CMS_ContentInfo(cms, $0) }) else {
                    throw OpenSSL.failure("i2d_CMS_ContentInfo")
                }
                return der
            }
        }
        return sealed
    }

    /// Opens a sealed message: strict DER, AuthEnvelopedData only, for this key and certificate.
    public static func open(
        _ sealed: [UInt8], with key: PrivateKey, certificate: Certificate, maximumSize: Int = defaultMaximumSize
    ) throws -> SecretBytes {
        OpenSSL.ensureInitialized()
        guard sealed.count <= maximumSize else {
            throw DCError(.inputTooLarge, "the sealed message is \(sealed.count) bytes; the limit is \(maximumSize)")
        }
        try DER.validate(sealed, what: "sealed message")
        guard let cms = sealed.decodeDER({ d2i_CMS_ContentInfo(nil, $0, $1) }, free: CMS_ContentInfo_free) else {
            throw DCError(.malformedInput, "not a CMS message", underlying: OpenSSLError.drain())
        }
        defer { CMS_ContentInfo_free(cms) }
        guard OBJ_obj2nid(CMS_get0_type(cms)) == NID_id_smime_ct_authEnvelopedData else {
            throw DCError(.malformedInput, "the sealed message is not CMS AuthEnvelopedData")
        }
        let x509 = try X509Certificate(certificate)
        guard let pkey = PKey.from(key) else {
            throw DCError(.malformedInput, "the opening key cannot be read")
        }
        // Secure memory: the BIO's buffer is cleared when it is freed.
        guard let output = BIO_new(BIO_s_secmem()) else { throw OpenSSL.failure("BIO_new(secmem)") }
        defer { BIO_free(output) }
        guard CMS_decrypt(cms, pkey.pointer, x509.pointer, nil, output, UInt32(CMS_BINARY)) == 1 else {
            throw DCError(
                .invalid, "the sealed message cannot be opened with this key, or it was altered",
                hint: "nothing was installed; ask the provider to send again", underlying: OpenSSLError.drain())
        }
        var pointer: UnsafeMutablePointer<CChar>?
        let length = dc_BIO_get_mem_data(output, &pointer)
        guard length >= 0 else { throw OpenSSL.failure("reading the opened message") }
        guard let pointer, length > 0 else { return SecretBytes([]) }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            SecretBytes(UnsafeBufferPointer(start: $0, count: length))
        }
    }
}
