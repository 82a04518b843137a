internal import COpenSSL
import DerivedCredentials
import FoundationEssentials
import Synchronization

/// A P-256 key that signs auth tokens with ES256 (ECDSA over P-256 with SHA-256, RFC 7518 §3.4):
/// the provider's issuing key signs delegations, a client's token key signs its tokens.
///
/// Signatures are in the JOSE form, the raw `r‖s` (64 bytes), not DER, and always low-S
/// (``ES256Signature``): the only form ``TokenPublicKey`` accepts. The private key is kept as
/// PKCS#8 DER in ``privateKey`` and is redacted wherever the key could be printed.
public struct TokenSigningKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The private key as PKCS#8 DER (redacted when printed), as it is stored.
    public let privateKey: PrivateKey
    /// The public half, which others use to verify.
    public let publicKey: TokenPublicKey
    private let signer: SharedPKey

    /// A fresh P-256 key. Throws `DCError/Code/cryptoFailure` if OpenSSL fails.
    public static func generate() throws -> TokenSigningKey {
        OpenSSL.ensureInitialized()
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw OpenSSL.failure("EVP_PKEY_CTX_new_from_name(EC)")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_generate(context, &key) == 1, let key
        else { throw OpenSSL.failure("EVP_PKEY_generate(P-256)") }
        let pkey = PKey(taking: key)
        return try TokenSigningKey(pkey, privateKey: try pkey.pkcs8())
    }

    /// The key in `pkcs8DER`; throws `DCError/Code/malformedInput` unless it is a P-256 key.
    public init(pkcs8DER: SecretBytes) throws {
        try self.init(privateKey: PrivateKey(pkcs8DER: pkcs8DER))
    }

    /// The key `privateKey` holds; throws `DCError/Code/malformedInput` unless it is a P-256 key
    /// with a named curve.
    public init(privateKey: PrivateKey) throws {
        guard let decoded = PKey.from(privateKey) else {
            throw DCError(.malformedInput, "not a PKCS#8 private key", underlying: OpenSSLError.drain())
        }
        try self.init(decoded, privateKey: privateKey)
    }

    private init(_ key: PKey, privateKey: PrivateKey) throws {
        guard key.kind == .ec(curve: "prime256v1", bits: 256), !key.hasExplicitCurveParameters else {
            throw DCError(.malformedInput, "not an EC P-256 key (\(key.algorithmDescription))")
        }
        func coordinate(_ name: String) throws -> [UInt8] {
            var number: OpaquePointer?
            guard EVP_PKEY_get_bn_param(key.pointer, name, &number) == 1, let number else {
                throw OpenSSL.failure("reading the P-256 public point")
            }
            defer { BN_free(number) }
            var bytes = [UInt8](repeating: 0, count: 32)
            guard BN_bn2binpad(number, &bytes, 32) == 32 else { throw OpenSSL.failure("BN_bn2binpad") }
            return bytes
        }
        self.privateKey = privateKey
        self.publicKey = try TokenPublicKey(
            x: coordinate(OSSL_PKEY_PARAM_EC_PUB_X), y: coordinate(OSSL_PKEY_PARAM_EC_PUB_Y))
        self.signer = SharedPKey(key)
    }

    /// The ES256 signature of `message` (SHA-256, then ECDSA): `r‖s`, 64 bytes, as JWS carries it,
    /// in its low-S form (``ES256Signature/lowS(_:)``).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw OpenSSL.failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        var der = [UInt8](repeating: 0, count: 80)
        var length = der.count
        guard EVP_DigestSignInit_ex(context, nil, "SHA256", nil, nil, signer.key.pointer, nil) == 1,
            EVP_DigestSign(context, &der, &length, message, message.count) == 1
        else { throw OpenSSL.failure("EVP_DigestSign(ES256)") }
        guard let raw = ES256Signature.raw(fromDER: Array(der.prefix(length))) else {
            throw OpenSSL.failure("converting the ECDSA signature")
        }
        return ES256Signature.lowS(raw)
    }

    /// Whether `signature` (raw `r‖s`) is an ES256 signature of `message` under the public key
    /// `publicKey`, given as an uncompressed point (`04‖x‖y`, 65 bytes). Anything malformed (a
    /// point off the curve, a signature of the wrong length, a high-S one) is simply false; it
    /// never throws.
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard let key = try? TokenPublicKey(uncompressedPoint: publicKey) else { return false }
        return key.isValidSignature(signature, for: message)
    }

    /// Whether `signature` (raw `r‖s`) is an ES256 signature of `message` under the public key whose
    /// JWK members `x` and `y` (base64url) are given. Anything malformed is simply false.
    public static func verify(_ signature: [UInt8], of message: [UInt8], jwkX: String, jwkY: String) -> Bool {
        guard let key = try? TokenPublicKey(jwkX: jwkX, jwkY: jwkY) else { return false }
        return key.isValidSignature(signature, for: message)
    }

    /// `TokenSigningKey(<redacted>)`: the private key never reaches a log.
    public var description: String { "TokenSigningKey(<redacted>)" }
    /// The same redacted text as ``description``.
    public var debugDescription: String { description }
    /// A mirror that shows only the public key's thumbprint, so that `dump()` does not print the private one.
    public var customMirror: Mirror {
        Mirror(self, children: ["privateKey": "<redacted>", "publicKey": publicKey.thumbprint], displayStyle: .struct)
    }
}

