import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// Counts how often the reader asks, to prove a wrong passphrase is never retried.
final class CountingPassphrase: PassphraseSource, @unchecked Sendable {
    // Only touched by the reader's single thread in these tests; the lock keeps it honest anyway.
    private let lock = NSLock()
    private var _asked = 0
    private let answer: String?
    init(_ answer: String?) { self.answer = answer }
    var asked: Int { lock.withLock { _asked } }
    func passphrase(for subject: String) throws -> SecretBytes? {
        lock.withLock { _asked += 1 }
        return answer.map { SecretBytes(Array($0.utf8)) }
    }
}

@Suite(
    "Strictness: every hostile input is refused cheaply, with its own code, asking for a passphrase at most once",
    .ownThreads, .timeLimit(.minutes(3)))
struct StrictnessTests {
    @Test(arguments: HostileInput.all + HostileInput.labelMismatches)
    func refused(input: HostileInput) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try input.make(dir)
        let passphrase = CountingPassphrase(input.passphrase)
        var limits = ReadLimits()
        if let cap = input.maximumIterations { limits.maximumIterations = cap }
        let reader = CredentialReader(passphrase: passphrase, limits: limits)
        let clock = ContinuousClock()
        let started = clock.now
        do {
            let material = try reader.read(file: path)
            Issue.record("accepted: \(material.certificates.count) certificate(s), key: \(material.privateKey != nil)")
        } catch let error as DCError {
            #expect(error.code == input.expected, "\(error)")
            #expect(error.subject == path)
            #expect(!error.description.contains("\n"))
            #expect(!error.description.contains(fixturePassphrase))
        }
        // Refused cheaply: hostile iteration counts are not computed (2^31-1 would take minutes).
        #expect(clock.now - started < .seconds(2))
        // Never asked twice: a wrong passphrase is not retried.
        #expect(passphrase.asked <= 1)
    }

    @Test("A file larger than the cap is refused before it is parsed")
    func tooLarge() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try dir.write("big.pem", [UInt8](repeating: 0x41, count: 2048))
        #expect(throws: DCError.self) {
            try CredentialReader(limits: ReadLimits(maximumFileSize: 1024)).read(file: path)
        }
    }

    @Test("Missing and unreadable inputs have their own codes")
    func missing() throws {
        do {
            _ = try CredentialReader().read(file: "/nonexistent/file.pem")
            Issue.record("accepted a missing file")
        } catch let error as DCError {
            #expect(error.code == .fileNotFound)
            #expect(error.code.category == .inputMissing)
        }
        do {
            _ = try CredentialReader().read(file: "/tmp")
            Issue.record("accepted a directory")
        } catch let error as DCError {
            #expect(error.code == .malformedInput)
        }
    }
}
