internal import COpenSSL
import DerivedCredentials

/// Opening a message encrypted to a certificate, as mail and file encryption make them: CMS
/// EnvelopedData or AuthEnvelopedData (`openssl cms -encrypt`, S/MIME), in DER, PEM or S/MIME
/// form. The holder of a credential tries its current encryption pairs and its key history.
public enum EnvelopedMessage {
    /// Largest message accepted by ``open(_:with:maximumSize:)`` by default.
    public static let defaultMaximumSize = 64 << 20

    /// The plaintext of `message`, opened with the first of `candidates` whose certificate is one
    /// of its recipients, and that candidate's position. Throws `DCError/Code/inputTooLarge` above
    /// `maximumSize`, `DCError/Code/malformedInput` for anything but an enveloped CMS message,
    /// and `DCError/Code/noMatchingKey` when no candidate opens it (none is a recipient, or the
    /// message was altered).
    public static func open(
        _ message: [UInt8], with candidates: [CertifiedKey], maximumSize: Int = defaultMaximumSize
    ) throws -> (plaintext: SecretBytes, opener: Int) {
        OpenSSL.ensureInitialized()
        guard message.count <= maximumSize else {
            throw DCError(.inputTooLarge, "the message is \(message.count) bytes; the limit is \(maximumSize)")
        }
        let cms = try parse(message)
        defer { CMS_ContentInfo_free(cms) }
        let type = OBJ_obj2nid(CMS_get0_type(cms))
        guard type == NID_pkcs7_enveloped || type == NID_id_smime_ct_authEnvelopedData else {
            throw DCError(.malformedInput, "the message is not encrypted (CMS EnvelopedData or AuthEnvelopedData)")
        }
        for (index, candidate) in candidates.enumerated() {
            guard let x509 = try? X509Certificate(candidate.certificate),
                let pkey = PKey.from(candidate.privateKey)
            else { continue }
            // Secure memory: the BIO's buffer is cleared when it is freed.
            guard let output = BIO_new(BIO_s_secmem()) else { throw OpenSSL.failure("BIO_new(secmem)") }
            defer { BIO_free(output) }
            // With the certificate given, OpenSSL uses only the recipient that names it.
            guard CMS_decrypt(cms, pkey.pointer, x509.pointer, nil, output, UInt32(CMS_BINARY)) == 1 else {
                OpenSSLError.clear()
                continue
            }
            var pointer: UnsafeMutablePointer<CChar>?
            let length = dc_BIO_get_mem_data(output, &pointer)
            guard length >= 0 else { throw OpenSSL.failure("reading the opened message") }
            guard let pointer, length > 0 else { return (SecretBytes([]), index) }
            let plaintext = pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
                SecretBytes(UnsafeBufferPointer(start: $0, count: length))
            }
            return (plaintext, index)
        }
        throw DCError(
            .noMatchingKey, "none of the encryption keys opens the message",
            hint: "it is for another recipient, or it was altered")
    }

    /// The message as DER (a SEQUENCE), PEM (one `CMS` or `PKCS7` block, read by our strict PEM
    /// reader) or S/MIME.
    private static func parse(_ message: [UInt8]) throws -> OpaquePointer {
        func malformed() -> DCError {
            DCError(.malformedInput, "not a CMS message (DER, PEM or S/MIME)", underlying: OpenSSLError.drain())
        }
        func fromDER(_ der: [UInt8]) throws -> OpaquePointer {
            try DER.validate(der, what: "CMS message")
            guard let cms = der.decodeDER({ d2i_CMS_ContentInfo(nil, $0, $1) }, free: CMS_ContentInfo_free) else {
                throw malformed()
            }
            return cms
        }
        if message.first == 0x30 { return try fromDER(message) }
        if PEMDocument.looksLikePEM(message) {
            let blocks = try PEMDocument(parsing: message).blocks
            guard blocks.count == 1, ["CMS", "PKCS7"].contains(blocks[0].label) else {
                throw DCError(.malformedInput, "expected one CMS or PKCS7 PEM block")
            }
            return try fromDER(blocks[0].der)
        }
        return try message.withUnsafeBytes { bytes in
            guard let input = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else {
                throw OpenSSL.failure("BIO_new_mem_buf")
            }
            defer { BIO_free(input) }
            guard let cms = SMIME_read_CMS(input, nil) else { throw malformed() }
            return cms
        }
    }
}