/// A P-256 public key that verifies ES256 signatures: an issuing key the verifier trusts, or the
/// token key a delegation certifies.
///
/// It is parsed and checked to be on the curve once, when it is made; verifying then reuses
/// OpenSSL's parsed key and a small pool of ready verification contexts, so a verification costs
/// one hash and one ECDSA check, with no Swift heap allocation (OpenSSL allocates its own
/// temporaries). Equal keys compare equal by
/// their coordinates.
public struct TokenPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// The affine x coordinate, 32 bytes, big-endian.
    public let x: [UInt8]
    /// The affine y coordinate, 32 bytes, big-endian.
    public let y: [UInt8]
    /// The RFC 7638 JWK thumbprint: base64url of the SHA-256 of ``thumbprintInput``. Used as the key id (`kid`).
    public let thumbprint: String
    private let verifier: ES256Verifier

    /// The key with coordinates `x` and `y` (32 bytes each). Throws `DCError/Code/malformedInput`
    /// for any other length or a point that is not on P-256.
    public init(x: [UInt8], y: [UInt8]) throws {
        guard x.count == 32, y.count == 32 else {
            throw DCError(.malformedInput, "a P-256 coordinate is not 32 bytes")
        }
        guard let verifier = ES256Verifier(point: [4] + x + y) else {
            throw DCError(.malformedInput, "the point is not on the P-256 curve", underlying: OpenSSLError.drain())
        }
        self.x = x
        self.y = y
        self.verifier = verifier
        self.thumbprint = Base64URL.encode(Digests.sha256(Array(TokenPublicKey.thumbprintInput(x: x, y: y).utf8)))
    }

    /// The key given as an uncompressed point, `04‖x‖y` (65 bytes). Throws
    /// `DCError/Code/malformedInput` for any other encoding or a point not on P-256.
    public init(uncompressedPoint point: [UInt8]) throws {
        guard point.count == 65, point[0] == 4 else {
            throw DCError(.malformedInput, "not an uncompressed P-256 point (04‖x‖y, 65 bytes)")
        }
        try self.init(x: Array(point[1..<33]), y: Array(point[33..<65]))
    }

    /// The key whose JWK members `x` and `y` are given (canonical unpadded base64url of 32 bytes
    /// each). Throws `DCError/Code/malformedInput` otherwise.
    public init(jwkX: String, jwkY: String) throws {
        guard let x = Base64URL.decode(jwkX), let y = Base64URL.decode(jwkY) else {
            throw DCError(.malformedInput, "a JWK coordinate is not canonical base64url")
        }
        try self.init(x: x, y: y)
    }

    /// `04‖x‖y`, 65 bytes.
    public var uncompressedPoint: [UInt8] { [4] + x + y }
    /// The JWK member `x`: base64url of ``x``.
    public var jwkX: String { Base64URL.encode(x) }
    /// The JWK member `y`: base64url of ``y``.
    public var jwkY: String { Base64URL.encode(y) }

    /// The JWK's required members in RFC 7638's canonical form, which is hashed for the thumbprint:
    /// `{"crv":"P-256","kty":"EC","x":"…","y":"…"}` (sorted, no white space).
    public var thumbprintInput: String { TokenPublicKey.thumbprintInput(x: x, y: y) }

    private static func thumbprintInput(x: [UInt8], y: [UInt8]) -> String {
        #"{"crv":"P-256","kty":"EC","x":""# + Base64URL.encode(x) + #"","y":""# + Base64URL.encode(y) + #""}"#
    }

    /// Whether `signature` (raw `r‖s`, 64 bytes) is this key's ES256 signature of `message`.
    /// Anything malformed is simply false, and so is a high-S signature, valid ECDSA or not: each
    /// signature has one encoding (``ES256Signature``).
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        signature.withUnsafeBytes { signature in
            message.withUnsafeBytes { message in isValidSignature(signature, for: message) }
        }
    }

    /// Whether the 64 bytes in `signature` (raw `r‖s`) are this key's ES256 signature of the bytes
    /// in `message`. Anything malformed or high-S is simply false. The buffers are only read during
    /// the call.
    public func isValidSignature(_ signature: UnsafeRawBufferPointer, for message: UnsafeRawBufferPointer) -> Bool {
        verifier.verify(signature: signature, message: message)
    }

    /// Keys are equal when their points are.
    public static func == (lhs: TokenPublicKey, rhs: TokenPublicKey) -> Bool { lhs.x == rhs.x && lhs.y == rhs.y }
    /// Hashes the point, matching `==`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(x)
        hasher.combine(y)
    }

    /// `TokenPublicKey(<thumbprint>)`.
    public var description: String { "TokenPublicKey(\(thumbprint))" }
}

