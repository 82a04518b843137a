import CredentialDelivery
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// What a provider accepts as a policy's message (`PolicyText.check`) must reach the client: a
/// message the provider sets but the client's parser refuses would leave the policy waiting forever.
@Suite("Policy messages: what the provider accepts, the client parses", .ownThreads, .timeLimit(.minutes(1)))
struct PolicyTextTests {
    static let scheme = try! URLScheme("org.example.dcclient")
    static let messages = [
        "", "plain", "Lost device? Call ext. 4242 ~ help", "Café – ext. 4242 ✓",
        String(repeating: "é", count: PolicyText.maximumLength / 2), "ends with a BOM\u{FEFF}",
        "\u{FEFF}starts with a BOM",
    ]

    @Test("Every message PolicyText.check accepts travels in a policy and an ack, and parses back", arguments: messages)
    func travels(message: String) throws {
        try PolicyText.check(message)
        let signature = try SignatureHex(String(repeating: "0", count: 128))
        let client = try ClientID("dcclient")
        let policy = DeliveryMessage.policy(
            PolicyNotice(
                client: client, policy: ClientPolicy(state: .unauthorized, message: message, sequence: 1),
                time: 1_795_000_000, signature: signature))
        let ack = DeliveryMessage.acknowledgement(
            Acknowledgement(
                client: client, sequence: 1, subject: .authState, state: .error, message: message,
                time: 1_795_000_000, signature: signature))
        // A leading U+FEFF included: Foundation's String(data:encoding: .utf8) would drop it, so
        // the decoder validates the bytes as they are.
        #expect((try? DeliveryMessage.parse(policy.url(scheme: Self.scheme), scheme: Self.scheme)) == policy)
        #expect((try? DeliveryMessage.parse(ack.url(scheme: Self.scheme), scheme: Self.scheme)) == ack)
    }
}
