// A one-off comparison (item 5 of the renovation issue): ES256 JWS signing and verifying, ours
// (AuthTokens' CompactJWS over OpenSSL) against jwt-kit's (swift-crypto's BoringSSL), and what
// each accepts. Built in release like the benchmarks; removed with jwt-kit.
import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import IdentityTokens
import JWTKit

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

let key = try TokenSigningKey.generate()
let kid = key.publicKey.thumbprint
let pem = key.privateKey.withPKCS8DER {
    "-----BEGIN PRIVATE KEY-----\n" + Data($0).base64EncodedString(options: .lineLength64Characters)
        + "\n-----END PRIVATE KEY-----\n"
}
let encoder = JSONEncoder()
encoder.dateEncodingStrategy = .integerSecondsSince1970
encoder.outputFormatting = .sortedKeys
let decoder = JSONDecoder()
decoder.dateDecodingStrategy = .integerSecondsSince1970
let keys = JWTKeyCollection()
await keys.add(
    ecdsa: try ES256PrivateKey(pem: pem), kid: JWKIdentifier(string: kid),
    parser: DefaultJWTParser(jsonDecoder: decoder), serializer: DefaultJWTSerializer(jsonEncoder: encoder))
let issued = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
let claims = IdentityClaims(
    issuer: "org.example.provider", subject: "alice@example.com", audience: "mail-web", scope: "openid",
    issuedAt: issued, expires: issued + 3600)
func payloadText(aud: String = "mail-web") -> String {
    let i = Int(issued.timeIntervalSince1970)
    return #"{"aud":"\#(aud)","exp":\#(i + 3600),"iat":\#(i),"iss":"org.example.provider","scope":"openid","sub":"alice@example.com"}"#
}

// Ours, as the new identity path does: header and payload text, CompactJWS.
func oursSign() throws -> String {
    try CompactJWS.sign(payload: payloadText(), type: "JWT", keyID: kid, key: key).text
}
func oursVerify(_ token: String) -> Bool {
    guard let jws = try? CompactJWS(parsing: token, type: "JWT", keyed: true), jws.keyID == kid else { return false }
    guard jws.isSigned(by: key.publicKey) else { return false }
    // The claims, as strictly as the header (jwt-kit decodes its claims too).
    guard let fields = try? JSONFields(
        StrictJSON.parse(jws.payload), required: ["aud", "exp", "iat", "iss", "scope", "sub"], what: "the claims"),
        (try? fields.string("aud")) != nil, let exp = try? fields.integer("exp"), (try? fields.integer("iat")) != nil,
        (try? fields.string("iss")) != nil, (try? fields.string("scope")) != nil, (try? fields.string("sub")) != nil
    else { return false }
    return Double(exp) > Date().timeIntervalSince1970
}
func kitSign() async throws -> String { try await keys.sign(claims, kid: JWKIdentifier(string: kid)) }
func kitVerify(_ token: String) async -> Bool { (try? await keys.verify(token, as: IdentityClaims.self)) != nil }

// Sanity: each verifies the other's (jwt-kit's made low-S first: ours refuses high-S).
let ourToken = try oursSign()
let kitToken = try await kitSign()
let kitTokenLow: String = {
    let p = kitToken.split(separator: ".").map(String.init)
    return p[0] + "." + p[1] + "." + Base64URL.encode(ES256Signature.lowS(Base64URL.decode(p[2])!))
}()
precondition(oursVerify(ourToken) && oursVerify(kitTokenLow))
let kitOK1 = await kitVerify(ourToken)
let kitOK2 = await kitVerify(kitToken)
precondition(kitOK1 && kitOK2)
print("header ours:    \(String(decoding: Base64URL.decode(ourToken.split(separator: ".").map(String.init)[0])!, as: UTF8.self))")
print("header jwt-kit: \(String(decoding: Base64URL.decode(kitToken.split(separator: ".").map(String.init)[0])!, as: UTF8.self))")
print("payload ours:    \(String(decoding: Base64URL.decode(ourToken.split(separator: ".").map(String.init)[1])!, as: UTF8.self))")
print("payload jwt-kit: \(String(decoding: Base64URL.decode(kitToken.split(separator: ".").map(String.init)[1])!, as: UTF8.self))")

