import CredentialCoding
import DerivedCredentials
import FoundationEssentials

/// How the pairs of a payload or a key history are read back.
public enum PairReading: Sendable {
    /// Every certificate and key through the strict reader, the key matched to its certificate and
    /// re-encoded in OpenSSL's canonical PKCS#8 form: for what a provider sent, and for every
    /// command that reads the store.
    case strict
    /// The certificate and key bytes as they were sealed, unparsed: only for the client's own
    /// store, whose pairs passed ``strict`` before they were sealed (the seal says they are what
    /// the client wrote). A reader that uses a key checks it against its certificate itself, as
    /// the PKCS#11 module does when it first uses one.
    case asSealed
}

/// How a certificate and its private key are written in the JSON this module stores and sends:
/// `"certificate":B64,"privateKey":B64` (standard base64 of the DER certificate and the PKCS#8
/// key), and read back through the strict reader (the key must match the certificate). One home
/// for the delivery payload's pairs and the client's key history.
enum PairCoding {
    /// Appends `"certificate":…,"privateKey":…` for `pair` to `out`, the key's base64 copied from
    /// a buffer that is wiped.
    static func append(_ pair: CertifiedKey, to out: inout [UInt8]) {
        out += Array(
            "\"certificate\":\"\(Data(pair.certificate.derBytes).base64EncodedString())\",\"privateKey\":\"".utf8)
        pair.privateKey.withPKCS8DER { SecretBytes($0) }.base64Encoded().withUnsafeBytes { out += $0 }
        out += Array("\"".utf8)
    }

    /// The pair from its two base64 fields, read as `reading` says; `place` names it in errors,
    /// `hint` or `remedy` says what to do.
    static func decode(
        certificate: String, privateKey: String, place: String, hint: String? = nil, remedy: DCError.Remedy? = nil,
        reading: PairReading = .strict
    ) throws -> CertifiedKey {
        guard let certificateDER = Data(base64Encoded: certificate),
            var keyDER = Data(base64Encoded: privateKey).map(Array.init)
        else {
            throw DCError(.invalid, "\(place): not base64", hint: hint, remedy: remedy)
        }
        if reading == .asSealed {
            return CertifiedKey(
                certificate: Certificate(derBytes: Array(certificateDER)),
                privateKey: PrivateKey(pkcs8DER: SecretBytes(consuming: &keyDER)))
        }
        defer { keyDER.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        let reader = CredentialReader()
        return try KeyMaterial.paired(
            certificates: [try reader.certificate(der: Array(certificateDER), source: place)],
            privateKey: try reader.privateKey(pkcs8: keyDER, source: place), source: place
        ).certifiedKey()
    }
}

/// The client's key history as it is stored (sealed, by the client): the retired encryption
/// pairs, newest first, as `{"v":1,"keys":[{"certificate":B64,"privateKey":B64}…]}`.
public enum KeyHistoryCoding {
    /// The format version, written as `"v":1`.
    public static let version = 1

    /// The canonical encoding of `pairs`, built into one buffer that is wiped.
    public static func encode(_ pairs: [CertifiedKey]) -> SecretBytes {
        var out = Array("{\"v\":\(version),\"keys\":[".utf8)
        for (index, pair) in pairs.enumerated() {
            out += Array((index > 0 ? ",{" : "{").utf8)
            PairCoding.append(pair, to: &out)
            out += Array("}".utf8)
        }
        out += Array("]}".utf8)
        return SecretBytes(consuming: &out)
    }

    /// The pairs in `bytes`, each read as `reading` says (through the strict reader unless told
    /// otherwise). Throws when the document, a certificate or a key is not valid, or when it
    /// holds more than `CredentialEntry.maximumKeyHistory` pairs.
    public static func decode(_ bytes: SecretBytes, reading: PairReading = .strict) throws -> [CertifiedKey] {
        struct Pair: Decodable {
            var certificate: String
            var privateKey: String
        }
        struct Wire: Decodable {
            var v: Int
            var keys: [Pair]
        }
        let remedy = DCError.Remedy.setUpDamagedStore
        let wire: Wire
        do {
            wire = try bytes.withUnsafeBytes { try JSONDecoder().decode(Wire.self, from: Data($0)) }
        } catch {
            throw DCError(.invalid, "the key history is not valid", remedy: remedy)
        }
        guard wire.v == version, wire.keys.count <= CredentialEntry.maximumKeyHistory else {
            throw DCError(.invalid, "the key history is not valid", remedy: remedy)
        }
        return try wire.keys.enumerated().map {
            try PairCoding.decode(
                certificate: $0.element.certificate, privateKey: $0.element.privateKey,
                place: "key history \($0.offset)", remedy: remedy, reading: reading)
        }
    }
}
