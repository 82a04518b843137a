internal import CPKCS11Types
import CredentialCoding

/// What an operation does with a key.
enum KeyUse {
    case sign
    case decrypt
    case derive
}

/// The mechanisms the token offers, what each is for, and how its parameters are read.
enum Mechanisms {
    private struct Entry {
        var type: CK_MECHANISM_TYPE
        var rsa: Bool
        var uses: [KeyUse]
    }

    private static let entries: [Entry] = [
        Entry(type: CKM_ECDSA, rsa: false, uses: [.sign]),
        Entry(type: CKM_ECDSA_SHA224, rsa: false, uses: [.sign]),
        Entry(type: CKM_ECDSA_SHA256, rsa: false, uses: [.sign]),
        Entry(type: CKM_ECDSA_SHA384, rsa: false, uses: [.sign]),
        Entry(type: CKM_ECDSA_SHA512, rsa: false, uses: [.sign]),
        Entry(type: CKM_ECDH1_DERIVE, rsa: false, uses: [.derive]),
        Entry(type: CKM_RSA_PKCS, rsa: true, uses: [.sign, .decrypt]),
        Entry(type: CKM_RSA_PKCS_OAEP, rsa: true, uses: [.decrypt]),
        Entry(type: CKM_RSA_PKCS_PSS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA224_RSA_PKCS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA256_RSA_PKCS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA384_RSA_PKCS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA512_RSA_PKCS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA224_RSA_PKCS_PSS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA256_RSA_PKCS_PSS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA384_RSA_PKCS_PSS, rsa: true, uses: [.sign]),
        Entry(type: CKM_SHA512_RSA_PKCS_PSS, rsa: true, uses: [.sign]),
    ]

    /// Every mechanism, for `C_GetMechanismList`.
    static var all: [CK_MECHANISM_TYPE] { entries.map(\.type) }

    /// What `C_GetMechanismInfo` says of `type`; nil when the token does not offer it.
    static func info(_ type: CK_MECHANISM_TYPE) -> CK_MECHANISM_INFO? {
        guard let entry = entries.first(where: { $0.type == type }) else { return nil }
        var flags: CK_FLAGS = 0
        if entry.uses.contains(.sign) { flags |= CKF_SIGN }
        if entry.uses.contains(.decrypt) { flags |= CKF_DECRYPT }
        if entry.uses.contains(.derive) { flags |= CKF_DERIVE }
        if !entry.rsa { flags |= CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS }
        return entry.rsa
            ? CK_MECHANISM_INFO(ulMinKeySize: 2048, ulMaxKeySize: 16384, flags: flags)
            : CK_MECHANISM_INFO(ulMinKeySize: 256, ulMaxKeySize: 521, flags: flags)
    }

    /// The mechanisms a key may be used with (`CKA_ALLOWED_MECHANISMS`): those of its kind whose
    /// uses its permissions allow; for a public key, those of its private key.
    static func allowed(for pair: TokenKeyPair, privateKey: Bool) -> [CK_MECHANISM_TYPE] {
        let rsa = pair.publicParts.kind.isRSA
        return entries.filter { entry in
            entry.rsa == rsa && entry.uses.contains { permitted($0, by: pair.permissions) }
        }.map(\.type)
    }

    static func permitted(_ use: KeyUse, by permissions: KeyPermissions) -> Bool {
        switch use {
        case .sign: permissions.sign
        case .decrypt: permissions.decrypt
        case .derive: permissions.derive
        }
    }

    /// Checks that `type` is a mechanism for `use` with a key of `pair`'s kind.
    static func check(_ type: CK_MECHANISM_TYPE, for use: KeyUse, pair: TokenKeyPair) throws(ReturnValue) {
        guard let entry = entries.first(where: { $0.type == type }), entry.uses.contains(use) else {
            throw ReturnValue(CKR_MECHANISM_INVALID)
        }
        guard entry.rsa == pair.publicParts.kind.isRSA else { throw ReturnValue(CKR_KEY_TYPE_INCONSISTENT) }
    }

    /// The signing mechanisms that take no parameters, and their schemes.
    private static let plainSignatures: [CK_MECHANISM_TYPE: SignatureScheme] = [
        CKM_ECDSA: .ecdsa(nil), CKM_ECDSA_SHA224: .ecdsa(.sha224), CKM_ECDSA_SHA256: .ecdsa(.sha256),
        CKM_ECDSA_SHA384: .ecdsa(.sha384), CKM_ECDSA_SHA512: .ecdsa(.sha512), CKM_RSA_PKCS: .rsaPKCS1(nil),
        CKM_SHA224_RSA_PKCS: .rsaPKCS1(.sha224), CKM_SHA256_RSA_PKCS: .rsaPKCS1(.sha256),
        CKM_SHA384_RSA_PKCS: .rsaPKCS1(.sha384), CKM_SHA512_RSA_PKCS: .rsaPKCS1(.sha512),
    ]

    /// The PSS mechanisms, and the digest each hashes its input with (none: the input is the digest).
    private static let pssSignatures: [CK_MECHANISM_TYPE: DigestAlgorithm?] = [
        CKM_RSA_PKCS_PSS: nil, CKM_SHA224_RSA_PKCS_PSS: .sha224, CKM_SHA256_RSA_PKCS_PSS: .sha256,
        CKM_SHA384_RSA_PKCS_PSS: .sha384, CKM_SHA512_RSA_PKCS_PSS: .sha512,
    ]

