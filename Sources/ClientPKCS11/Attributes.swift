internal import CPKCS11Types
import CredentialCoding
import DerivedCredentials

/// An attribute's value as the token holds it.
enum AttributeValue: Equatable {
    case bytes([UInt8])
    case number(CK_ULONG)
    case bool(Bool)
    /// A value the token never reveals (a private key's numbers): `CKR_ATTRIBUTE_SENSITIVE`.
    case sensitive

    /// The value as PKCS#11 lays it out in memory; nil when it is sensitive.
    var encoded: [UInt8]? {
        switch self {
        case .bytes(let bytes): bytes
        case .number(let number): withUnsafeBytes(of: number) { Array($0) }
        case .bool(let value): [value ? 1 : 0]
        case .sensitive: nil
        }
    }

    static func numbers(_ values: [CK_ULONG]) -> AttributeValue {
        .bytes(values.withUnsafeBytes { Array($0) })
    }
}

/// The attributes of the token's objects, by type.
enum ObjectAttributes {
    /// Every attribute of `kind` for `pair`.
    static func of(_ pair: TokenKeyPair, _ kind: ObjectKind) -> [CK_ATTRIBUTE_TYPE: AttributeValue] {
        let labels = pair.labels
        var attributes: [CK_ATTRIBUTE_TYPE: AttributeValue] = [
            CKA_TOKEN: .bool(true), CKA_MODIFIABLE: .bool(false), CKA_COPYABLE: .bool(false),
            CKA_DESTROYABLE: .bool(false), CKA_ID: .bytes(pair.id),
        ]
        switch kind {
        case .certificate:
            attributes[CKA_CLASS] = .number(CKO_CERTIFICATE)
            attributes[CKA_PRIVATE] = .bool(false)
            attributes[CKA_LABEL] = .bytes(Array(labels.certificate.utf8))
            attributes[CKA_CERTIFICATE_TYPE] = .number(CKC_X_509)
            attributes[CKA_TRUSTED] = .bool(false)
            attributes[CKA_CERTIFICATE_CATEGORY] = .number(1)  // the token user's own certificate
            attributes[CKA_SUBJECT] = .bytes(pair.names.subject)
            attributes[CKA_ISSUER] = .bytes(pair.names.issuer)
            attributes[CKA_SERIAL_NUMBER] = .bytes(pair.names.serialNumber)
            attributes[CKA_VALUE] = .bytes(pair.certificate.derBytes)
            attributes[CKA_URL] = .bytes([])
            attributes[CKA_HASH_OF_SUBJECT_PUBLIC_KEY] = .bytes([])
            attributes[CKA_HASH_OF_ISSUER_PUBLIC_KEY] = .bytes([])
            attributes[CKA_JAVA_MIDP_SECURITY_DOMAIN] = .number(0)
            attributes[CKA_START_DATE] = .bytes([])
            attributes[CKA_END_DATE] = .bytes([])
        case .publicKey, .privateKey:
            let isPrivate = kind == .privateKey
            attributes[CKA_CLASS] = .number(isPrivate ? CKO_PRIVATE_KEY : CKO_PUBLIC_KEY)
            attributes[CKA_PRIVATE] = .bool(isPrivate)
            attributes[CKA_LABEL] = .bytes(Array((isPrivate ? labels.privateKey : labels.publicKey).utf8))
            attributes[CKA_SUBJECT] = .bytes(pair.names.subject)
            attributes[CKA_START_DATE] = .bytes([])
            attributes[CKA_END_DATE] = .bytes([])
            attributes[CKA_LOCAL] = .bool(false)
            attributes[CKA_KEY_GEN_MECHANISM] = .number(unavailableInformation)
            attributes[CKA_PUBLIC_KEY_INFO] = .bytes(pair.publicParts.subjectPublicKeyInfo)
            let mechanisms = Mechanisms.allowed(for: pair, privateKey: isPrivate)
            attributes[CKA_ALLOWED_MECHANISMS] = .numbers(mechanisms)
            switch pair.publicParts.kind {
            case .ec:
                attributes[CKA_KEY_TYPE] = .number(CKK_EC)
                attributes[CKA_EC_PARAMS] = .bytes(pair.publicParts.ecParameters)
                if isPrivate {
                    attributes[CKA_VALUE] = .sensitive
                } else {
                    attributes[CKA_EC_POINT] = .bytes(DEREncoding.octetString(pair.publicParts.ecPoint))
                }
            case .rsa(let bits):
                attributes[CKA_KEY_TYPE] = .number(CKK_RSA)
                attributes[CKA_MODULUS] = .bytes(pair.publicParts.modulus)
                attributes[CKA_PUBLIC_EXPONENT] = .bytes(pair.publicParts.publicExponent)
                if isPrivate {
                    for secret in [
                        CKA_PRIVATE_EXPONENT, CKA_PRIME_1, CKA_PRIME_2, CKA_EXPONENT_1, CKA_EXPONENT_2, CKA_COEFFICIENT,
                    ] {
                        attributes[secret] = .sensitive
                    }
                } else {
                    attributes[CKA_MODULUS_BITS] = .number(CK_ULONG(bits))
                }
            }
            let permissions = pair.permissions
            if isPrivate {
                attributes[CKA_SENSITIVE] = .bool(true)
                attributes[CKA_EXTRACTABLE] = .bool(false)
                // Delivered from outside, not generated on the token: it was not always sensitive.
                attributes[CKA_ALWAYS_SENSITIVE] = .bool(false)
                attributes[CKA_NEVER_EXTRACTABLE] = .bool(false)
                attributes[CKA_SIGN] = .bool(permissions.sign)
                attributes[CKA_SIGN_RECOVER] = .bool(false)
                attributes[CKA_DECRYPT] = .bool(permissions.decrypt)
                attributes[CKA_UNWRAP] = .bool(permissions.decrypt)
                attributes[CKA_DERIVE] = .bool(permissions.derive)
                attributes[CKA_WRAP_WITH_TRUSTED] = .bool(false)
                attributes[CKA_ALWAYS_AUTHENTICATE] = .bool(false)
            } else {
                attributes[CKA_VERIFY] = .bool(permissions.sign)
                attributes[CKA_VERIFY_RECOVER] = .bool(false)
                attributes[CKA_ENCRYPT] = .bool(permissions.decrypt)
                attributes[CKA_WRAP] = .bool(permissions.decrypt)
                attributes[CKA_DERIVE] = .bool(false)
                attributes[CKA_TRUSTED] = .bool(false)
            }
        }
        return attributes
    }

