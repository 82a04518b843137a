import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("ES256 token keys (OpenSSL as the oracle)", .ownThreads, .timeLimit(.minutes(3)))
struct ES256Tests {
    let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0".utf8)

    @Test("A key survives PKCS#8 and signs 64-byte r‖s signatures that verify only for its message")
    func roundTrip() throws {
        let key = try TokenSigningKey.generate()
        let again = try key.privateKey.withPKCS8DER { try TokenSigningKey(pkcs8DER: SecretBytes($0)) }
        #expect(again.publicKey == key.publicKey)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(again.publicKey.isValidSignature(signature, for: message))
        #expect(TokenSigningKey.verify(signature, of: message, publicKey: key.publicKey.uncompressedPoint))
        #expect(TokenSigningKey.verify(signature, of: message, jwkX: key.publicKey.jwkX, jwkY: key.publicKey.jwkY))
        #expect(!key.publicKey.isValidSignature(signature, for: message + [0x2E]))
        var flipped = signature
        flipped[10] ^= 1
        #expect(!key.publicKey.isValidSignature(flipped, for: message))
        #expect(!(try TokenSigningKey.generate()).publicKey.isValidSignature(signature, for: message))
        #expect(try TokenPublicKey(uncompressedPoint: key.publicKey.uncompressedPoint) == key.publicKey)
        #expect(try TokenPublicKey(jwkX: key.publicKey.jwkX, jwkY: key.publicKey.jwkY) == key.publicKey)
    }

