import COpenSSL
import Foundation

/// Builds PKCS#12 files that the `openssl` CLI and Python's `cryptography` refuse to make (a key
/// with a certificate it does not belong to, two keys), from OpenSSL's low-level bag API. This is
/// a fake only in the sense that no honest tool writes such files; the bytes are real PKCS#12.
public enum HostilePKCS12 {
    public struct Failure: Error {}

    public static func make(keyFiles: [String], certificateFiles: [String], password: String) throws -> [UInt8] {
        var bags: OpaquePointer?
        for file in certificateFiles {
            let x509 = try withBIO(file) { PEM_read_bio_X509($0, nil, nil, nil) }
            defer { X509_free(x509) }
            guard PKCS12_add_cert(&bags, x509) != nil else { throw Failure() }
        }
        for file in keyFiles {
            let key = try withBIO(file) { PEM_read_bio_PrivateKey($0, nil, nil, nil) }
            defer { EVP_PKEY_free(key) }
            guard PKCS12_add_key(&bags, key, 0, 2048, NID_aes_256_cbc, password) != nil else { throw Failure() }
        }
        var safes: OpaquePointer?
        guard PKCS12_add_safe(&safes, bags, -1, 2048, password) == 1 else { throw Failure() }
        guard let p12 = PKCS12_add_safes(safes, 0) else { throw Failure() }
        defer { PKCS12_free(p12) }
        guard PKCS12_set_mac(p12, password, -1, nil, 0, 2048, nil) == 1 else { throw Failure() }
        let length = i2d_PKCS12(p12, nil)
        var bytes = [UInt8](repeating: 0, count: Int(length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_PKCS12(p12, &cursor)
        }
        return bytes
    }

    private static func withBIO(_ file: String, _ body: (OpaquePointer) -> OpaquePointer?) throws -> OpaquePointer {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        return try bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { throw Failure() }
            defer { BIO_free(bio) }
            guard let value = body(bio) else { throw Failure() }
            return value
        }
    }
}
