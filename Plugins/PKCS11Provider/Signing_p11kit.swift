internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation

extension Session {
    /// Signs SHA-256(`message`) on the token with `key`, returning the signature as X.509 encodes
    /// it. EC keys use `CKM_ECDSA` over the digest we compute (r ‖ s, re-encoded as DER); RSA keys
    /// use `CKM_RSA_PKCS` over the SHA-256 DigestInfo — the two mechanisms every PIV card's
    /// module offers. Two calls: `C_SignInit`, then one `C_Sign` into a buffer large enough for any
    /// key we accept.
    func signSHA256(_ key: CK_OBJECT_HANDLE, message: [UInt8], name: String) throws -> [UInt8] {
        let keyType = ulong(try attributes(key, [CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)])[CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)])
        let digest = Digests.sha256(message)
        let mechanismType: CK_MECHANISM_TYPE
        var input: [UInt8]
        switch keyType {
        case CK_ULONG(CKK_EC):
            mechanismType = CK_MECHANISM_TYPE(CKM_ECDSA)
            input = digest
        case CK_ULONG(CKK_RSA):
            mechanismType = CK_MECHANISM_TYPE(CKM_RSA_PKCS)
            input = Self.sha256DigestInfoPrefix + digest
        default:
            throw DCError(.unsupportedAlgorithm, "the authentication key is neither RSA nor EC", subject: name)
        }
        var mechanism = CK_MECHANISM(mechanism: mechanismType, pParameter: nil, ulParameterLen: 0)
        try module.call("C_SignInit") { $0.C_SignInit(handle, &mechanism, key) }
        var signature = [UInt8](repeating: 0, count: 1024)
        var length = CK_ULONG(signature.count)
        let result = module.functions.pointee.C_Sign(handle, &input, CK_ULONG(input.count), &signature, &length)
        if result == CKR_USER_NOT_LOGGED_IN {
            throw DCError(
                .pkcs11Failure, "the key needs its own PIN entry for each signature (CKA_ALWAYS_AUTHENTICATE)",
                subject: name,
                hint: "prove possession with the authentication key (PIV 9A, id 01)",
                underlying: PKCS11Error(function: "C_Sign", returnValue: UInt(result)))
        }
        guard result == CKR_OK else { throw module.failure("C_Sign", result, subject: name) }
        let raw = Array(signature.prefix(Int(length)))
        return keyType == CK_ULONG(CKK_EC) ? try PossessionCheck.ecdsaSignatureDER(raw: raw) : raw
    }

    /// DigestInfo ::= SEQUENCE { AlgorithmIdentifier sha256 NULL, OCTET STRING (32) } up to the digest.
    static let sha256DigestInfoPrefix: [UInt8] = [
        0x30, 0x31, 0x30, 0x0D, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04,
        0x20,
    ]
}
