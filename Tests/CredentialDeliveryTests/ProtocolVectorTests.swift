import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The test vectors printed in docs/PROTOCOL.md: if one of these fails, the document or the code is
/// wrong. The values are checked three ways: as printed in the document, as our code computes them,
/// and as Python's `hashlib`, `hmac` and `urllib.parse` compute them, live, in a child process.
@Suite("docs/PROTOCOL.md test vectors", .ownThreads, .timeLimit(.minutes(3)))
struct ProtocolVectorTests {
    static let request = "00112233445566778899aabbccddeeff"
    static let resultKey = SecretBytes((1...32).map { UInt8($0) })

    /// The repository's docs/PROTOCOL.md.
    static let protocolDocument = Repository.root + "/docs/PROTOCOL.md"

    /// The output column of the document's test-vector table, in order.
    static func documentedVectors() throws -> [String] {
        let text = try String(contentsOfFile: protocolDocument, encoding: .utf8)
        let section = try #require(text.range(of: "## Test vectors"))
        return text[section.upperBound...].split(separator: "\n").filter { $0.hasPrefix("| ") && $0.hasSuffix("` |") }
            .map { row in
                let cell = row.dropLast(3)
                return String(cell[cell.index(after: cell.lastIndex(of: "`")!)...])
            }
    }

    /// Runs `python3 -c script` in `sandbox` with `input` on stdin and returns its stdout lines.
    static func python(_ script: String, input: String = "", in sandbox: Sandbox) throws -> [String] {
        let result = try sandbox.run("python3", ["-I", "-c", script], stdin: Array(input.utf8))
        try #require(result.status == 0, "python3: \(result.stderrText)")
        return result.stdoutText.split(separator: "\n").map(String.init)
    }

    /// RFC 8032's first Ed25519 test key (section 7.1, TEST 1), as PKCS#8 DER (RFC 8410): a fixed
    /// key, so that the signature in the table can be reproduced by anyone.
    static let rfc8032Seed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
    static let rfc8032PKCS8 = "302e020100300506032b657004220420" + rfc8032Seed
    static let time: Int64 = 1_795_000_000

