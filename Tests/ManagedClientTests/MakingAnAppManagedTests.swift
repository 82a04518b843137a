import AuthTokens
import ClientWorld
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import ProviderService
import TestSupport
import Testing

/// What the article's app shows; the article's code sets it.
final class AppUI: @unchecked Sendable {
    // Written by the event loop only, read after it stopped.
    var initializing = true
    var showsSensitiveData = false
    var notice = ""
    var secureFeaturesEnabled = false
}

/// The article "Making an app managed" (ManagedClient.docc/MakingAnAppManaged.md): its code is
/// this file's, compiled and run against a real provider and client. The first test checks that
/// every Swift block of the article is here, line for line.
@Suite("The article \"Making an app managed\": its code compiles and runs", .ownThreads, .timeLimit(.minutes(5)))
struct MakingAnAppManagedTests {
    static let article = Repository.root + "/Sources/ManagedClient/ManagedClient.docc/MakingAnAppManaged.md"

    @Test("Every Swift block of the article is in this file, line for line")
    func blocksAreHere() throws {
        let article = try String(contentsOfFile: Self.article, encoding: .utf8)
        let here = try String(contentsOfFile: #filePath, encoding: .utf8).split(separator: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }
        var blocks: [[String]] = []
        var current: [String]?
        for line in article.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "```swift" {
                current = []
            } else if line == "```", let block = current {
                blocks.append(block)
                current = nil
            } else if current != nil {
                current!.append(line.trimmingCharacters(in: .whitespaces))
            }
        }
        #expect(blocks.count == 4)
        for block in blocks {
            let found = here.indices.contains { start in
                start + block.count <= here.count && Array(here[start..<start + block.count]) == block
            }
            #expect(found, "not in this file:\n\(block.joined(separator: "\n"))")
        }
    }

    @Test("The article's auth token: made for the server's challenge, and the verifier accepts it")
    func theArticlesToken() async throws {
        let world = try World()
        defer { world.dir.remove() }
        _ = try await world.service.deliverQueued(try world.available())
        let client = world.client
        let challenge = "one-use 2f9c"
        let token = try await client.authToken(challenge: challenge, serverName: "mail.example.com")
        let header = (name: "X-Good-GD-AuthToken", value: token.compact)  // on the request to the server
        let sameForEveryAppOfThisUser = client.sharedUserID()
        let verifier = AuthTokenVerifier(
            issuers: try TrustedIssuers.load(from: world.service.issuersPath),
            revocations: try RevocationList.load(from: world.service.revocationsPath))
        #expect(verifier.verify(header.value, now: Date()).identity?.challenge == challenge)
        // Empty only where the device has no machine id (`/etc/machine-id`).
        #expect(sameForEveryAppOfThisUser.count == (SharedUserID.machineID() == nil ? 0 : 43))
    }

    @Test("The article's app: events, acknowledgements, secure files, pasteboard, retire")
    func theArticlesApp() async throws {
        let world = try World(paired: false, handlesPolicies: false)
        defer { world.dir.remove() }
        let client = world.client
        let service = world.service
        let ui = AppUI()
        let send: (String) async throws -> Void = {
            _ = try service.handleAcknowledgement(try Acknowledgement.parse($0, scheme: service.callbackScheme))
        }
        let failures = Box()
        let loop = Task {
            do {
                for await event in client.events() {
                    switch event {
                    case .ready:
                        ui.initializing = false
                    case .authStateChanged(let state, let message):
                        ui.showsSensitiveData = state == .authorized
                        ui.notice = state == .authorized ? "" : message
                        try await client.authStateApplied(.applied, send: send)
                    case .secureFileIOPolicyChanged:
                        try await client.secureFileIOPolicyApplied(.applied, send: send)
                    case .secureServicesAvailabilityChanged(let availability):
                        ui.secureFeaturesEnabled = availability == .available
                    case .credentialDelivered(let sequence):
                        ui.notice = "credential \(sequence) installed"
                    }
                }
            } catch { failures.append("\(error)") }
        }
        defer { loop.cancel() }
        // The provider pairs: its first policy arrives at the app's handler.
        _ = try service.pair(clientScheme: .exampleClient)
        let record = try #require(try service.policyRecord(clientId: .exampleClient))
        let url = try world.policyURL(record.policy)
        let update = try client.handlePolicy(url)
        if update.authChanged { print("now \(update.policy.state)") }
        // The two acknowledgements come one after the other from the app's loop: wait for both.
        try await eventually { try service.policyRecord(clientId: .exampleClient)?.isPending == false }
        try await eventually {
            try service.policyRecord(clientId: .exampleClient)?.fileIOAcknowledgement?.state == .applied
        }
        try await eventually { !ui.initializing && ui.showsSensitiveData && ui.secureFeaturesEnabled }

        try client.secureFiles.write(Array("draft of the merger memo".utf8), to: "draft.txt")
        let draft = try client.secureFiles.read("draft.txt")
        try client.pasteboard.copy("meeting moved to 10:00")
        let pasted = try client.pasteboard.paste()
        #expect(draft.withUnsafeBytes { Array($0) } == Array("draft of the merger memo".utf8))
        #expect(pasted == "meeting moved to 10:00")

        // Retired: the app's loop acknowledges, and the client erases everything.
        _ = try await service.setPolicy(clientScheme: .exampleClient) {
            $0.state = .retired
            $0.message = "Device retired"
        }
        #expect(try client.handlePolicy(try #require(world.policies.all.last)).policy.state == .retired)
        try await eventually { try service.pairing(clientId: .exampleClient) == nil }
        try await eventually { !FileManager.default.fileExists(atPath: client.secureFiles.directory) }
        try await eventually { !ui.showsSensitiveData }
        #expect(failures.all.isEmpty, "\(failures.all)")
    }
}
