import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Testing

/// The test vectors printed in docs/PROTOCOL.md (values computed independently with sha256sum and
/// Python's hmac module): if one of these fails, the document or the code is wrong.
@Suite("docs/PROTOCOL.md test vectors", .timeLimit(.minutes(3)))
struct ProtocolVectorTests {
    static let request = "00112233445566778899aabbccddeeff"
    static let resultKey = SecretBytes((1...32).map { UInt8($0) })

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
}