    static func signedNew() throws -> CredentialRequest {
        let key = try MessageSigningKey(pkcs8DER: SecretBytes(try #require(bytes(hex: rfc8032PKCS8))))
        #expect(Digests.hex(key.publicKey) == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        return try CredentialRequest(client: try ClientID("dcclient"), request: try RequestID(request), time: time)
            .signed(with: key, scheme: try URLScheme("org.example.provider"))
    }

    /// The policy message of the vectors: its base64url spelling has a `_`.
    static let policyMessage = "Lost device? Call ext. 4242 ~ help"

    /// The policy vector, signed with the RFC 8032 key standing for the provider's.
    static func signedPolicy() throws -> PolicyNotice {
        let key = try MessageSigningKey(pkcs8DER: SecretBytes(try #require(bytes(hex: rfc8032PKCS8))))
        return try PolicyNotice(
            client: try ClientID("dcclient"),
            policy: ClientPolicy(state: .unauthorized, message: policyMessage, autoLock: 900, sequence: 3), time: time
        ).signed(with: key, scheme: try URLScheme("org.example.dcclient"))
    }

    /// The acknowledgement vector, signed with the RFC 8032 key standing for the client's.
    static func signedAcknowledgement() throws -> Acknowledgement {
        let key = try MessageSigningKey(pkcs8DER: SecretBytes(try #require(bytes(hex: rfc8032PKCS8))))
        return try Acknowledgement(
            client: try ClientID("dcclient"), sequence: 3, subject: .authState, state: .applied, message: "",
            time: time + 60
        ).signed(with: key, scheme: try URLScheme("org.example.provider"))
    }

    /// What a signed message's signature covers, without the signing context.
    static func signedURL(_ message: some SignedURLMessage, scheme: URLScheme) -> String {
        String(
            decoding: message.signingInput(scheme: scheme).dropFirst(DeliveryMessage.signingContext.utf8.count),
            as: UTF8.self)
    }

    static func bytes(hex: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    @Test("URLs: the signed new, and a deliver")
    func urls() throws {
        let signed = try Self.signedNew()
        #expect(
            signed.url(scheme: try URLScheme("org.example.provider"))
                == "org.example.provider:/new?v=2&client=dcclient&request=00112233445566778899aabbccddeeff&time=1795000000&sig="
                + (signed.signature?.text ?? ""))
        #expect(
            DeliveryMessage.deliver(
                DeliveryNotice(
                    client: try ClientID("dcclient"), request: try RequestID(Self.request),
                    digest: try SHA256Hex(Digests.hex(Digests.sha256(Array("sealed".utf8)))),
                    sequence: 7, signature: try SignatureHex(String(repeating: "0", count: 128)))
            )
            .url(scheme: try URLScheme("org.example.dcclient"))
                == "org.example.dcclient:/deliver?v=2&client=dcclient&request=00112233445566778899aabbccddeeff&digest=c9d0036bed6744bcdf692fc980d8717d7e5f5a4f4e8266b4a84982602fb1cd09&seq=7&sig="
                + String(repeating: "0", count: 128)
        )
    }

    @Test("URLs: the signed policy and acknowledgement parse back to themselves, and verify under the key")
    func policyURLs() throws {
        let policy = try Self.signedPolicy()
        let policyURL = policy.url(scheme: try URLScheme("org.example.dcclient"))
        #expect(
            policyURL
                == "org.example.dcclient:/policy?v=2&client=dcclient&seq=3&state=unauthorized&autolock=900&message=TG9zdCBkZXZpY2U_IENhbGwgZXh0LiA0MjQyIH4gaGVscA&time=1795000000&sig="
                + (policy.signature?.text ?? ""))
        #expect(try DeliveryMessage.parse(policyURL, scheme: try URLScheme("org.example.dcclient")) == .policy(policy))
        let ack = try Self.signedAcknowledgement()
        let ackURL = ack.url(scheme: try URLScheme("org.example.provider"))
        #expect(
            ackURL
                == "org.example.provider:/ack?v=2&client=dcclient&seq=3&of=auth&policy=applied&message=&time=1795000060&sig="
                + (ack.signature?.text ?? ""))
        #expect(
            try DeliveryMessage.parse(ackURL, scheme: try URLScheme("org.example.provider")) == .acknowledgement(ack))
        let publicKey = try #require(
            Self.bytes(hex: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
        #expect(policy.isSigned(by: publicKey, scheme: try URLScheme("org.example.dcclient")))
        #expect(ack.isSigned(by: publicKey, scheme: try URLScheme("org.example.provider")))
        // The signature binds the scheme: the same values for another scheme do not verify.
        #expect(!policy.isSigned(by: publicKey, scheme: try URLScheme("org.example.other")))
        #expect(policyURL.utf8.count <= DeliveryMessage.maximumLength)
    }

    @Test(
        "URLs: the signed delegation notice parses back to itself, verifies under the key, and is refused when altered")
    func delegationURL() throws {
        let key = try MessageSigningKey(pkcs8DER: SecretBytes(try #require(Self.bytes(hex: Self.rfc8032PKCS8))))
        let message = try DelegationNotice(
            client: try ClientID("dcclient"), id: try RequestID(Self.request),
            digest: try SHA256Hex(Digests.hex(Digests.sha256(Array("dlg".utf8)))), time: Self.time
        ).signed(with: key, scheme: try URLScheme("org.example.dcclient"))
        let url = message.url(scheme: try URLScheme("org.example.dcclient"))
        #expect(
            url.hasPrefix(
                "org.example.dcclient:/delegation?v=2&client=dcclient&id=00112233445566778899aabbccddeeff&digest="))
        #expect(try DeliveryMessage.parse(url, scheme: try URLScheme("org.example.dcclient")) == .delegation(message))
        #expect(message.isSigned(by: key.publicKey, scheme: try URLScheme("org.example.dcclient")))
        #expect(!message.isSigned(by: key.publicKey, scheme: try URLScheme("org.example.other")))
        let altered = url.replacingOccurrences(of: "id=0011", with: "id=0012")
        #expect(
            !(try DelegationNotice.parse(altered, scheme: try URLScheme("org.example.dcclient"))).isSigned(
                by: key.publicKey, scheme: try URLScheme("org.example.dcclient")))
        for broken in [
            url.replacingOccurrences(of: "&time=", with: "&when="), url.replacingOccurrences(of: "id=00", with: "id="),
            url + "&extra=1", url.replacingOccurrences(of: "v=2&client=dcclient&", with: "client=dcclient&v=2&"),
        ] {
            #expect(throws: DCError.self) {
                try DeliveryMessage.parse(broken, scheme: try URLScheme("org.example.dcclient"))
            }
        }
    }

    @Test("Result MAC")
    func resultMAC() throws {
        #expect(
            DeliveryPayload.resultMAC(key: Self.resultKey, request: try RequestID(Self.request), status: .ok)
                == "adae2e8e978337516622bb2383d4fb4ab5eef354db93d9a8b98190594b9d921e")
    }

    @Test(
        "The document's table, our code, Python (hashlib, hmac, urllib.parse, base64) and the openssl CLI (Ed25519) give the same nine values"
    )
    func documentCodeAndPeersAgree() throws {
        let sandbox = try Sandbox("vectors")
        defer { sandbox.remove() }
        let python = try Self.python(
            """
            import base64, hashlib, hmac, urllib.parse
            request = "00112233445566778899aabbccddeeff"
            print("org.example.provider:/new?" + urllib.parse.urlencode(
                [("v", "2"), ("client", "dcclient"), ("request", request), ("time", "1795000000")]))
            print(hashlib.sha256(b"sealed").hexdigest())
            print(hmac.new(bytes(range(1, 33)), ("v1|" + request + "|ok").encode(), hashlib.sha256).hexdigest())
            message = base64.urlsafe_b64encode("Lost device? Call ext. 4242 ~ help".encode()).decode().rstrip("=")
            print(message)
            print("org.example.dcclient:/policy?" + urllib.parse.urlencode(
                [("v", "2"), ("client", "dcclient"), ("seq", "3"), ("state", "unauthorized"), ("autolock", "900"),
                 ("message", message), ("time", "1795000000")]))
            print("org.example.provider:/ack?" + urllib.parse.urlencode(
                [("v", "2"), ("client", "dcclient"), ("seq", "3"), ("of", "auth"), ("policy", "applied"),
                 ("message", ""), ("time", "1795000060")]))
            """, in: sandbox)
        try #require(python.count == 6)
        // The openssl CLI signs what the document says is signed, with the same key.
        let key = sandbox.file("ed25519.der")
        try Data(try #require(Self.bytes(hex: Self.rfc8032PKCS8))).write(to: URL(fileURLWithPath: key))
        func opensslSignature(of url: String) throws -> String {
            let message = sandbox.file("signed-input")
            try Data((DeliveryMessage.signingContext + url).utf8).write(to: URL(fileURLWithPath: message))
            let signed = try sandbox.run(
                "openssl", ["pkeyutl", "-sign", "-rawin", "-keyform", "DER", "-inkey", key, "-in", message])
            try #require(signed.status == 0, "openssl pkeyutl: \(signed.stderrText)")
            return Digests.hex(signed.stdout)
        }
        let peers = [
            python[0], try opensslSignature(of: python[0]), python[1], python[2], python[3], python[4],
            try opensslSignature(of: python[4]), python[5], try opensslSignature(of: python[5]),
        ]

        let new = try Self.signedNew()
        let policy = try Self.signedPolicy()
        let policyURL = Self.signedURL(policy, scheme: try URLScheme("org.example.dcclient"))
        let ack = try Self.signedAcknowledgement()
        // Our base64url spelling of the message, as the policy URL carries it.
        let encodedMessage = try #require(
            policyURL.split(separator: "&").first { $0.hasPrefix("message=") }?.dropFirst("message=".count))
        let ours = [
            Self.signedURL(new, scheme: try URLScheme("org.example.provider")),
            try #require(new.signature).text,
            Digests.hex(Digests.sha256(Array("sealed".utf8))),
            DeliveryPayload.resultMAC(key: Self.resultKey, request: try RequestID(Self.request), status: .ok),
            String(encodedMessage), policyURL, try #require(policy.signature).text,
            Self.signedURL(ack, scheme: try URLScheme("org.example.provider")), try #require(ack.signature).text,
        ]
        #expect(ours == peers)
        #expect(try Self.documentedVectors() == peers, "docs/PROTOCOL.md's table")
    }

    @Test("Random keys, requests, statuses and spool contents: our MACs and digests are Python's")
    func randomAgainstPython() throws {
        let sandbox = try Sandbox("vectors-random")
        defer { sandbox.remove() }
        // Each line: key (hex), request, status, content (hex). The key goes over stdin, as a test key.
        var lines: [String] = []
        var expected: [String] = []
        for index in 0..<64 {
            let key = try Digests.random(32)
            let request = RequestID.random()
            // Any status a result can carry (the type's rule: lowercase letters, digits and '-').
            let status = try ResultStatus(["ok", "invalid", "not-ready", "s\(index)"][index % 4])
            let content = (0..<(index * 7)).map { _ in UInt8.random(in: 0...255) }
            let hexKey = key.withUnsafeBytes { Digests.hex(Array($0)) }
            lines.append([hexKey, request.text, status.text, Digests.hex(content)].joined(separator: " "))
            expected.append(DeliveryPayload.resultMAC(key: key, request: request, status: status))
            expected.append(Digests.hex(Digests.sha256(content)))
        }
        let python = try Self.python(
            """
            import hashlib, hmac, sys
            for line in sys.stdin:
                key, request, status, content = (line.rstrip("\\n").split(" ") + [""])[:4]
                message = ("v1|" + request + "|" + status).encode()
                print(hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest())
                print(hashlib.sha256(bytes.fromhex(content)).hexdigest())
            """, input: lines.joined(separator: "\n") + "\n", in: sandbox)
        #expect(python.count == expected.count)
        #expect(python == expected)
    }
}
