internal import COpenSSL

extension CredentialValidator {
    static let sha1 = NID_sha1
    static let md5 = NID_md5
}