    /// The attributes of a secret key that `C_DeriveKey` made (a session object).
    static func of(_ secret: DerivedSecret) -> [CK_ATTRIBUTE_TYPE: AttributeValue] {
        let revealed = !secret.sensitive && secret.extractable
        var attributes: [CK_ATTRIBUTE_TYPE: AttributeValue] = [
            CKA_CLASS: .number(CKO_SECRET_KEY), CKA_KEY_TYPE: .number(secret.keyType), CKA_TOKEN: .bool(false),
            CKA_PRIVATE: .bool(secret.private), CKA_MODIFIABLE: .bool(false), CKA_COPYABLE: .bool(false),
            CKA_DESTROYABLE: .bool(true), CKA_LABEL: .bytes(secret.label), CKA_ID: .bytes(secret.id),
            CKA_SENSITIVE: .bool(secret.sensitive), CKA_EXTRACTABLE: .bool(secret.extractable),
            CKA_ALWAYS_SENSITIVE: .bool(secret.sensitive), CKA_NEVER_EXTRACTABLE: .bool(!secret.extractable),
            CKA_LOCAL: .bool(false), CKA_KEY_GEN_MECHANISM: .number(CKM_ECDH1_DERIVE),
            CKA_VALUE_LEN: .number(CK_ULONG(secret.value.count)), CKA_DERIVE: .bool(false),
            CKA_ENCRYPT: .bool(false), CKA_DECRYPT: .bool(false), CKA_SIGN: .bool(false), CKA_VERIFY: .bool(false),
            CKA_WRAP: .bool(false), CKA_UNWRAP: .bool(false),
        ]
        attributes[CKA_VALUE] = revealed ? .bytes(secret.value.withUnsafeBytes { Array($0) }) : .sensitive
        return attributes
    }
}

/// A secret that `C_DeriveKey` agreed on: a session object, gone with its session or at logout.
struct DerivedSecret {
    var value: SecretBytes
    var keyType: CK_KEY_TYPE
    var sensitive: Bool
    var extractable: Bool
    /// `CKA_PRIVATE`, as the template asked (true unless it says otherwise); the secret is
    /// dropped at logout either way, as its key is.
    var `private`: Bool
    var label: [UInt8]
    var id: [UInt8]
}

/// The little DER the module writes itself.
enum DEREncoding {
    /// An OCTET STRING holding `bytes` (a `CKA_EC_POINT`).
    static func octetString(_ bytes: [UInt8]) -> [UInt8] {
        [0x04] + length(bytes.count) + bytes
    }

    /// The content of an OCTET STRING, if `bytes` is exactly one; nil otherwise.
    static func octetStringContent(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count >= 2, bytes[0] == 0x04 else { return nil }
        var offset = 2
        var count = Int(bytes[1])
        if bytes[1] & 0x80 != 0 {
            let width = Int(bytes[1] & 0x7F)
            guard (1...2).contains(width), bytes.count >= 2 + width else { return nil }
            count = bytes[2..<(2 + width)].reduce(0) { $0 << 8 | Int($1) }
            offset += width
        }
        guard bytes.count == offset + count else { return nil }
        return Array(bytes[offset...])
    }

    private static func length(_ count: Int) -> [UInt8] {
        switch count {
        case ..<0x80: [UInt8(count)]
        case ..<0x100: [0x81, UInt8(count)]
        default: [0x82, UInt8(count >> 8), UInt8(count & 0xFF)]
        }
    }
}

/// `CK_UNAVAILABLE_INFORMATION`, which Swift does not import (a cast in a macro).
let unavailableInformation = CK_ULONG.max
