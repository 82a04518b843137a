import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import JWTKit

/// The claims of an identity JWT: who the user is (`sub`), for which relying party (`aud`, the
/// OAuth client id the app named), with which `scope`, from which provider (`iss`), from when
/// (`iat`) until when (`exp`).
public struct IdentityClaims: JWTPayload, Equatable {
    /// `iss`: the provider's URL scheme.
    public var issuer: IssuerClaim
    /// `sub`: the user id the provider names the client's user by.
    public var subject: SubjectClaim
    /// `aud`: the client id of the relying party the token is for (one audience).
    public var audience: AudienceClaim
    /// `scope`: what the relying party may do, as the app asked.
    public var scope: String
    /// `iat`: when the provider signed it.
    public var issuedAt: IssuedAtClaim
    /// `exp`: when it stops being valid.
    public var expires: ExpirationClaim

    /// The registered claim names (RFC 7519 §4.1) and `scope`.
    enum CodingKeys: String, CodingKey {
        case issuer = "iss"
        case subject = "sub"
        case audience = "aud"
        case scope
        case issuedAt = "iat"
        case expires = "exp"
    }

    /// Claims with these values.
    public init(issuer: String, subject: String, audience: String, scope: String, issuedAt: Date, expires: Date) {
        self.issuer = IssuerClaim(value: issuer)
        self.subject = SubjectClaim(value: subject)
        self.audience = AudienceClaim(value: [audience])
        self.scope = scope
        self.issuedAt = IssuedAtClaim(value: issuedAt)
        self.expires = ExpirationClaim(value: expires)
    }

    /// Checks the expiry (jwt-kit calls it when it verifies a token).
    public func verify(using _: some JWTAlgorithm) async throws {
        try expires.verifyNotExpired()
    }
}

/// An identity JWT (RFC 7519), ES256, signed by the provider with its identity key: what an app
/// hands a relying party that speaks OAuth / OpenID rather than auth tokens. The relying party
/// checks it against the JWKS a verification service publishes (`/.well-known/jwks.json`), with
/// any JOSE library. The compact form is a bearer credential: it is never logged or printed by
/// `description` or `dump()`.
public struct IdentityToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// How long an identity JWT is valid: an hour.
    public static let lifetime: TimeInterval = 3600
    /// The longest audience or scope, in bytes.
    public static let maximumValueLength = 200

    /// The compact serialization, `header.payload.signature`.
    public let compact: String
    /// Its claims, as signed.
    public let claims: IdentityClaims
    /// The signing key's id (`kid`): the RFC 7638 thumbprint of the provider's identity key.
    public let keyID: String

    /// Signs an identity JWT for `userID`, for the relying party `audience` with `scope`, valid
    /// from `now` for ``lifetime``, with the provider's identity `key` (through jwt-kit; the
    /// signature in its low-S form, see `ES256Signature` in CredentialCoding).
    /// Throws `DCError.Code.usage` for an audience or scope that is empty, longer than
    /// ``maximumValueLength`` or not printable ASCII.
    public static func sign(
        issuer: String, userID: String, audience: String, scope: String, key: TokenSigningKey, now: Date
    ) async throws -> IdentityToken {
        try check(audience, what: "the client id")
        try check(scope, what: "the scope")
        let issuedAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = IdentityClaims(
            issuer: issuer, subject: userID, audience: audience, scope: scope, issuedAt: issuedAt,
            expires: issuedAt + lifetime)
        let keyID = key.publicKey.thumbprint
        let keys = JWTKeyCollection()
        // jwt-kit takes the key as PEM; the text lives only as long as this call.
        let pem = try key.privateKey.withPKCS8DER {
            "-----BEGIN PRIVATE KEY-----\n" + Data($0).base64EncodedString(options: .lineLength64Characters)
                + "\n-----END PRIVATE KEY-----\n"
        }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .integerSecondsSince1970
        encoder.outputFormatting = .sortedKeys
        await keys.add(
            ecdsa: try ES256PrivateKey(pem: pem), kid: JWKIdentifier(string: keyID),
            serializer: DefaultJWTSerializer(jsonEncoder: encoder))
        let compact = try withLowS(await keys.sign(claims, kid: JWKIdentifier(string: keyID)))
        return IdentityToken(compact: compact, claims: claims, keyID: keyID)
    }

    /// `compact` with its signature in the low-S form, the one encoding every ES256 signature the
    /// project makes has (`ES256Signature` in CredentialCoding): jwt-kit signs through
    /// swift-crypto, which makes either form, and a relying party that remembers tokens by their
    /// text must not see two.
    static func withLowS(_ compact: String) throws -> String {
        let parts = compact.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let signature = Base64URL.decode(String(parts[2])), signature.count == 64 else {
            throw DCError(.cryptoFailure, "jwt-kit made an identity token that is not a compact ES256 JWS")
        }
        return "\(parts[0]).\(parts[1]).\(Base64URL.encode(ES256Signature.lowS(signature)))"
    }

    /// Reads an identity JWT without checking its signature (the client only caches what its
    /// provider signed; relying parties verify). Throws `DCError.Code.invalid` when it is not one.
    public init(parsing compact: String) throws {
        guard compact.utf8.count <= 8192 else { throw DCError(.invalid, "not an identity token: too long") }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .integerSecondsSince1970
        let parser = DefaultJWTParser(jsonDecoder: decoder)
        do {
            let (header, payload, _) = try parser.parse(Array(compact.utf8), as: IdentityClaims.self)
            claims = payload
            guard header.alg == "ES256", let kid = header.kid else {
                throw DCError(.invalid, "not an identity token: not ES256 or no key id")
            }
            keyID = kid
        } catch let error as DCError {
            throw error
        } catch {
            throw DCError(.invalid, "not an identity token: \(error)")
        }
        self.compact = compact
    }

    /// A token as signed: its compact form, claims and key id.
    init(compact: String, claims: IdentityClaims, keyID: String) {
        self.compact = compact
        self.claims = claims
        self.keyID = keyID
    }

    /// Refuses an audience or scope that is empty, too long or not printable ASCII.
    public static func check(_ value: String, what: String) throws {
        guard !value.isEmpty else { throw DCError(.usage, "\(what) is empty") }
        guard HeaderText.isValid(value, maximumLength: maximumValueLength) else {
            throw DCError(
                .usage,
                "\(what) must be printable ASCII (codes 32-126), at most \(maximumValueLength) bytes, with no space at either end"
            )
        }
    }

    /// Whether it is still valid `margin` seconds after `now`.
    public func isValid(at now: Date, margin: TimeInterval = 0) -> Bool {
        claims.expires.value > now + margin && claims.issuedAt.value <= now + 60
    }

    /// `IdentityToken(<redacted>)`: the token is a bearer credential.
    public var description: String { "IdentityToken(<redacted>)" }
    /// The same as ``description``.
    public var debugDescription: String { description }
    /// A mirror that shows the key id and expiry only, so that `dump()` does not print the token.
    public var customMirror: Mirror {
        Mirror(self, children: ["keyID": keyID, "expires": claims.expires.value], displayStyle: .struct)
    }
}
