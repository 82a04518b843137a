import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("The revocation list and the JWKS of issuing keys", .ownThreads, .timeLimit(.minutes(2)))
struct TrustFileTests {
    let list = RevocationList(
        issued: 1_767_225_600, revokedIssuerKeys: ["k2", "k1"], revokedDelegations: ["b", "a"],
        retiredContainers: [.init(appID: "z", containerID: "1"), .init(appID: "a", containerID: "2")])

    @Test("The revocation list is written canonically, read back equal, and Codable gives the same shape")
    func revocationRoundTrip() throws {
        let text = String(decoding: list.json(), as: UTF8.self)
        #expect(
            text
                == #"{"v":1,"issued":1767225600,"revokedIssuerKeys":["k1","k2"],"revokedDelegations":["a","b"],"retiredContainers":[{"app":"a","ctr":"2"},{"app":"z","ctr":"1"}]}"#
                + "\n")
        #expect(try RevocationList(json: list.json()) == list)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let coded = try encoder.encode(list)
        #expect(try JSONDecoder().decode(RevocationList.self, from: coded) == list)
        #expect(try RevocationList(json: Array(coded)) == list)
        let dir = try TemporaryDirectory("revocations")
        defer { dir.remove() }
        try list.write(to: dir.file("revocations.json"))
        #expect(try RevocationList.load(from: dir.file("revocations.json")) == list)
        #expect(list.isRetired(appID: "z", containerID: "1"))
        #expect(!list.isRetired(appID: "z", containerID: "2"))
    }

    @Test(
        "A revocation list is read strictly",
        arguments: [
            #"{"v":2,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[]}"#,
            #"{"v":1,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[]}"#,
            #"{"v":1,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[],"x":1}"#,
            #"{"v":1,"v":1,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[]}"#,
            #"{"v":1,"issued":0,"revokedIssuerKeys":[1],"revokedDelegations":[],"retiredContainers":[]}"#,
            #"{"v":1,"issued":0,"revokedIssuerKeys":[""],"revokedDelegations":[],"retiredContainers":[]}"#,
            #"{"v":1,"issued":0,"revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[{"app":"a"}]}"#,
            #"{"v":1,"issued":"0","revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[]}"#,
            "", "null", "[]",
        ])
    func revocationStrict(_ text: String) {
        let error = #expect(throws: DCError.self) { try RevocationList(json: Array(text.utf8)) }
        #expect(error?.code == .invalid)
    }

    @Test("The JWKS is written with kid = thumbprint and read back, with or without kid, use and alg")
    func jwksRoundTrip() throws {
        let keys = [try Keys.issuing.publicKey, try Keys.other.publicKey]
        let issuers = TrustedIssuers(keys)
        #expect(try TrustedIssuers(jwks: issuers.jwks()) == issuers)
        for key in keys { #expect(issuers.key(for: key.thumbprint) == key) }
        #expect(issuers.key(for: "nope") == nil)
        // Without kid, use and alg (as other tools write a JWK) it is read the same.
        let minimal = keys.map { #"{"kty":"EC","crv":"P-256","x":"\#($0.jwkX)","y":"\#($0.jwkY)"}"# }
        #expect(try TrustedIssuers(jwks: Array(#"{"keys":[\#(minimal.joined(separator: ","))]}"#.utf8)) == issuers)
    }

    @Test(
        "A JWKS is read strictly: kid must be the thumbprint; RSA, off-curve, duplicate or unknown members are refused")
    func jwksStrict() throws {
        let key = try Keys.issuing.publicKey
        let x = key.jwkX
        let y = key.jwkY
        var offCurve = key.y
        offCurve[31] ^= 1
        for text in [
            #"{"keys":[{"kty":"EC","crv":"P-256","kid":"other","x":"\#(x)","y":"\#(y)"}]}"#,
            #"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-384","x":"\#(x)","y":"\#(y)"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(Base64URL.encode(offCurve))"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)=","y":"\#(y)"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)","d":"secret"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)","use":"enc"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)","alg":"ES384"}]}"#,
            #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)"},{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)"}]}"#,
            #"{"keys":[],"keys":[]}"#, #"{"keys":{}}"#, #"{}"#,
        ] {
            let error = #expect(throws: DCError.self, "\(text)") { try TrustedIssuers(jwks: Array(text.utf8)) }
            #expect(error?.code == .invalid)
        }
    }

    @Test("A file over the size cap is refused before it is parsed")
    func sizeCap() throws {
        let dir = try TemporaryDirectory("trust-size")
        defer { dir.remove() }
        let path = try dir.write("big.json", [UInt8](repeating: 0x20, count: TrustedIssuers.maximumFileSize + 1))
        let error = try #require(throws: DCError.self) { try TrustedIssuers.load(from: path) }
        #expect(error.code == .inputTooLarge)
    }
}

@Suite("PyJWT as an independent peer", .ownThreads, .timeLimit(.minutes(3)))
struct PyJWTTests {
    @Test("PyJWT verifies our delegation under the JWKS and our token under the delegation's cnf.jwk")
    func pyjwtVerifiesOurs() throws {
        // Real time: PyJWT checks nbf, iat and exp against its own clock.
        let world = try TokenWorld(now: Date())
        let jwks = try JSONSerialization.jsonObject(with: Data(world.issuers.jwks()))
        let answer = try oracle("verify", ["token": world.token.compact, "jwks": jwks])
        let delegation = try #require(answer["delegation"] as? [String: Any])
        let token = try #require(answer["token"] as? [String: Any])
        #expect(delegation["sub"] as? String == "alice@example.com")
        #expect(delegation["jti"] as? String == world.delegation.claims.id)
        #expect(delegation["ctr"] as? String == "c0ffee00c0ffee00")
        #expect((delegation["exp"] as? NSNumber)?.int64Value == world.delegation.claims.expires)
        #expect(token["ch"] as? String == "one-use challenge 42")
        #expect(token["dlg"] as? String == world.delegation.claims.id)
        #expect((token["iat"] as? NSNumber)?.int64Value == world.token.claims.issuedAt)
        let header = try #require(answer["delegationHeader"] as? [String: Any])
        #expect(header["kid"] as? String == world.issuingKey.publicKey.thumbprint)
        #expect(header["typ"] as? String == "dc-dlg+jwt")
        #expect((answer["tokenHeader"] as? [String: Any])?["typ"] as? String == "dc-auth+jwt")
        // Python's RFC 7638 thumbprints equal our kids.
        let thumbprints = try #require(answer["thumbprints"] as? [String: String])
        #expect(thumbprints == [world.issuingKey.publicKey.thumbprint: world.issuingKey.publicKey.thumbprint])
        #expect(answer["cnfThumbprint"] as? String == world.tokenKey.publicKey.thumbprint)
    }

    @Test("PyJWT refuses a token we altered (the oracle can say no)")
    func pyjwtRefusesAltered() throws {
        let world = try TokenWorld(now: Date())
        let jwks = try JSONSerialization.jsonObject(with: Data(world.issuers.jwks()))
        let parts = world.delegation.compact.split(separator: ".").map(String.init)
        var claims = try #require(
            JSONSerialization.jsonObject(with: Data(world.delegation.jws.payload)) as? [String: Any])
        claims["sub"] = "mallory@example.com"
        let altered = Base64URL.encode(Array(try JSONSerialization.data(withJSONObject: claims)))
        let tampered = parts[0] + "." + altered + "." + parts[2] + "~" + world.token.jws.text
        #expect(throws: ProcessFailure.self) { try oracle("verify", ["token": tampered, "jwks": jwks]) }
    }

    @Test("A token PyJWT makes with the right claims verifies in ours; an HS256 one does not")
    func oursVerifiesPyjwt() throws {
        let now = Int64(Date().timeIntervalSince1970)
        let jti = "00112233445566778899aabbccddeeff"
        let delegation: [String: Any] = [
            "v": 1, "iss": "org.example.python", "jti": jti, "sub": "bob@example.com", "app": "com.example.py",
            "ctr": "py-container", "nbf": now - 5, "exp": now + 3600,
        ]
        let token: [String: Any] = ["v": 1, "dlg": jti, "ch": "from python", "srv": "", "iat": now, "exp": now + 300]
        let made = try oracle("make", ["delegation": delegation, "token": token])
        let text = try #require(made["token"] as? String)
        let jwks = try JSONSerialization.data(withJSONObject: try #require(made["jwks"]))
        let verifier = AuthTokenVerifier(issuers: try TrustedIssuers(jwks: Array(jwks)), revocations: .empty)
        let identity = try verifier.verify(text, now: Date()).outcome.get()
        #expect(identity.userID == "bob@example.com")
        #expect(identity.appID == "com.example.py")
        #expect(identity.containerID == "py-container")
        #expect(identity.challenge == "from python")
        #expect(identity.creationTime == now)
        let parsed = try AuthToken(parsing: text)
        #expect(parsed.delegation.claims.issuer == "org.example.python")

        let hs256 = try oracle("make", ["delegation": delegation, "token": token, "alg": "HS256"])
        let hsJWKS = try JSONSerialization.data(withJSONObject: try #require(hs256["jwks"]))
        let hsVerifier = AuthTokenVerifier(issuers: try TrustedIssuers(jwks: Array(hsJWKS)), revocations: .empty)
        let refused = hsVerifier.verify(try #require(hs256["token"] as? String), now: Date())
        #expect(refused.responseCode == "101 Invalid Token")
    }
}

@Suite("The shared user id", .ownThreads, .timeLimit(.minutes(2)))
struct SharedUserIDTests {
    let machine = "0123456789abcdef0123456789abcdef"

    @Test("It is Python's base64url HMAC-SHA-256 of machine id ‖ user id under the secret")
    func pythonOracle() throws {
        let secret = try Digests.random(32)
        let value = SharedUserID.compute(secret: secret, machineID: machine, userID: "alice@example.com")
        let answer = try oracle(
            "hmac",
            [
                "secret": secret.withUnsafeBytes { Digests.hex(Array($0)) }, "machineID": machine,
                "userID": "alice@example.com",
            ])
        #expect(value == answer["sharedUserID"] as? String)
        #expect(value.utf8.count == 43)
        #expect(!value.contains("alice"))
    }

    @Test("Stable for the same inputs, different for another user, device or secret; empty when it cannot be computed")
    func properties() throws {
        let secret = try Digests.random(32)
        let base = SharedUserID.compute(secret: secret, machineID: machine, userID: "alice")
        #expect(base == SharedUserID.compute(secret: secret, machineID: machine, userID: "alice"))
        #expect(base != SharedUserID.compute(secret: secret, machineID: machine, userID: "bob"))
        #expect(base != SharedUserID.compute(secret: secret, machineID: "f" + machine.dropFirst(), userID: "alice"))
        #expect(base != SharedUserID.compute(secret: try Digests.random(32), machineID: machine, userID: "alice"))
        #expect(SharedUserID.compute(secret: secret, machineID: machine, userID: "") == "")
        #expect(SharedUserID.compute(secret: secret, machineID: "", userID: "alice") == "")
        #expect(SharedUserID.compute(secret: secret, machineID: machine.uppercased(), userID: "alice") == "")
        #expect(SharedUserID.compute(secret: SecretBytes([1, 2, 3]), machineID: machine, userID: "alice") == "")
    }

    @Test("The secret file is made once (0600, 32 bytes) and read back; a wrong size is refused")
    func secretFile() throws {
        let dir = try TemporaryDirectory("shared-user-id")
        defer { dir.remove() }
        let path = dir.file("shared-user-id.key")
        let first = try SharedUserID.secret(at: path)
        #expect(try SharedUserID.secret(at: path) == first)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try dir.read("shared-user-id.key").count == 32)
        let error = try #require(throws: DCError.self) {
            try SharedUserID.secret(at: try dir.write("short.key", [1, 2, 3]))
        }
        #expect(error.code == .invalid)
        _ = try dir.write("machine-id", machine + "\n")
        #expect(SharedUserID.machineID(at: dir.file("machine-id")) == machine)
        _ = try dir.write("bad-id", "not a machine id\n")
        #expect(SharedUserID.machineID(at: dir.file("bad-id")) == nil)
        #expect(SharedUserID.machineID(at: dir.file("none")) == nil)
    }
}
