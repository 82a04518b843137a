internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation

extension Session {
    /// The private key `handle` as PKCS#8, where the token allows it:
    /// - not sensitive: its components are read and rebuilt (checked against `certificate`);
    /// - sensitive but extractable: wrapped under a session AES key we generated
    ///   (`CKM_AES_KEY_WRAP_PAD`) and unwrapped with OpenSSL;
    /// - not extractable: refused, naming the object and pointing at derivation.
    func exportPrivateKey(_ handle: CK_OBJECT_HANDLE, certificate: Certificate, name: String) throws -> PrivateKey {
        // One call for the flags and whatever values the token will give (an EC scalar, RSA
        // components): a sensitive key's values come back unavailable, the other type's invalid.
        let rsaTypes = [
            CKA_MODULUS, CKA_PUBLIC_EXPONENT, CKA_PRIVATE_EXPONENT, CKA_PRIME_1, CKA_PRIME_2, CKA_EXPONENT_1,
            CKA_EXPONENT_2, CKA_COEFFICIENT,
        ].map { CK_ATTRIBUTE_TYPE($0) }
        var values = try attributes(
            handle, [CKA_SENSITIVE, CKA_EXTRACTABLE, CKA_KEY_TYPE, CKA_VALUE].map { CK_ATTRIBUTE_TYPE($0) } + rsaTypes)
        defer {
            // By index, in place: iterating `values.keys` would hold the storage and wipe copies.
            var index = values.startIndex
            while index != values.endIndex {
                values.values[index].withUnsafeMutableBytes { SecretBytes.wipe($0) }
                index = values.index(after: index)
            }
        }
        let sensitive = bool(values[CK_ATTRIBUTE_TYPE(CKA_SENSITIVE)]) ?? true
        let extractable = bool(values[CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE)]) ?? false
        let keyType = ulong(values[CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)])
        if !sensitive {
            if keyType == CK_ULONG(CKK_EC) {
                guard var scalar = values[CK_ATTRIBUTE_TYPE(CKA_VALUE)] else {
                    throw DCError(.keyNotExtractable, "the token does not give out the key's value", subject: name)
                }
                return try KeyImport.ecPrivateKey(scalar: SecretBytes(consuming: &scalar), certificate: certificate)
            }
            if keyType == CK_ULONG(CKK_RSA) {
                func component(_ type: CK_ATTRIBUTE_TYPE) throws -> [UInt8] {
                    guard let value = values[type] else {
                        throw DCError(
                            .keyNotExtractable, "the token does not give out the RSA key's components", subject: name)
                    }
                    return value
                }
                let secret = { (type: Int) in SecretBytes(try component(CK_ATTRIBUTE_TYPE(type))) }
                return try KeyImport.rsaPrivateKey(
                    modulus: component(rsaTypes[0]), publicExponent: component(rsaTypes[1]),
                    privateExponent: secret(Int(CKA_PRIVATE_EXPONENT)),
                    prime1: secret(Int(CKA_PRIME_1)), prime2: secret(Int(CKA_PRIME_2)),
                    exponent1: secret(Int(CKA_EXPONENT_1)),
                    exponent2: secret(Int(CKA_EXPONENT_2)), coefficient: secret(Int(CKA_COEFFICIENT)),
                    certificate: certificate)
            }
            throw DCError(.unsupportedAlgorithm, "the key on the token is neither RSA nor EC", subject: name)
        }
        guard extractable else {
            throw DCError(
                .keyNotExtractable, "the private key cannot leave the card (CKA_EXTRACTABLE is false)", subject: name,
                remedy: .deriveNormally)
        }
        return try wrapOut(handle, certificate: certificate, name: name)
    }

    /// C_WrapKey under a fresh session AES-256 key whose value we chose, then unwrap here.
    private func wrapOut(_ handle: CK_OBJECT_HANDLE, certificate: Certificate, name: String) throws -> PrivateKey {
        let wrappingKey = try Digests.random(32)
        var aes: CK_OBJECT_HANDLE = 0
        // CKA_CLASS, CKA_KEY_TYPE, then the booleans CKA_TOKEN false and CKA_WRAP true, in one buffer
        // that outlives the call.
        var fixed =
            ulongBytes(CK_ULONG(CKO_SECRET_KEY)) + ulongBytes(CK_ULONG(CKK_AES)) + [
                CK_BBOOL(CK_FALSE), CK_BBOOL(CK_TRUE),
            ]
        let width = MemoryLayout<CK_ULONG>.size
        try fixed.withUnsafeMutableBytes { fixed in
            try wrappingKey.withUnsafeBytes { value in
                let base = fixed.baseAddress!  // cannot fail: `fixed` holds two CK_ULONGs and two bytes
                var template = [
                    CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_CLASS), pValue: base, ulValueLen: CK_ULONG(width)),
                    CK_ATTRIBUTE(
                        type: CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE), pValue: base + width, ulValueLen: CK_ULONG(width)),
                    CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_TOKEN), pValue: base + 2 * width, ulValueLen: 1),
                    CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_WRAP), pValue: base + 2 * width + 1, ulValueLen: 1),
                    CK_ATTRIBUTE(
                        type: CK_ATTRIBUTE_TYPE(CKA_VALUE),
                        pValue: UnsafeMutableRawPointer(mutating: value.baseAddress), ulValueLen: CK_ULONG(value.count)),
                ]
                try module.call("C_CreateObject") {
                    $0.C_CreateObject(self.handle, &template, CK_ULONG(template.count), &aes)
                }
            }
        }
        defer { _ = module.functions.pointee.C_DestroyObject(self.handle, aes) }
        var mechanism = CK_MECHANISM(
            mechanism: CK_MECHANISM_TYPE(CKM_AES_KEY_WRAP_PAD), pParameter: nil, ulParameterLen: 0)
        var length: CK_ULONG = 0
        let sized = module.functions.pointee.C_WrapKey(self.handle, &mechanism, aes, handle, nil, &length)
        if sized == CKR_KEY_UNEXTRACTABLE {
            throw DCError(
                .keyNotExtractable, "the private key cannot leave the card", subject: name,
                remedy: .deriveKeys)
        }
        guard sized == CKR_OK else {
            throw module.failure("C_WrapKey", sized, subject: name)
        }
        var wrapped = [UInt8](repeating: 0, count: Int(length))
        try module.call("C_WrapKey") { $0.C_WrapKey(self.handle, &mechanism, aes, handle, &wrapped, &length) }
        let pkcs8 = try KeyImport.unwrapAESKeyWrapPad(Array(wrapped.prefix(Int(length))), key: wrappingKey)
        let key = try pkcs8.withUnsafeBytes { try CredentialReader().privateKey(pkcs8: Array($0), source: name) }
        return try KeyImport.canonical(key, certificate: certificate)
    }
}