    /// How to sign with `mechanism`.
    static func signatureScheme(_ mechanism: CK_MECHANISM, keyBytes: Int) throws(ReturnValue) -> SignatureScheme {
        if let scheme = plainSignatures[mechanism.mechanism] {
            try noParameters(mechanism)
            return scheme
        }
        if let hashing = pssSignatures[mechanism.mechanism] {
            return try pss(mechanism, hashing: hashing, keyBytes: keyBytes)
        }
        throw ReturnValue(CKR_MECHANISM_INVALID)
    }

    /// How to decrypt with `mechanism`.
    static func decryptionPadding(_ mechanism: CK_MECHANISM) throws(ReturnValue) -> DecryptionPadding {
        switch mechanism.mechanism {
        case CKM_RSA_PKCS:
            try noParameters(mechanism)
            return .pkcs1
        case CKM_RSA_PKCS_OAEP:
            let parameters: CK_RSA_PKCS_OAEP_PARAMS = try self.parameters(mechanism)
            guard let digest = digest(parameters.hashAlg), let mgf = mgf(parameters.mgf) else {
                throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
            }
            var label: [UInt8] = []
            switch parameters.source {
            case 0:
                guard parameters.ulSourceDataLen == 0 else { throw ReturnValue(CKR_MECHANISM_PARAM_INVALID) }
            case CKZ_DATA_SPECIFIED:
                if parameters.ulSourceDataLen > 0 {
                    guard let source = parameters.pSourceData, parameters.ulSourceDataLen <= 1 << 16 else {
                        throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
                    }
                    label = Array(UnsafeRawBufferPointer(start: source, count: Int(parameters.ulSourceDataLen)))
                }
            default:
                throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
            }
            return .oaep(digest: digest, mgf: mgf, label: label)
        default:
            throw ReturnValue(CKR_MECHANISM_INVALID)
        }
    }

    /// The peer's public point of an ECDH1 derivation on a curve of `fieldBytes`-byte
    /// coordinates: raw, or as a DER OCTET STRING, which some callers send.
    static func peerPoint(_ mechanism: CK_MECHANISM, fieldBytes: Int) throws(ReturnValue) -> [UInt8] {
        guard mechanism.mechanism == CKM_ECDH1_DERIVE else { throw ReturnValue(CKR_MECHANISM_INVALID) }
        let parameters: CK_ECDH1_DERIVE_PARAMS = try self.parameters(mechanism)
        guard parameters.kdf == CKD_NULL, parameters.ulSharedDataLen == 0, let data = parameters.pPublicData,
            (1...1024).contains(parameters.ulPublicDataLen)
        else { throw ReturnValue(CKR_MECHANISM_PARAM_INVALID) }
        let bytes = Array(UnsafeBufferPointer(start: data, count: Int(parameters.ulPublicDataLen)))
        let raw = [1 + 2 * fieldBytes, 1 + fieldBytes]
        if raw.contains(bytes.count), let first = bytes.first, [2, 3, 4].contains(first) { return bytes }
        guard let content = DEREncoding.octetStringContent(bytes) else {
            throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
        }
        return content
    }

    // MARK: - Parameters

    private static func noParameters(_ mechanism: CK_MECHANISM) throws(ReturnValue) {
        guard mechanism.ulParameterLen == 0 else { throw ReturnValue(CKR_MECHANISM_PARAM_INVALID) }
    }

    private static func parameters<T>(_ mechanism: CK_MECHANISM) throws(ReturnValue) -> T {
        guard let pointer = mechanism.pParameter, mechanism.ulParameterLen == CK_ULONG(MemoryLayout<T>.size) else {
            throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
        }
        return pointer.loadUnaligned(as: T.self)
    }

    private static func pss(
        _ mechanism: CK_MECHANISM, hashing: DigestAlgorithm?, keyBytes: Int
    ) throws(ReturnValue) -> SignatureScheme {
        let parameters: CK_RSA_PKCS_PSS_PARAMS = try self.parameters(mechanism)
        // SHA-1 may be MGF1's digest, never the signature's.
        guard let digest = digest(parameters.hashAlg), digest != .sha1, let mgf = mgf(parameters.mgf),
            hashing == nil || hashing == digest, parameters.sLen <= CK_ULONG(max(0, keyBytes - digest.length - 2))
        else { throw ReturnValue(CKR_MECHANISM_PARAM_INVALID) }
        return .rsaPSS(digest: digest, mgf: mgf, saltLength: Int(parameters.sLen), hashingInput: hashing != nil)
    }

    private static func digest(_ type: CK_MECHANISM_TYPE) -> DigestAlgorithm? {
        switch type {
        case CKM_SHA_1: .sha1
        case CKM_SHA224: .sha224
        case CKM_SHA256: .sha256
        case CKM_SHA384: .sha384
        case CKM_SHA512: .sha512
        default: nil
        }
    }

    private static func mgf(_ type: CK_RSA_PKCS_MGF_TYPE) -> DigestAlgorithm? {
        switch type {
        case CKG_MGF1_SHA1: .sha1
        case CKG_MGF1_SHA224: .sha224
        case CKG_MGF1_SHA256: .sha256
        case CKG_MGF1_SHA384: .sha384
        case CKG_MGF1_SHA512: .sha512
        default: nil
        }
    }
}

extension PublicKeyParts.Kind {
    /// Whether the key is an RSA key (else an EC key).
    var isRSA: Bool {
        if case .rsa = self { return true }
        return false
    }
}

extension SignatureScheme {
    /// Whether the scheme hashes its input (a multi-part mechanism such as `CKM_ECDSA_SHA256`),
    /// rather than signing a digest or block the caller made (`CKM_ECDSA`, `CKM_RSA_PKCS`).
    var hashes: Bool {
        switch self {
        case .ecdsa(let digest), .rsaPKCS1(let digest): digest != nil
        case .rsaPSS(_, _, _, let hashingInput): hashingInput
        }
    }
}
