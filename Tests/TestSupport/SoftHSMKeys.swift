import COpenSSL
import CP11Kit
import Foundation

/// Keys that softhsm2-util and pkcs11-tool cannot make (they make every key sensitive, and
/// non-extractable): created with C_CreateObject, which is the only way to get a non-sensitive
/// extractable key, or a sensitive but extractable one, into SoftHSM2.
public enum SoftHSMKeys {
    public struct Failure: Error, CustomStringConvertible { public var description: String }

    /// Creates an EC private key object from `keyFile` (PEM, P-256 or P-384) on the token.
    public static func createECKey(token: String, pin: String, id: UInt8, keyFile: String, sensitive: Bool) throws {
        let scalar = try privateScalar(keyFile)
        let curveOID: [UInt8] =
            scalar.count == 32
            ? [0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07] : [0x06, 0x05, 0x2B, 0x81, 0x04, 0x00, 0x22]
        try create(
            token: token, pin: pin, id: id, keyType: CK_KEY_TYPE(CKK_EC), sensitive: sensitive,
            values: [
                (CK_ATTRIBUTE_TYPE(CKA_EC_PARAMS), curveOID), (CK_ATTRIBUTE_TYPE(CKA_VALUE), scalar),
            ])
    }

    /// Creates an RSA private key object from `keyFile` (PEM) on the token, from its CRT components.
    public static func createRSAKey(token: String, pin: String, id: UInt8, keyFile: String, sensitive: Bool) throws {
        let names: [(String, Int)] = [
            ("n", Int(CKA_MODULUS)), ("e", Int(CKA_PUBLIC_EXPONENT)), ("d", Int(CKA_PRIVATE_EXPONENT)),
            ("rsa-factor1", Int(CKA_PRIME_1)),
            ("rsa-factor2", Int(CKA_PRIME_2)), ("rsa-exponent1", Int(CKA_EXPONENT_1)),
            ("rsa-exponent2", Int(CKA_EXPONENT_2)),
            ("rsa-coefficient1", Int(CKA_COEFFICIENT)),
        ]
        let components = try names.map { (CK_ATTRIBUTE_TYPE($0.1), try bigNumber(keyFile, $0.0)) }
        try create(
            token: token, pin: pin, id: id, keyType: CK_KEY_TYPE(CKK_RSA), sensitive: sensitive, values: components)
    }

    static func create(
        token: String, pin: String, id: UInt8, keyType keyTypeValue: CK_KEY_TYPE, sensitive: Bool,
        values: [(CK_ATTRIBUTE_TYPE, [UInt8])]
    ) throws {
        guard let module = p11_kit_module_load(SoftHSM.module, 0) else {
            throw Failure(description: "cannot load SoftHSM")
        }
        let initialized = p11_kit_module_initialize(module)
        guard initialized == CKR_OK || initialized == CKR_CRYPTOKI_ALREADY_INITIALIZED else {
            throw Failure(description: "C_Initialize \(initialized)")
        }
        let functions = module.pointee
        var count: CK_ULONG = 0
        _ = functions.C_GetSlotList(CK_BBOOL(CK_TRUE), nil, &count)
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        _ = functions.C_GetSlotList(CK_BBOOL(CK_TRUE), &slots, &count)
        guard
            let slot = slots.first(where: { slot in
                var info = CK_TOKEN_INFO()
                _ = functions.C_GetTokenInfo(slot, &info)
                return withUnsafeBytes(of: info.label) { String(decoding: $0, as: UTF8.self) }.trimmingCharacters(
                    in: .whitespaces) == token
            })
        else { throw Failure(description: "no token \(token)") }
        var session: CK_SESSION_HANDLE = 0
        guard functions.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION | CKF_RW_SESSION), nil, nil, &session) == CKR_OK
        else {
            throw Failure(description: "C_OpenSession")
        }
        defer { _ = functions.C_CloseSession(session) }
        var pinBytes = Array(pin.utf8)
        let login = functions.C_Login(session, CK_USER_TYPE(CKU_USER), &pinBytes, CK_ULONG(pinBytes.count))
        guard login == CKR_OK || login == CKR_USER_ALREADY_LOGGED_IN else {
            throw Failure(description: "C_Login \(login)")
        }
        defer { _ = functions.C_Logout(session) }
        let word = { (value: CK_ULONG) in withUnsafeBytes(of: value) { Array($0) } }
        let yes = [UInt8(CK_TRUE)]
        // Every value lives in `storage` for the whole C_CreateObject call.
        let attributes: [(CK_ATTRIBUTE_TYPE, [UInt8])] =
            [
                (CK_ATTRIBUTE_TYPE(CKA_CLASS), word(CK_ULONG(CKO_PRIVATE_KEY))),
                (CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE), word(keyTypeValue)),
                (CK_ATTRIBUTE_TYPE(CKA_TOKEN), yes), (CK_ATTRIBUTE_TYPE(CKA_PRIVATE), yes),
                (CK_ATTRIBUTE_TYPE(CKA_SIGN), yes),
                (CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE), yes),
                (CK_ATTRIBUTE_TYPE(CKA_SENSITIVE), [UInt8(sensitive ? CK_TRUE : CK_FALSE)]),
                (CK_ATTRIBUTE_TYPE(CKA_ID), [id]), (CK_ATTRIBUTE_TYPE(CKA_LABEL), Array("Key \(id)".utf8)),
            ] + values
        var storage = attributes.map(\.1)
        var template: [CK_ATTRIBUTE] = []
        var object: CK_OBJECT_HANDLE = 0
        let created = storage.withUnsafeMutableBufferPointer { buffers -> CK_RV in
            for index in attributes.indices {
                template.append(
                    CK_ATTRIBUTE(
                        type: attributes[index].0, pValue: buffers[index].withUnsafeMutableBytes { $0.baseAddress },
                        ulValueLen: CK_ULONG(buffers[index].count)))
            }
            return functions.C_CreateObject(session, &template, CK_ULONG(template.count), &object)
        }
        guard created == CKR_OK else { throw Failure(description: "C_CreateObject \(created)") }
    }

    /// A big-number parameter of a PEM key (RSA components, the EC scalar `priv`), big-endian,
    /// left-padded with zeros to `size` bytes when given.
    static func bigNumber(_ keyFile: String, _ name: String, size: Int? = nil) throws -> [UInt8] {
        let text = try [UInt8](Data(contentsOf: URL(fileURLWithPath: keyFile)))
        return try text.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)),
                let key = PEM_read_bio_PrivateKey(bio, nil, nil, nil)
            else { throw Failure(description: "cannot read \(keyFile)") }
            defer {
                BIO_free(bio)
                EVP_PKEY_free(key)
            }
            var number: OpaquePointer?
            guard EVP_PKEY_get_bn_param(key, name, &number) == 1, let number else {
                throw Failure(description: "no \(name)")
            }
            defer { BN_free(number) }
            let length = size ?? Int((BN_num_bits(number) + 7) / 8)
            var out = [UInt8](repeating: 0, count: length)
            guard BN_bn2binpad(number, &out, Int32(length)) == Int32(length) else {
                throw Failure(description: "BN_bn2binpad")
            }
            return out
        }
    }

    /// The EC private scalar of a PEM key, padded to the curve's size (P-256: 32, P-384: 48).
    static func privateScalar(_ keyFile: String) throws -> [UInt8] {
        let bits = try bigNumber(keyFile, "priv").count * 8
        return try bigNumber(keyFile, "priv", size: bits <= 256 ? 32 : 48)
    }
}