/// An `EVP_PKEY` shared between threads.
private final class SharedPKey: @unchecked Sendable {
    // The key is never modified after it is made; OpenSSL allows concurrent signing with one
    // EVP_PKEY as long as each thread has its own operation context, which `sign` makes.
    let key: PKey
    init(_ key: PKey) { self.key = key }
}

/// A parsed P-256 public key and a pool of contexts ready to verify with it.
///
/// `EVP_DigestVerifyInit` makes a context, fetches the algorithms by name and sets up the key on
/// every call, which costs as much as a third of the ECDSA check itself in OpenSSL 3.0. A context
/// that is initialised once can verify again and again, as `openssl speed` does; each is used by
/// one thread at a time, taken from and given back to `idle`.
private final class ES256Verifier: @unchecked Sendable {
    // `key` is never modified after init. `idle` is a `Mutex`; a context is used
    // by the one thread that took it out.
    let key: PKey
    private let idle = Mutex<[PooledContext]>([])
    /// Contexts kept for later (more are freed after use): about one per thread that verifies at once.
    private static let maximumIdle = 64

    init?(point: [UInt8]) {
        // A copy of the P-256 parameters with the point set: about 9 µs, against 50 µs for
        // EVP_PKEY_fromdata, which builds the curve's group from its name every time.
        guard let template = ES256Verifier.curveParameters?.key, let copy = EVP_PKEY_dup(template.pointer) else {
            return nil
        }
        let key = PKey(taking: copy)
        // EC_POINT_oct2point underneath refuses a point that is not on the curve.
        guard EVP_PKEY_set1_encoded_public_key(key.pointer, point, point.count) == 1 else { return nil }
        // On the curve and not the point at infinity (P-256 has cofactor 1, so that is enough).
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else { return nil }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check_quick(check) == 1 else { return nil }
        self.key = key
    }

