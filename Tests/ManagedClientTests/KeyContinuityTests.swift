import ClientWorld
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient
import TestCAProvider
import TestSupport
import Testing

/// Issue 15: a renewal keeps the retired encryption pairs, so mail encrypted to an old
/// certificate stays readable; the old authentication and signing keys are gone.
@Suite("Renewal with key continuity", .ownThreads, .timeLimit(.minutes(3)))
struct KeyContinuityTests {
    /// `plaintext` encrypted by `openssl cms -encrypt` (the peer) to `certificate`, in `form`.
    func encrypt(_ plaintext: String, to certificate: Certificate, form: String, in world: World) throws -> [UInt8] {
        let name = "recipient-\(UUID().uuidString).pem"
        let recipient = try world.dir.write(name, PEM.certificate(certificate))
        let input = try world.dir.write("message-\(UUID().uuidString)", plaintext)
        return try OpenSSLFixtures.openssl(
            ["cms", "-encrypt", "-aes256", "-binary", "-in", input, "-outform", form, "-recip", recipient])
    }

    func text(_ secret: SecretBytes) -> String { secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }

    @Test(
        "Mail encrypted with openssl cms to the old encryption and escrow certificates opens after a renewal, through the client; the old authentication and signing keys are gone"
    )
    func oldMailStaysReadable() async throws {
        let world = try World()
        defer { world.dir.remove() }
        let first = try world.credential(TestCAIssueRequest(commonName: "First", escrowHistory: 2))
        _ = try await world.service.send(first, clientScheme: .exampleClient, validator: world.validator())
        let old = try #require(first[.encryption])
        let oldEscrow = try #require(first[.escrow])
        // S/MIME as mail clients send it, DER and PEM; to the encryption, escrow and an older escrow certificate.
        let messages = [
            (
                "to the encryption certificate",
                try encrypt("first secret", to: old.certificate, form: "SMIME", in: world)
            ),
            (
                "to the escrow certificate",
                try encrypt("escrowed secret", to: oldEscrow.certificate, form: "DER", in: world)
            ),
            (
                "to a retired escrow certificate",
                try encrypt("older secret", to: oldEscrow.keyHistory[1].certificate, form: "PEM", in: world)
            ),
        ]
        let expected = ["first secret", "escrowed secret", "older secret"]
        #expect(try messages.map { text(try world.client.decrypt($0.1)) } == expected)

        let second = try world.credential(TestCAIssueRequest(commonName: "Second"))
        _ = try await world.service.send(second, clientScheme: .exampleClient, validator: world.validator())

        // The renewed credential is installed, and every old message still opens.
        let installed = try #require(try world.client.installed())
        #expect(installed.entries.map(\.certificate) == second.entries.map(\.certificate))
        for ((label, message), plaintext) in zip(messages, expected) {
            #expect(try text(world.client.decrypt(message)) == plaintext, "\(label)")
        }
        // The history: the old encryption and escrow pairs, then the old escrow history, in the
        // escrow entry too; nothing of the old authentication or signing keys anywhere.
        let history = try world.client.keyHistory()
        #expect(
            history.map(\.certificate)
                == [old.certificate, oldEscrow.certificate] + oldEscrow.keyHistory.map(\.certificate))
        #expect(installed[.escrow]?.keyHistory == history)
        let gone = [CredentialTag.authentication, .signing].compactMap { first[$0]?.certificate }
        let kept = installed.entries.flatMap { [$0.certificate] + $0.keyHistory.map(\.certificate) }
        #expect(gone.count == 2 && gone.allSatisfy { !kept.contains($0) })
        // A message for the old authentication key does not open: that key was not kept.
        let forAuthentication = try encrypt("no", to: gone[0], form: "DER", in: world)
        #expect(throws: DCError.self) { try world.client.decrypt(forAuthentication) }
        // A message to someone else, and one altered in transit.
        let stranger = try world.credential(TestCAIssueRequest(commonName: "Stranger"))
        let forStranger = try encrypt(
            "not yours", to: try #require(stranger[.encryption]).certificate, form: "DER", in: world)
        #expect(throws: DCError.self) { try world.client.decrypt(forStranger) }
        // openssl cms -encrypt uses AES-CBC, which has no integrity: a changed last block is
        // refused by its padding check, except when the padding happens to stay valid (about 1 in
        // 256 keys), and then it opens to garbage. Never to the message.
        var altered = messages[1].1
        altered[altered.count - 5] ^= 0x01
        #expect((try? world.client.decrypt(altered)).map(text) != expected[1])
        // Locked: no key opens anything.
        try world.client.lock()
        #expect(throws: DCError.self) { try world.client.decrypt(messages[0].1) }
    }

    @Test(
        "Each pair once, newest first, at most 20: the oldest retired pairs go first; a pair the new escrow entry carries is not repeated"
    )
    func boundedHistory() async throws {
        let world = try World()
        defer { world.dir.remove() }
        var credentials: [Credential] = []
        // Eleven renewals retire 22 pairs: the history keeps the newest 20.
        for index in 0..<12 {
            let credential = try world.credential(TestCAIssueRequest(commonName: "Renewal \(index)"))
            _ = try await world.service.send(credential, clientScheme: .exampleClient)
            credentials.append(credential)
        }
        let history = try world.client.keyHistory().map(\.certificate)
        let retired = credentials.dropLast().reversed().flatMap { credential in
            [CredentialTag.encryption, .escrow].compactMap { credential[$0]?.certificate }
        }
        #expect(history.count == CredentialEntry.maximumKeyHistory)
        #expect(history == Array(retired.prefix(CredentialEntry.maximumKeyHistory)))
        #expect(Set(history).count == history.count)

        // A provider that already put the retiring encryption pair into the new escrow history:
        // it is there once.
        let last = try #require(credentials.last)
        let fresh = try world.credential(TestCAIssueRequest(commonName: "Carried"))
        let escrow = try #require(fresh[.escrow])
        let carried = try Credential(
            name: fresh.name, serialNumber: fresh.serialNumber, expirationDate: fresh.expirationDate,
            entries: fresh.entries.filter { $0.tag != .escrow } + [
                try CredentialEntry(
                    tag: .escrow, certificate: escrow.certificate, privateKey: escrow.privateKey,
                    keyHistory: [try #require(last[.encryption]).certifiedKey])
            ])
        _ = try await world.service.send(carried, clientScheme: .exampleClient)
        let after = try world.client.keyHistory().map(\.certificate)
        #expect(after.filter { $0 == last[.encryption]?.certificate }.count == 1)
        #expect(after.count == CredentialEntry.maximumKeyHistory)
        #expect(!after.contains(escrow.certificate), "the new escrow pair is current, not retired")
    }
}
