import CredentialCoding
import DerivedCredentials

/// The issuing keys whose delegations the verifier accepts, by key id: a JWKS file
/// (`{"keys":[…]}`, RFC 7517 §5) that the provider writes.
///
/// Each key is an EC P-256 public key, `{"kty":"EC","crv":"P-256","kid":"…","x":"…","y":"…"}`,
/// optionally with `"use":"sig"` and `"alg":"ES256"`, which ``jwks()`` writes. Its `kid` must be
/// its RFC 7638 thumbprint (or absent, when the thumbprint is used), so a key id names one key for
/// good: a delegation verified once under a key id can never later be matched with another key.
/// Reading is strict: unknown, duplicate or malformed members, a point off the curve and two
/// keys with the same id are refused.
public struct TrustedIssuers: Sendable, Equatable {
    /// The largest file ``load(from:)`` reads: 1 MiB.
    public static let maximumFileSize = 1 << 20

    /// The keys, by key id (thumbprint).
    public let keys: [String: TokenPublicKey]

    /// Trusts `keys` (duplicates count once).
    public init(_ keys: [TokenPublicKey]) {
        self.keys = Dictionary(keys.map { ($0.thumbprint, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Trusts no key: every token is refused.
    public static let empty = TrustedIssuers([])

    /// The key whose id is `keyID`, if it is trusted.
    public func key(for keyID: String) -> TokenPublicKey? { keys[keyID] }

    /// Reads a JWKS strictly. Throws `DCError.Code.invalid` naming the first rule broken.
    public init(jwks: [UInt8]) throws {
        do throws(FormatError) {
            try self.init(parsed: StrictJSON.parse(jwks))
        } catch {
            throw DCError(.invalid, "not a valid JWKS of issuing keys: \(error.description)")
        }
    }

    /// Reads a parsed JWKS strictly: the one reading, for the JWKS file and the issuers a
    /// ``SignedTrustList`` carries alike.
    package init(parsed: JSONValue) throws(FormatError) {
        let set = try JSONFields(parsed, required: ["keys"], what: "the JWKS")
        var keys: [String: TokenPublicKey] = [:]
        for element in try set.array("keys") {
            let jwk = try JSONFields(
                element, required: ["kty", "crv", "x", "y"], optional: ["kid", "use", "alg"], what: "a key")
            guard try jwk.string("kty") == "EC", try jwk.string("crv") == "P-256" else {
                throw FormatError("a key is not an EC P-256 key")
            }
            if jwk.has("use") {
                guard try jwk.string("use") == "sig" else { throw FormatError("a key's use is not sig") }
            }
            if jwk.has("alg") {
                guard try jwk.string("alg") == "ES256" else { throw FormatError("a key's alg is not ES256") }
            }
            guard let key = try? TokenPublicKey(jwkX: jwk.string("x"), jwkY: jwk.string("y")) else {
                throw FormatError("a key is not a P-256 point in canonical base64url")
            }
            if jwk.has("kid") {
                guard try jwk.string("kid") == key.thumbprint else {
                    throw FormatError("a key's kid is not its RFC 7638 thumbprint")
                }
            }
            guard keys.updateValue(key, forKey: key.thumbprint) == nil else {
                throw FormatError("a key appears twice")
            }
        }
        self.keys = keys
    }

    /// Reads and checks the JWKS at `path` (at most ``maximumFileSize`` bytes).
    public static func load(from path: String) throws -> TrustedIssuers {
        do {
            return try TrustedIssuers(jwks: try TrustFile.contents(path, maximumSize: maximumFileSize))
        } catch var error as DCError {
            error.subject = error.subject ?? path
            throw error
        }
    }

    /// The JWK of `key`: `{"kty":"EC","crv":"P-256","kid":…,"use":"sig","alg":"ES256","x":…,"y":…}`.
    public static func jwk(_ key: TokenPublicKey) -> String {
        JSONText.object([
            ("kty", JSONText.string("EC")), ("crv", JSONText.string("P-256")), ("kid", JSONText.string(key.thumbprint)),
            ("use", JSONText.string("sig")), ("alg", JSONText.string("ES256")), ("x", JSONText.string(key.jwkX)),
            ("y", JSONText.string(key.jwkY)),
        ])
    }

    /// The keys as a JWKS, sorted by key id: what the provider writes and the service publishes.
    public func jwks() -> [UInt8] {
        Array((jwksText() + "\n").utf8)
    }

    /// The JWKS as one line of JSON, without the final newline (a signed list's `issuers` member).
    func jwksText() -> String {
        let members = keys.sorted { $0.key < $1.key }.map { TrustedIssuers.jwk($0.value) }
        return JSONText.object([("keys", JSONText.array(members))])
    }

    /// Replaces the file at `path` with ``jwks()`` atomically (mode 0644).
    public func write(to path: String) throws {
        try TrustFile.replace(path, with: jwks())
    }
}
