import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

/// The scheme `FuzzTesting/Sources/FuzzDeliveryURL` parses against.
private let fuzzScheme = try! URLScheme("org.example.dcclient")

/// The libFuzzer harnesses' inputs replayed in the ordinary suite: each seed and kept crasher goes
/// to the entry point its harness calls, with the harness's own check.
@Suite("Fuzz seeds and crashers replayed: delivery URLs and payloads", .ownThreads, .timeLimit(.minutes(3)))
struct DeliveryFuzzSeedTests {
    @Test(
        "FuzzDeliveryURL: parsed or refused with a DCError; what parses prints back to a URL that parses to the same message",
        arguments: FuzzInputs.all("FuzzDeliveryURL"))
    func url(input: FuzzInput) throws {
        // The harness's conversion: bytes as UTF-8, invalid sequences replaced.
        let text = String(decoding: input.bytes, as: UTF8.self)
        let message: DeliveryMessage
        do {
            message = try DeliveryMessage.parse(text, scheme: fuzzScheme)
        } catch is DCError {
            // A seed is named after the message it holds (new, deliver, result, available, policy, ack, delegation): it must parse.
            #expect(input.isCrasher, "the seed \(input.name) is refused")
            return
        }
        if !input.isCrasher { #expect(message.path == input.name) }
        let again = message.url(scheme: fuzzScheme)
        let reparsed = try DeliveryMessage.parse(again, scheme: fuzzScheme)
        #expect(reparsed == message)
        #expect(reparsed.url(scheme: fuzzScheme) == again)
    }

    /// The per-message harnesses' inputs: the query of one message kind (FuzzMessageHarness).
    static let messageInputs: [FuzzInput] = ["New", "Deliver", "Result", "Available", "Policy", "Ack", "Delegation"]
        .flatMap {
            FuzzInputs.all("Fuzz\($0)Message")
        }

    @Test(
        "Fuzz*Message: a query is parsed or refused; what parses round-trips and no signature verifies under a key nobody holds",
        arguments: messageInputs)
    func message(input: FuzzInput) throws {
        let path = input.harness.dropFirst(4).dropLast(7).lowercased()
        let query = String(decoding: input.bytes, as: UTF8.self)
        let message: DeliveryMessage
        do {
            message = try DeliveryMessage.parse("\(fuzzScheme):/\(path)?\(query)", scheme: fuzzScheme)
        } catch is DCError {
            #expect(input.isCrasher, "the seed \(input.name) is refused")
            return
        }
        #expect(message.path == path)
        #expect(try DeliveryMessage.parse(message.url(scheme: fuzzScheme), scheme: fuzzScheme) == message)
        // As the harness checks it: a signed message's signature; a result has none, so it is not signed.
        let signed = message.message as? any SignedURLMessage
        #expect(signed?.isSigned(by: [UInt8](repeating: 0x42, count: 32), scheme: fuzzScheme) != true)
    }

    @Test(
        "FuzzDeliveryPayload: decoded or refused with a DCError",
        arguments: FuzzInputs.all("FuzzDeliveryPayload"))
    func payload(input: FuzzInput) throws {
        var bytes = input.bytes
        do {
            let payload = try DeliveryPayload.decode(SecretBytes(consuming: &bytes))
            // Whatever decodes encodes again to bytes that decode to the same request and credential.
            let again = try DeliveryPayload.decode(try payload.encode())
            #expect(again.requestId == payload.requestId)
            #expect(again.credential == payload.credential)
        } catch is DCError {}
    }

    @Test("FuzzDeliveryPayload's entry point accepts a real payload, so the replay above is not all refusals")
    func realPayload() throws {
        let dir = try TemporaryDirectory("fuzz-payload")
        defer { dir.remove() }
        let ca = try TestCA.initialize(at: dir.file("ca"))
        let credential = try ca.issue(TestCAIssueRequest(escrowHistory: 1)).credential()
        let payload = DeliveryPayload(
            requestId: try RequestID("00112233445566778899aabbccddeeff"), clientId: .exampleClient, issuedAt: Date(),
            resultKey: SecretBytes([UInt8](repeating: 7, count: 32)), credential: credential)
        let decoded = try DeliveryPayload.decode(try payload.encode())
        #expect(decoded.credential == credential)
        #expect(decoded.requestId == payload.requestId)
    }
}
