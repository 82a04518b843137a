import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import ProviderService
import SystemSupport
import TestCAProvider
import TestSupport
import Testing

/// A sandbox with a real dcclient (set up and registered by its own process) and a provider
/// service whose opener only records the delivery URL, so the test can run — and kill — the
/// client's handler process itself.
private struct Sandbox {
    let dir: TemporaryDirectory
    let environment: [String: String]
    let locations: XDGDirectories
    let service: CredentialService
    let urls = URLs()
    let ca: TestCA

    final class URLs: @unchecked Sendable {
        // Guarded by `lock`.
        private let lock = NSLock()
        private var values: [String] = []
        func append(_ url: String) { lock.withLock { values.append(url) } }
        var last: String? { lock.withLock { values.last } }
    }

    init() throws {
        let sandbox = try TestSupport.Sandbox("reliability")
        dir = sandbox.directory
        environment = sandbox.environment
        locations = XDGDirectories(environment: environment)
        _ = try dir.write("pass", "client passphrase\n")
        let dcclient = Binaries.directory + "/dcclient"
        for arguments in [
            [
                "init", "--scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                "--passphrase-file", dir.file("pass"),
            ],
            ["register"],
        ] {
            let result = try run(dcclient, arguments, environment: environment)
            guard result.status == 0 else { throw ProcessFailure(command: arguments, result: result) }
        }
        let result = try run(
            Binaries.dcprovision,
            ["register", "--scheme", "org.example.dcprovision", "--brand", "Test", "--testca", "/nonexistent"],
            environment: environment)
        guard result.status == 0 else { throw ProcessFailure(command: ["register"], result: result) }
        let urls = urls
        service = try CredentialService(
            brand: "Test", callbackScheme: try URLScheme("org.example.dcprovision"), locations: locations
        ) { url, _ in
            urls.append(url)
        }
        ca = try TestCA.initialize(at: dir.file("ca"))
        // Paired: the provider's first policy (authorized) reaches the client's handler, which
        // applies and acknowledges it; the client is then ready for deliveries.
        _ = try service.pair(clientScheme: .exampleClient)
        let policy = try #require(try service.policyRecord(clientId: .exampleClient)).policy
        let url = try service.policyURL(policy, clientId: .exampleClient, clientScheme: .exampleClient)
        let handled = try run(dcclient, ["handle-url", url], environment: environment)
        guard handled.status == 0 else { throw ProcessFailure(command: ["handle-url"], result: handled) }
    }

    /// Seals and spools `credential` and returns the delivery URL, without delivering it.
    func prepare(_ credential: Credential) async throws -> String {
        do {
            _ = try await service.send(credential, clientScheme: .exampleClient)
        } catch let error as DCError where error.code == .notReady {
            // Expected: nobody delivered it.
        }
        return urls.last!
    }

    var client: ManagedClient { ManagedClient(locations: locations) }
}

@Suite("Reliability: nothing lost, nothing half-installed", .ownThreads, .timeLimit(.minutes(5)))
struct ReliabilityTests {
    @Test(
        "kill -9 of the client at random points during 100 deliveries: each credential is wholly installed or not at all"
    )
    func killDuringDeliveries() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.dir.remove() }
        let dcclient = Binaries.directory + "/dcclient"
        var previous: Credential? = nil
        var killedMidway = 0
        for round in 0..<100 {
            let credential = try sandbox.ca.issue(
                TestCAIssueRequest(commonName: "Round \(round)", tags: [.authentication, .signing])
            ).credential()
            let url = try await sandbox.prepare(credential)
            // Start the handler and kill it after a random moment (0–40 ms).
            let process = try SpawnedProcess(dcclient, ["handle-url", url], environment: sandbox.environment)
            usleep(useconds_t.random(in: 0...40_000))
            process.kill()
            if let status = process.wait(), SpawnedProcess.wasSignaled(status) { killedMidway += 1 }
            // Whatever happened, the store holds the old credential or the new one, whole.
            let installed = try sandbox.client.installed()
            #expect(
                installed == previous || installed == credential, "round \(round): a mixed or unreadable credential")
            // Retrying the same request id completes it, once.
            let retry = try run(dcclient, ["handle-url", url], environment: sandbox.environment)
            #expect(retry.status == 0, "round \(round): \(retry.stderrText) \(retry.stdoutText)")
            #expect(try sandbox.client.installed() == credential)
            previous = credential
            // No staging file survives a retry.
            let store = sandbox.locations.dataHome + "/dcclient/apps/dcclient/store"
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: store).allSatisfy {
                    !$0.contains(AtomicFileSet.stagingMarker)
                })
        }
        #expect(killedMidway > 10, "the kills should land while the handler runs (\(killedMidway) did)")
    }

    @Test(
        "A full disk (a file-size limit) while installing: a clear error, the old credential intact, a retry later succeeds"
    )
    func fullDisk() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.dir.remove() }
        let dcclient = Binaries.directory + "/dcclient"
        let first = try sandbox.ca.issue(TestCAIssueRequest(commonName: "First")).credential()
        let firstURL = try await sandbox.prepare(first)
        #expect(try run(dcclient, ["handle-url", firstURL], environment: sandbox.environment).status == 0)
        let second = try sandbox.ca.issue(TestCAIssueRequest(commonName: "Second", escrowHistory: 3)).credential()
        let url = try await sandbox.prepare(second)
        // Files larger than 2 KB cannot be written: the sealed credential is several KB.
        let refused = try run(
            "prlimit", ["--fsize=2048", dcclient, "handle-url", url], environment: sandbox.environment)
        #expect(refused.status == 74, "\(refused.stderrText)")
        #expect(refused.stderrText.contains("File too large"))
        #expect(refused.stderrText.split(separator: "\n").count == 1)
        #expect(try sandbox.client.installed() == first)
        // With space again, the same request id installs the new credential.
        #expect(try run(dcclient, ["handle-url", url], environment: sandbox.environment).status == 0)
        // The new credential's pairs (its escrow history now holds the first one's retired pairs too).
        #expect(try sandbox.client.installed()?.entries.map(\.certifiedKey) == second.entries.map(\.certifiedKey))
    }
}