let rounds = Int(CommandLine.arguments.dropFirst().first ?? "7") ?? 7
let count = Int(CommandLine.arguments.dropFirst(2).first ?? "2000") ?? 2000
nonisolated(unsafe) var rates: [String: [Double]] = [:]
@MainActor func time(_ name: String, _ body: () async throws -> Void) async rethrows {
    let start = now()
    for _ in 0..<count { try await body() }
    rates[name, default: []].append(Double(count) / (now() - start))
}
for _ in 0..<rounds {
    try await time("sign, ours (CompactJWS)") { _ = try oursSign() }
    try await time("sign, jwt-kit (keys.sign)") { _ = try await kitSign() }
    try await time("sign, IdentityToken.sign at 4cabf40 (jwt-kit, PEM import per call)") {
        _ = try await IdentityToken.sign(
            issuer: "org.example.provider", userID: "alice@example.com", audience: "mail-web", scope: "openid",
            key: key, now: issued)
    }
    await time("verify, ours (parse + isSigned)") { precondition(oursVerify(ourToken)) }
    await time("verify, jwt-kit (keys.verify)") {
        let ok = await kitVerify(kitToken)
        precondition(ok)
    }
}
for (name, values) in rates.sorted(by: { $0.key < $1.key }) {
    print(String(format: "rate %-70@ median %8.0f /s  (rounds: %@)", name as NSString, median(values),
        values.map { String(format: "%.0f", $0) }.joined(separator: " ") as NSString))
}

// Strictness: tokens another party could hand a verifier; each is signed with the right key
// where a signature is possible, so only the rule under test can refuse it.
func b64(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }
func signed(_ header: String, _ payload: String) throws -> String {
    let input = b64(header) + "." + b64(payload)
    return input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
}
let h = #"{"alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#
let genuine = try signed(h, payloadText())
let parts = genuine.split(separator: ".").map(String.init)
let sig = Base64URL.decode(parts[2])!
var high = sig
do {  // n - s
    let order = ES256Signature.lowS(sig)  // already low: compute the twin by hand
    _ = order
    let n: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51]
    var borrow = 0
    for i in (0..<32).reversed() {
        let d = Int(n[i]) - Int(sig[32 + i]) - borrow
        high[32 + i] = UInt8(truncatingIfNeeded: d)
        borrow = d < 0 ? 1 : 0
    }
}
let hmacConfusion: String = {
    // HS256 with the public key's bytes as the secret: the classic algorithm confusion.
    let input = b64(#"{"alg":"HS256","kid":"\#(kid)","typ":"JWT"}"#) + "." + b64(payloadText())
    let mac = Digests.hmacSHA256(key: SecretBytes(key.publicKey.uncompressedPoint), message: Array(input.utf8))
    return input + "." + Base64URL.encode(mac)
}()
let probes: [(String, String)] = [
    ("genuine", genuine),
    ("duplicate payload member (aud twice, first \"evil\")", try signed(h, payloadText(aud: #"evil","aud":"mail-web"#))),
    ("duplicate header member (alg twice)", try signed(#"{"alg":"none","alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#, payloadText())),
    ("alg none, no signature", b64(#"{"alg":"none","kid":"\#(kid)","typ":"JWT"}"#) + "." + b64(payloadText()) + "."),
    ("alg HS256 keyed with the public key", hmacConfusion),
    ("alg ES384 over an ES256 signature", try signed(#"{"alg":"ES384","kid":"\#(kid)","typ":"JWT"}"#, payloadText())),
    ("high-S twin (r, n - s) of the genuine one", parts[0] + "." + parts[1] + "." + Base64URL.encode(high)),
    ("extra header member crit [\"exp\"]", try signed(#"{"alg":"ES256","crit":["exp"],"kid":"\#(kid)","typ":"JWT"}"#, payloadText())),
    ("extra header member jku", try signed(#"{"alg":"ES256","jku":"https://evil.example/jwks","kid":"\#(kid)","typ":"JWT"}"#, payloadText())),
    ("extra header member x (unknown)", try signed(#"{"alg":"ES256","kid":"\#(kid)","typ":"JWT","x":1}"#, payloadText())),
    ("no kid", try signed(#"{"alg":"ES256","typ":"JWT"}"#, payloadText())),
    ("padded base64url signature", genuine + "=="),
]
for (name, token) in probes {
    let kit = await kitVerify(token)
    let kitAud = (try? await keys.verify(token, as: IdentityClaims.self))?.audience.value.joined(separator: ",") ?? "-"
    print("probe \(name): ours \(oursVerify(token) ? "ACCEPTS" : "refuses"), jwt-kit \(kit ? "ACCEPTS (aud \(kitAud))" : "refuses")")
}

// A test vector: an identity JWT as IdentityToken.sign wrote it through jwt-kit, with the public key.
let vector = try await IdentityToken.sign(
    issuer: "org.example.provider", userID: "alice@example.com", audience: "mail-web",
    scope: "openid https://mail.example/read", key: key, now: Date(timeIntervalSince1970: 1_795_000_000))
print("vector token: \(vector.compact)")
print("vector jwk: x \(key.publicKey.jwkX) y \(key.publicKey.jwkY)")
print("vector payload: \(String(decoding: Base64URL.decode(vector.compact.split(separator: ".").map(String.init)[1])!, as: UTF8.self))")