    /// A key that holds only the P-256 domain parameters, made once and copied for every public key.
    private static let curveParameters: SharedPKey? = {
        // Parameter generation for a named curve only looks the curve up. (EVP_PKEY_CTX_set_group_name
        // copies the name at once; OSSL_PARAM_BLD_push_utf8_string would keep a pointer to a
        // temporary Swift string until OSSL_PARAM_BLD_to_param.)
        OpenSSL.ensureInitialized()
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        var made: OpaquePointer?
        guard EVP_PKEY_paramgen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_paramgen(context, &made) == 1, let made
        else {
            OpenSSLError.clear()
            return nil
        }
        return SharedPKey(PKey(taking: made))
    }()

    deinit { idle.withLock { $0.forEach { EVP_PKEY_CTX_free($0.pointer) } } }

    private func makeContext() -> OpaquePointer? {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else { return nil }
        guard EVP_PKEY_verify_init(context) == 1, EVP_PKEY_CTX_set_signature_md(context, EVP_sha256()) == 1 else {
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return context
    }

    func verify(signature: UnsafeRawBufferPointer, message: UnsafeRawBufferPointer) -> Bool {
        // The one place every ES256 signature the project accepts is checked: low-S only.
        guard signature.count == 64, ES256Signature.hasLowS(signature) else { return false }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32 + ES256Signature.maximumDERLength) {
            buffer in
            let digest = UnsafeMutableBufferPointer(rebasing: buffer[0..<32])
            let der = UnsafeMutableBufferPointer(rebasing: buffer[32...])
            var digestLength: UInt32 = 0
            let hashed = EVP_Digest(
                message.baseAddress ?? UnsafeRawPointer(digest.baseAddress), message.count, digest.baseAddress,
                &digestLength, Digests.sha256Algorithm.pointer ?? EVP_sha256(), nil)
            guard hashed == 1, digestLength == 32 else {
                OpenSSLError.clear()
                return false
            }
            let derLength = ES256Signature.der(fromRaw: signature, into: der)
            guard let context = idle.withLock({ $0.popLast() })?.pointer ?? makeContext() else {
                OpenSSLError.clear()
                return false
            }
            let result = EVP_PKEY_verify(context, der.baseAddress, derLength, digest.baseAddress, 32)
            if result >= 0 {
                // 1 (valid) or 0 (not valid): the context holds no state from the call and is reused.
                let kept = idle.withLock { idle -> Bool in
                    guard idle.count < ES256Verifier.maximumIdle else { return false }
                    idle.append(PooledContext(pointer: context))
                    return true
                }
                if !kept { EVP_PKEY_CTX_free(context) }
            } else {
                EVP_PKEY_CTX_free(context)
            }
            if result != 1 { OpenSSLError.clear() }
            return result == 1
        }
    }
}