    @Test("Malformed signatures and keys are simply false, never a throw or a crash")
    func malformedIsFalse() throws {
        let key = try TokenSigningKey.generate()
        let signature = try key.sign(message)
        let point = key.publicKey.uncompressedPoint
        for bad in [[], Array(signature.prefix(63)), signature + [0], [UInt8](repeating: 0, count: 64)] {
            #expect(!key.publicKey.isValidSignature(bad, for: message))
        }
        // r = n (the group order) is out of range.
        let order = try #require(Digests.bytes(hex: "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551"))
        #expect(!key.publicKey.isValidSignature(order + Array(signature[32...]), for: message))
        var offCurve = point
        offCurve[64] ^= 1
        let compressed = [2 + (point[64] & 1)] + Array(point[1..<33])
        for bad in [offCurve, compressed, Array(point.prefix(64)), [], [4] + [UInt8](repeating: 0, count: 64)] {
            #expect(!TokenSigningKey.verify(signature, of: message, publicKey: bad))
            #expect(throws: DCError.self) { try TokenPublicKey(uncompressedPoint: bad) }
        }
        #expect(
            !TokenSigningKey.verify(signature, of: message, jwkX: key.publicKey.jwkX + "A", jwkY: key.publicKey.jwkY))
        #expect(!TokenSigningKey.verify(signature, of: message, jwkX: "", jwkY: ""))
        #expect(throws: DCError.self) { try TokenPublicKey(x: [1], y: [1]) }
    }

    @Test("openssl dgst verifies our signatures, and we verify openssl's, on an openssl-made key")
    func opensslOracle() throws {
        let dir = try TemporaryDirectory("es256")
        defer { dir.remove() }
        try runChecked(
            "openssl",
            ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", dir.file("key.pem")])
        try runChecked(
            "openssl",
            ["pkcs8", "-topk8", "-nocrypt", "-in", dir.file("key.pem"), "-outform", "DER", "-out", dir.file("key.der")])
        try runChecked("openssl", ["pkey", "-in", dir.file("key.pem"), "-pubout", "-out", dir.file("pub.pem")])
        try runChecked(
            "openssl", ["pkey", "-in", dir.file("key.pem"), "-pubout", "-outform", "DER", "-out", dir.file("pub.der")])
        let key = try TokenSigningKey(pkcs8DER: SecretBytes(try dir.read("key.der")))
        // The SubjectPublicKeyInfo ends with the uncompressed point.
        #expect(Array(try dir.read("pub.der").suffix(65)) == key.publicKey.uncompressedPoint)
        let messageFile = try dir.write("message", message)

        // Ours → openssl: r and s become a DER ECDSA-Sig-Value through openssl asn1parse -genconf.
        let signature = try key.sign(message)
        let config = """
            asn1=SEQUENCE:signature
            [signature]
            r=INTEGER:0x\(Digests.hex(Array(signature[..<32])))
            s=INTEGER:0x\(Digests.hex(Array(signature[32...])))

            """
        try runChecked(
            "openssl",
            ["asn1parse", "-genconf", try dir.write("sig.cnf", config), "-out", dir.file("sig.der"), "-noout"])
        let verified = try runChecked(
            "openssl",
            ["dgst", "-sha256", "-verify", dir.file("pub.pem"), "-signature", dir.file("sig.der"), messageFile])
        #expect(verified.stdoutText.contains("Verified OK"))
        // The same with the message changed fails in openssl too (the oracle can say no).
        let tampered = try dir.write("tampered", message + [0x41])
        let refused = try run(
            "openssl", ["dgst", "-sha256", "-verify", dir.file("pub.pem"), "-signature", dir.file("sig.der"), tampered])
        #expect(refused.status != 0)

        // openssl → ours: the DER signature's two INTEGERs, left-padded to 32 bytes, are r‖s.
        for round in 0..<5 {
            try runChecked(
                "openssl",
                ["dgst", "-sha256", "-sign", dir.file("key.pem"), "-out", dir.file("theirs\(round).der"), messageFile])
            let parsed = try runChecked(
                "openssl", ["asn1parse", "-inform", "DER", "-in", dir.file("theirs\(round).der")])
            let integers = parsed.stdoutText.split(separator: "\n").compactMap { line -> [UInt8]? in
                guard let range = line.range(of: "INTEGER           :") else { return nil }
                return Digests.bytes(hex: String(line[range.upperBound...]).trimmingCharacters(in: .whitespaces))
            }
            try #require(integers.count == 2)
            let raw = integers.flatMap { [UInt8](repeating: 0, count: 32 - $0.count) + $0 }
            // openssl makes either form; we accept exactly the low-S one of the pair (r, s), (r, n − s).
            let twin = Array(raw[..<32]) + (try Self.twinS(Array(raw[32...])))
            let (low, high) = Self.isLowS(raw) ? (raw, twin) : (twin, raw)
            #expect(Self.isLowS(low) && !Self.isLowS(high))
            #expect(key.publicKey.isValidSignature(low, for: message), "openssl signature \(round)")
            #expect(!key.publicKey.isValidSignature(high, for: message), "openssl signature \(round), high-S")
            #expect(!key.publicKey.isValidSignature(low, for: message + [0x41]))
        }
    }

    @Test("Every signature we make is low-S (s ≤ n/2), and the same (r, s) with s = n − s is refused")
    func lowSOnly() throws {
        let key = try TokenSigningKey.generate()
        // Half of all ECDSA signatures are high-S: 64 low-S ones in a row by chance is 1 in 2^64.
        for index in 0..<64 {
            let input = message + [UInt8(index)]
            let signature = try key.sign(input)
            #expect(Self.isLowS(signature), "signature \(index)")
            #expect(key.publicKey.isValidSignature(signature, for: input))
            guard index < 8 else { continue }  // the twins of a few (each costs a python3 process)
            let twin = Array(signature[..<32]) + (try Self.twinS(Array(signature[32...])))
            #expect(!Self.isLowS(twin))
            #expect(!key.publicKey.isValidSignature(twin, for: input), "the high-S twin of signature \(index)")
            #expect(ES256Signature.lowS(twin) == signature)
        }
    }

    /// ⌊n / 2⌋ for the P-256 order n, written out: the largest s of a low-S signature.
    static let halfOrderHex = "7fffffff800000007fffffffffffffffde737d56d38bcf4279dce5617e3192a8"

    /// Whether the raw r‖s has s ≤ ⌊n / 2⌋ (equal-length lower-case hex compares as the numbers do).
    static func isLowS(_ signature: [UInt8]) -> Bool {
        Digests.hex(Array(signature[32...])) <= halfOrderHex
    }

    /// n − s, computed by Python's integers on the P-256 order written out (not by the code under test).
    static func twinS(_ s: [UInt8]) throws -> [UInt8] {
        let result = try runChecked(
            "/usr/bin/python3",
            [
                "-c",
                "import sys; n = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551; "
                    + "print('%064x' % (n - int(sys.argv[1], 16)))",
                Digests.hex(s),
            ])
        return try #require(Digests.bytes(hex: result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test("Only P-256 keys are accepted", arguments: ["secp384r1", "ed25519", "rsa"])
    func otherKeysRefused(_ kind: String) throws {
        let dir = try TemporaryDirectory("es256-other")
        defer { dir.remove() }
        let generate: [String] =
            switch kind {
            case "ed25519": ["genpkey", "-algorithm", "ED25519"]
            case "rsa": ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
            default: ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(kind)"]
            }
        try runChecked("openssl", generate + ["-outform", "DER", "-out", dir.file("key.der")])
        let error = try #require(throws: DCError.self) {
            try TokenSigningKey(pkcs8DER: SecretBytes(try dir.read("key.der")))
        }
        #expect(error.code == .malformedInput)
        #expect(throws: DCError.self) { try TokenSigningKey(pkcs8DER: SecretBytes([0x30, 0x03, 0x02, 0x01, 0x00])) }
    }

    @Test("The private key is redacted in description, debugDescription and dump()")
    func redaction() throws {
        let key = try TokenSigningKey.generate()
        let der = key.privateKey.withPKCS8DER { Array($0) }
        let secretHex = Digests.hex(Array(der.suffix(40)))
        var dumped = ""
        dump(key, to: &dumped)
        for text in [String(describing: key), String(reflecting: key), dumped] {
            #expect(text.contains("redacted"))
            #expect(!text.contains(secretHex))
            #expect(!text.contains(Base64URL.encode(der)))
        }
        #expect(dumped.contains(key.publicKey.thumbprint))
    }

    @Test("Many threads verify with one key at once and each gets the right answer")
    func concurrentVerification() async throws {
        let key = try TokenSigningKey.generate()
        let message = self.message
        let signature = try key.sign(message)
        let publicKey = key.publicKey
        let results = await withTaskGroup(of: Bool.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var right = true
                    for index in 0..<150 {
                        let valid = (index + task) % 3 != 0
                        let input = valid ? message : message + [UInt8(index & 0x7F)]
                        right = right && publicKey.isValidSignature(signature, for: input) == valid
                    }
                    return right
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == [Bool](repeating: true, count: 8))
    }
}

@Suite("Base64URL, strict", .ownThreads, .timeLimit(.minutes(1)))
struct Base64URLTests {
    @Test("RFC 4648 vectors, and every length round-trips against Foundation's base64")
    func vectors() throws {
        let vectors = [
            "": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy",
        ]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 151 &+ 7) }
            let foundation = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(bytes) == foundation)
            #expect(Base64URL.decode(foundation) == bytes)
        }
    }

    @Test("Padding, white space, the standard alphabet, a 4n+1 length and non-zero spare bits are refused")
    func strict() {
        for bad in [
            "Zg==", "Zm9v ", " Zm9v", "Zm+v", "Zm/v", "Z", "Zm9vY", "Zh", "Zm9", "Zm-", "Zm9vYmF", "Zg\n", "Zé",
        ] {
            #expect(Base64URL.decode(bad) == nil, "\(bad)")
        }
        // "Zh" and "Zm9" spell the same bytes as "Zg" and "Zm8" with spare bits set.
        #expect(Base64URL.decode("Zg") == Array("f".utf8))
        #expect(Base64URL.decode("Zh") == nil)
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
        #expect(Base64URL.decode("Zm9") == nil)
    }
}
