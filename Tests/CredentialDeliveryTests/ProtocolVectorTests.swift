import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The test vectors printed in docs/PROTOCOL.md: if one of these fails, the document or the code is
/// wrong. The values are checked three ways: as printed in the document, as our code computes them,
/// and as Python's `hashlib`, `hmac` and `urllib.parse` compute them, live, in a child process.
@Suite("docs/PROTOCOL.md test vectors", .timeLimit(.minutes(3)))
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

    @Test("URLs")
    func urls() {
        #expect(
            DeliveryMessage.new(client: "dcclient", request: Self.request).url(scheme: "org.example.provider")
                == "org.example.provider:/new?v=1&client=dcclient&request=00112233445566778899aabbccddeeff")
        #expect(
            DeliveryMessage.deliver(
                client: "dcclient", request: Self.request, digest: Digests.hex(Digests.sha256(Array("sealed".utf8)))
            )
            .url(scheme: "org.example.dcclient")
                == "org.example.dcclient:/deliver?v=1&client=dcclient&request=00112233445566778899aabbccddeeff&digest=c9d0036bed6744bcdf692fc980d8717d7e5f5a4f4e8266b4a84982602fb1cd09"
        )
    }

    @Test("Result MAC")
    func resultMAC() {
        #expect(
            DeliveryPayload.resultMAC(key: Self.resultKey, request: Self.request, status: "ok")
                == "adae2e8e978337516622bb2383d4fb4ab5eef354db93d9a8b98190594b9d921e")
    }

    @Test("The document's table, our code and Python (hashlib, hmac, urllib.parse) give the same three values")
    func documentCodeAndPythonAgree() throws {
        let sandbox = try Sandbox("vectors")
        defer { sandbox.remove() }
        let python = try Self.python(
            """
            import hashlib, hmac, urllib.parse
            request = "00112233445566778899aabbccddeeff"
            print("org.example.provider:/new?" + urllib.parse.urlencode(
                [("v", "1"), ("client", "dcclient"), ("request", request)]))
            print(hashlib.sha256(b"sealed").hexdigest())
            print(hmac.new(bytes(range(1, 33)), ("v1|" + request + "|ok").encode(), hashlib.sha256).hexdigest())
            """, in: sandbox)
        let ours = [
            DeliveryMessage.new(client: "dcclient", request: Self.request).url(scheme: "org.example.provider"),
            Digests.hex(Digests.sha256(Array("sealed".utf8))),
            DeliveryPayload.resultMAC(key: Self.resultKey, request: Self.request, status: "ok"),
        ]
        #expect(ours == python)
        #expect(try Self.documentedVectors() == python, "docs/PROTOCOL.md's table")
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
            let request = Digests.hex(try Digests.random(16).withUnsafeBytes { Array($0) })
            let status = ["ok", "invalid", "notReady", "s\(index)"][index % 4]
            let content = (0..<(index * 7)).map { _ in UInt8.random(in: 0...255) }
            lines.append(
                [key.withUnsafeBytes { Digests.hex(Array($0)) }, request, status, Digests.hex(content)].joined(
                    separator: " "))
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