/// The one encoding of an ES256 signature.
///
/// ECDSA is malleable: when `(r, s)` is a valid signature, so is `(r, n − s)`, where `n` is the
/// order of the P-256 group, so anyone can turn a token into a second, different string that
/// verifies. The project's rule is the one Bitcoin (BIP 62) and libsecp256k1 follow: only the
/// **low-S** form, `s ≤ ⌊n / 2⌋`, is a signature. Every ES256 signature the project makes is put
/// in that form (``lowS(_:)``) and every one it verifies must be in it (``hasLowS(_:)``, checked
/// by ``TokenPublicKey``), so a token has exactly one valid encoding. The raw form is JOSE's
/// `r‖s`, 32 big-endian bytes each (RFC 7518 §3.4); internally it is also converted to and from
/// the DER `ECDSA-Sig-Value` OpenSSL takes.
public enum ES256Signature {
    /// The order `n` of the P-256 group, big-endian (SEC 2, secp256r1).
    static let order: [UInt8] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
    ]
    /// `⌊n / 2⌋`, big-endian: the largest `s` of a low-S signature.
    static let halfOrder: [UInt8] = [
        0x7F, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xDE, 0x73, 0x7D, 0x56, 0xD3, 0x8B, 0xCF, 0x42, 0x79, 0xDC, 0xE5, 0x61, 0x7E, 0x31, 0x92, 0xA8,
    ]

    /// Whether the raw `r‖s` in `signature` (64 bytes) has `s ≤ ⌊n / 2⌋`. Any other length is false.
    public static func hasLowS(_ signature: [UInt8]) -> Bool {
        signature.withUnsafeBytes { hasLowS($0) }
    }

    /// Whether the raw `r‖s` in `signature` (64 bytes) has `s ≤ ⌊n / 2⌋`. Any other length is false.
    static func hasLowS(_ signature: UnsafeRawBufferPointer) -> Bool {
        // Equal lengths, big-endian: the lexicographic order of the bytes is the numeric order.
        signature.count == 64 && !halfOrder.lexicographicallyPrecedes(signature[32..<64])
    }

    /// `signature` (raw `r‖s`, 64 bytes) in its low-S form: `(r, n − s)` when `⌊n / 2⌋ < s < n`,
    /// else unchanged (a low-S signature, or one no verifier accepts anyway).
    public static func lowS(_ signature: [UInt8]) -> [UInt8] {
        guard signature.count == 64, !hasLowS(signature), signature[32...].lexicographicallyPrecedes(order) else {
            return signature
        }
        var result = signature
        var borrow = 0
        for index in (0..<32).reversed() {
            let difference = Int(order[index]) - Int(signature[32 + index]) - borrow
            result[32 + index] = UInt8(truncatingIfNeeded: difference)
            borrow = difference < 0 ? 1 : 0
        }
        return result
    }

    /// SEQUENCE (2) + two INTEGERs of at most 33 bytes each (2 + 33).
    static let maximumDERLength = 72

    /// Writes the DER `SEQUENCE { INTEGER r, INTEGER s }` for the 64 bytes `raw` into `output`
    /// (at least ``maximumDERLength`` bytes) and returns its length. Minimal encoding: leading
    /// zero bytes dropped, a zero byte added when the high bit is set. r or s of zero becomes
    /// `INTEGER 0`, which OpenSSL then refuses.
    static func der(fromRaw raw: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var length = 2
        for half in 0..<2 {
            var start = half * 32
            let end = start + 32
            while start < end - 1, raw[start] == 0 { start += 1 }
            let pad = raw[start] & 0x80 != 0 ? 1 : 0
            output[length] = 0x02
            output[length + 1] = UInt8(end - start + pad)
            length += 2
            if pad == 1 {
                output[length] = 0
                length += 1
            }
            for index in start..<end {
                output[length] = raw[index]
                length += 1
            }
        }
        output[0] = 0x30
        output[1] = UInt8(length - 2)
        return length
    }

    /// The raw `r‖s` of a DER signature as OpenSSL makes it, or nil.
    static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        guard let signature = der.decodeDER({ d2i_ECDSA_SIG(nil, $0, $1) }, free: ECDSA_SIG_free) else { return nil }
        defer { ECDSA_SIG_free(signature) }
        var raw = [UInt8](repeating: 0, count: 64)
        guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature),
            raw.withUnsafeMutableBufferPointer({
                BN_bn2binpad(r, $0.baseAddress, 32) == 32 && BN_bn2binpad(s, $0.baseAddress?.advanced(by: 32), 32) == 32
            })
        else { return nil }
        return raw
    }
}
