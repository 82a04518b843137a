import CredentialCoding
import DerivedCredentials

/// A JSON Web Signature in compact serialization (RFC 7515 §7.1), restricted to what auth tokens
/// use: ES256 only, a protected header with exactly the members `alg`, `typ` and (for delegations)
/// `kid`, and nothing unprotected.
///
/// Parsing is strict: three canonical base64url parts (`Base64URL` in CredentialCoding) separated
/// by two dots, a header that is strict JSON (`typ` as expected, no duplicate, unknown or
/// critical member, `alg` exactly `ES256`, so `none` and every other algorithm are refused), a
/// 64-byte signature, and size caps on every part. A parsed JWS is not yet verified: call
/// ``isSigned(by:)``.
public struct CompactJWS: Sendable, Equatable {
    /// The longest compact JWS accepted, in bytes (the whole auth token has the same cap).
    public static let maximumLength = 4096
    /// The longest decoded protected header accepted, in bytes.
    public static let maximumHeaderLength = 256

    /// The compact serialization: `header.payload.signature`.
    public let text: String
    /// The header's `typ`, such as `dc-dlg+jwt`.
    public let type: String
    /// The header's `kid`, when it has one.
    public let keyID: String?
    /// The decoded payload (JSON bytes).
    public let payload: [UInt8]
    /// The decoded signature: raw `r‖s`, 64 bytes.
    public let signature: [UInt8]
    /// What the signature covers: the ASCII of `header.payload` (RFC 7515 §5.1).
    public let signingInput: [UInt8]

    /// Parses `text` strictly. The header must carry `typ` equal to `type`, and a `kid` exactly when
    /// `keyed` is true. Throws `DCError.Code.invalid` naming the first rule broken.
    public init(parsing text: String, type: String, keyed: Bool) throws {
        do throws(FormatError) {
            self = try CompactJWS(bytes: Array(text.utf8)[...], type: type, keyed: keyed)
        } catch {
            throw DCError(.invalid, "not a valid \(type) JWS: \(error.description)")
        }
    }

    /// Signs `payload` (JSON text) with `key`: the header is `{"alg":"ES256","kid":…,"typ":…}`, its
    /// members in that order and `kid` left out when `keyID` is nil.
    public static func sign(payload: String, type: String, keyID: String?, key: TokenSigningKey) throws -> CompactJWS {
        try sign(payload: payload, type: type, keyID: keyID, key: key, maximumLength: maximumLength)
    }

    /// Signs as ``sign(payload:type:keyID:key:)`` does, for a format whose cap on the whole JWS is
    /// `maximumLength` bytes rather than ``maximumLength`` (identity JWTs).
    package static func sign(
        payload: String, type: String, keyID: String?, key: TokenSigningKey, maximumLength: Int
    ) throws -> CompactJWS {
        var header: [(String, String)] = [("alg", JSONText.string("ES256"))]
        if let keyID { header.append(("kid", JSONText.string(keyID))) }
        header.append(("typ", JSONText.string(type)))
        let input = Base64URL.encode(Array(JSONText.object(header).utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        let signature = try key.sign(Array(input.utf8))
        do throws(FormatError) {
            return try CompactJWS(
                bytes: Array((input + "." + Base64URL.encode(signature)).utf8)[...], type: type, keyed: keyID != nil,
                maximumLength: maximumLength)
        } catch {
            throw DCError(.invalid, "not a valid \(type) JWS: \(error.description)")
        }
    }

    /// Whether ``signature`` is `key`'s ES256 signature of ``signingInput``, in its low-S form
    /// (the high-S twin of a valid signature is false: one encoding per JWS).
    public func isSigned(by key: TokenPublicKey) -> Bool {
        key.isValidSignature(signature, for: signingInput)
    }

    /// Parses the compact JWS in `bytes` (see ``init(parsing:type:keyed:)``), at most
    /// `maximumLength` bytes long.
    package init(
        bytes: ArraySlice<UInt8>, type expectedType: String, keyed: Bool, maximumLength: Int = CompactJWS.maximumLength
    ) throws(FormatError) {
        guard bytes.count <= maximumLength else { throw FormatError("longer than \(maximumLength) bytes") }
        guard let firstDot = bytes.firstIndex(of: UInt8(ascii: ".")) else { throw FormatError("not three parts") }
        let rest = bytes[(firstDot + 1)...]
        guard let secondDot = rest.firstIndex(of: UInt8(ascii: ".")),
            !bytes[(secondDot + 1)...].contains(UInt8(ascii: "."))
        else { throw FormatError("not three parts") }
        let headerPart = bytes[..<firstDot]
        let payloadPart = bytes[(firstDot + 1)..<secondDot]
        let signaturePart = bytes[(secondDot + 1)...]

        guard headerPart.count <= (CompactJWS.maximumHeaderLength * 4 + 2) / 3 else {
            throw FormatError("the header is too long")
        }
        guard let header = Base64URL.decode(headerPart) else { throw FormatError("the header is not base64url") }
        let fields = try JSONFields(
            StrictJSON.parse(header), required: keyed ? ["alg", "kid", "typ"] : ["alg", "typ"], what: "the header")
        let algorithm = try fields.string("alg")
        guard algorithm == "ES256" else {
            throw FormatError(algorithm == "none" ? "an unsigned (alg none) JWS" : "an algorithm other than ES256")
        }
        let type = try fields.string("typ")
        guard type == expectedType else { throw FormatError("the type is not \(expectedType)") }
        let keyID = keyed ? try fields.string("kid") : nil
        if let keyID {
            guard !keyID.isEmpty, keyID.utf8.count <= 128 else { throw FormatError("the key id is empty or too long") }
        }
        guard let payload = Base64URL.decode(payloadPart) else { throw FormatError("the payload is not base64url") }
        guard signaturePart.count == 86, let signature = Base64URL.decode(signaturePart), signature.count == 64 else {
            throw FormatError("the signature is not 64 bytes of base64url")
        }
        self.text = String(decoding: bytes, as: UTF8.self)
        self.type = type
        self.keyID = keyID
        self.payload = payload
        self.signature = signature
        self.signingInput = Array(bytes[..<secondDot])
    }
}
