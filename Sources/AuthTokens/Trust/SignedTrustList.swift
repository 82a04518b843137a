import CredentialCoding
import DerivedCredentials

/// What a verifier that fetches its trust needs, in one document the provider signs: the issuing
/// keys in force and the revocation list, numbered, with the time it was issued and the time by
/// which the provider promises a newer one. The provider publishes it as `trust.jws`.
///
/// It is a compact JWS (``CompactJWS``, ES256) whose header is
/// `{"alg":"ES256","kid":"<thumbprint of the trust-signing key>","typ":"dc-trust+jws"}` and whose
/// payload is
///
/// ```json
/// {"v":1,"number":7,"issued":1760000000,"nextUpdate":1760086400,
///  "issuers":{"keys":[<JWK>]},
///  "revokedIssuerKeys":[],"revokedDelegations":["<jti>"],"retiredContainers":[{"app":"…","ctr":"…"}]}
/// ```
///
/// ``init(verifying:with:)`` is strict: the JWS's rules, a `kid` that names the expected key, the
/// signature under that key, then every member required and no other, `issued` not after
/// `nextUpdate`, a positive `number`. The issuers and the revocations travel in one signed number
/// so a verifier swaps both at once: never keys from one publication with revocations from another.
public struct SignedTrustList: Sendable, Equatable {
    /// The JWS header's `typ`.
    public static let type = "dc-trust+jws"
    /// The only payload version.
    public static let version = 1
    /// The longest document accepted, in bytes: a 16 MiB revocation list in base64url, and room.
    public static let maximumLength = 24 << 20

    /// The publication's number: each publication's is greater than the one before.
    public let number: Int64
    /// When the provider signed it, in seconds since 1970.
    public let issued: Int64
    /// When the provider will have published a newer one at the latest, in seconds since 1970.
    public let nextUpdate: Int64
    /// The issuing keys whose delegations are accepted.
    public let issuers: TrustedIssuers
    /// What is refused although signed and unexpired (its `issued` is this list's).
    public let revocations: RevocationList
    /// The compact JWS, as published.
    public let compact: String

    /// Signs a list numbered `number` with `key` (the provider's trust-signing key).
    public static func sign(
        number: Int64, issued: Int64, nextUpdate: Int64, issuers: TrustedIssuers, revocations: RevocationList,
        key: TokenSigningKey
    ) throws -> SignedTrustList {
        guard number > 0, issued <= nextUpdate else {
            throw DCError(.invalid, "a trust list needs a positive number and a next update not before its issue time")
        }
        var list = revocations
        list.issued = issued
        let payload = JSONText.object(
            [
                ("v", String(version)), ("number", String(number)), ("issued", String(issued)),
                ("nextUpdate", String(nextUpdate)), ("issuers", issuers.jwksText()),
            ] + list.contentMembers())
        let jws = try CompactJWS.sign(
            payload: payload, type: type, keyID: key.publicKey.thumbprint, key: key, maximumLength: maximumLength)
        return try SignedTrustList(verifying: Array(jws.text.utf8), with: key.publicKey)
    }

    /// Reads and checks `bytes` (a compact JWS, a final newline allowed) against `key`, the only key
    /// that may sign it. Throws `DCError.Code.invalid` naming the first rule broken; nothing of an
    /// unverified payload is read.
    public init(verifying bytes: [UInt8], with key: TokenPublicKey) throws {
        var text = bytes[...]
        if text.last == UInt8(ascii: "\n") { text = text.dropLast() }
        do throws(FormatError) {
            let jws = try CompactJWS(bytes: text, type: Self.type, keyed: true, maximumLength: Self.maximumLength)
            guard jws.keyID == key.thumbprint else { throw FormatError("signed by another key than the trusted one") }
            guard jws.isSigned(by: key) else { throw FormatError("the signature does not verify") }
            let fields = try JSONFields(
                StrictJSON.parse(jws.payload),
                required: RevocationList.members.union(["number", "nextUpdate", "issuers"]), what: "the payload")
            guard try fields.integer("v") == Int64(Self.version) else { throw FormatError("an unknown version") }
            let number = try fields.integer("number")
            guard number > 0 else { throw FormatError("the number is not positive") }
            let revocations = try RevocationList(fields: fields)
            let nextUpdate = try fields.integer("nextUpdate")
            guard revocations.issued <= nextUpdate else {
                throw FormatError("the next update is before the issue time")
            }
            self.number = number
            self.issued = revocations.issued
            self.nextUpdate = nextUpdate
            self.issuers = try TrustedIssuers(parsed: fields.member("issuers"))
            self.revocations = revocations
            self.compact = jws.text
        } catch {
            throw DCError(.invalid, "not a trust list to accept: \(error.description)")
        }
    }

    /// The document as published: the compact JWS and a newline.
    public var bytes: [UInt8] { Array((compact + "\n").utf8) }
}
