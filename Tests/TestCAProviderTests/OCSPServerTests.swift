import CredentialCoding
import DerivedCredentials
import Foundation
import Synchronization
import SystemSupport
import TestCAProvider
import TestSupport
import Testing

/// The test CA's OCSP responder on HTTP, in this process, asked by programs we did not write:
/// `openssl ocsp` judges its answers and their signatures, curl sends what is not OCSP.
@Suite("OCSP server: the test CA's answers over HTTP, as openssl ocsp reads them", .ownThreads, .timeLimit(.minutes(1)))
struct OCSPServerTests {
    /// A test CA that issued and recorded one credential, with `chain.pem` (root and issuing CA)
    /// and the credential's certificates as `TAG.pem`; its OCSP server serves on a thread of its
    /// own until ``stop()``.
    final class World: Sendable {
        let directory: TemporaryDirectory
        let ca: TestCA
        let listener: OCSPServer.Listener
        let log = LogLines()
        private let served = DispatchSemaphore(value: 0)

        init(_ label: String) throws {
            directory = try TemporaryDirectory(label)
            ca = try TestCA.initialize(at: directory.file("ca"))
            let issued = try ca.issue(TestCAIssueRequest())
            var certificates: [CredentialTag: [Certificate]] = [:]
            for entry in issued.entries {
                certificates[entry.tag] = [entry.certifiedKey.certificate]
                _ = try directory.write("\(entry.tag).pem", PEM.certificate(entry.certifiedKey.certificate))
            }
            try ca.record(certificates)
            _ = try directory.write(
                "chain.pem", PEM.certificate(ca.rootCertificate) + PEM.certificate(ca.issuingCertificate))
            listener = try OCSPServer.listen(ListenAddress(host: "127.0.0.1", port: 0))
            let server = try ca.ocspServer(log: { [log] line in log.lines.withLock { $0.append(line) } })
            Thread.detachNewThread { [listener, served] in
                server.serve(listener)
                served.signal()
            }
        }

        var url: String { "http://127.0.0.1:\(listener.port)/" }

        /// Closes the listener; true once `serve` has returned (within 10 s).
        func stop() -> Bool {
            listener.close()
            return served.wait(timeout: .now() + 10) == .success
        }

        func serial(_ tag: CredentialTag) throws -> String {
            let text = try run(
                OpenSSLFixtures.openssl, ["x509", "-in", directory.file("\(tag).pem"), "-noout", "-serial"])
            return String(text.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "=")[1])
        }

        /// `openssl ocsp` asking the server about the certificates of `tags`, verifying the answer.
        func ask(_ tags: [CredentialTag]) throws -> ProcessResult {
            try run(
                OpenSSLFixtures.openssl,
                ["ocsp", "-issuer", "ca/issuing.pem", "-CAfile", "chain.pem", "-url", url]
                    + tags.flatMap { ["-cert", "\($0).pem"] },
                currentDirectory: directory.path, timeout: 30)
        }

        /// curl's status code for `arguments` sent to the server.
        func curlStatus(_ arguments: [String]) throws -> String {
            try run("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}"] + arguments, timeout: 30)
                .stdoutText
        }
    }

    @Test(
        "openssl ocsp -url gets good for a valid certificate and revoked with its reason for a revoked one, signed by the issuing CA"
    )
    func answersOpenSSL() throws {
        let world = try World("ocsp-server")
        defer {
            _ = world.stop()
            world.directory.remove()
        }
        let before = try world.ask([.authentication, .signing])
        #expect(before.status == 0 && before.stderrText.contains("Response verify OK"), "\(before.stderrText)")
        #expect(before.stdoutText.contains("authentication.pem: good"), "\(before.stdoutText)")
        #expect(before.stdoutText.contains("signing.pem: good"), "\(before.stdoutText)")

        // index.txt is read afresh for every request: a revocation shows at once, no restart.
        try world.ca.revoke(serial: try world.serial(.signing), reason: .keyCompromise)
        let after = try world.ask([.authentication, .signing])
        #expect(after.status == 0 && after.stderrText.contains("Response verify OK"), "\(after.stderrText)")
        #expect(after.stdoutText.contains("authentication.pem: good"), "\(after.stdoutText)")
        #expect(after.stdoutText.contains("signing.pem: revoked"), "\(after.stdoutText)")
        #expect(after.stdoutText.contains("Reason: keyCompromise"), "\(after.stdoutText)")
        // The server logs each request after sending its answer: allow it a moment to.
        let logged = ContinuousClock.now + .seconds(5)
        while world.log.lines.withLock({ $0.filter { $0.hasPrefix("POST 200 ") }.count }) < 2,
            ContinuousClock.now < logged
        {
            usleep(5000)
        }
        #expect(world.log.lines.withLock { $0.filter { $0.hasPrefix("POST 200 ") }.count } == 2)
    }

    @Test("What is not an OCSP request is refused with its HTTP status, the server keeps answering, and close stops it")
    func refusesAndStops() throws {
        let world = try World("ocsp-server-refusals")
        defer { world.directory.remove() }
        #expect(try world.curlStatus(["-X", "DELETE", world.url]) == "405")
        #expect(try world.curlStatus([world.url + "%zz"]) == "400")
        #expect(try world.curlStatus(["-X", "POST", world.url]) == "411")
        #expect(try world.curlStatus(["-X", "POST", "-H", "Content-Length: 65537", world.url]) == "413")
        let still = try world.ask([.encryption])
        #expect(still.stdoutText.contains("encryption.pem: good"), "\(still.stdoutText)\(still.stderrText)")
        #expect(world.log.lines.withLock { $0.contains("DELETE 405 0 bytes") }, "\(world.log.lines.withLock { $0 })")
        #expect(world.stop(), "serve did not return after close")
        #expect(try world.curlStatus([world.url]) == "000")
    }
}

/// The lines an OCSP server logged, in order.
final class LogLines: Sendable {
    let lines = Mutex<[String]>([])
}
