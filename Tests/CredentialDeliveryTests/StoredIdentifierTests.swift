import CredentialDelivery
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The ids in the files the provider and the client keep (registrations, pairings, ledger records,
/// holdings) are typed, and stored as they always were: plain JSON strings. A file whose id breaks
/// its rule is refused when it is read, with an error that names the id, or skipped where the
/// reader skips damaged files; never trusted, never a crash.
@Suite("Stored ids: plain JSON strings, checked when a file is read", .ownThreads, .timeLimit(.minutes(1)))
struct StoredIdentifierTests {
    static let created = Date(timeIntervalSince1970: 1_795_000_000)

    @Test("A ledger record is written byte for byte as before: the ids are plain strings")
    func ledgerRecordBytes() throws {
        let dir = try TemporaryDirectory("stored-ids")
        defer { dir.remove() }
        let ledger = RequestLedger(directory: dir.file("requests"))
        let request = try RequestID("00112233445566778899aabbccddeeff")
        try ledger.create(
            RequestLedger.Record(
                request: request, clientScheme: .exampleClient, credentialName: "stored", created: Self.created,
                resultKey: "a2V5"))
        let written = String(decoding: try dir.read("requests/\(request).json"), as: UTF8.self)
        #expect(
            written
                == #"{"clientScheme":"org.example.dcclient","created":"2026-11-18T11:06:40Z","credentialName":"stored","request":"00112233445566778899aabbccddeeff","resultKey":"a2V5"}"#
        )
        #expect(ledger.record(request)?.clientScheme == .exampleClient)
    }

    @Test("A ledger record or holding with an invalid id is skipped; a file not named by a request id is not read")
    func damagedLedgerAndHoldings() throws {
        let dir = try TemporaryDirectory("stored-ids")
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file("requests"), withIntermediateDirectories: true)
        let request = try RequestID(String(repeating: "ab", count: 16))
        let record =
            #"{"clientScheme":"org example","created":"2026-11-18T11:06:40Z","credentialName":"x","request":"\#(request)"}"#
        _ = try dir.write("requests/\(request).json", record)
        _ = try dir.write(
            "requests/not-a-request.json",
            record.replacingOccurrences(of: "org example", with: "org.example.dcclient"))
        let ledger = RequestLedger(directory: dir.file("requests"))
        #expect(ledger.record(request) == nil)
        #expect(ledger.recent().isEmpty)
        #expect(throws: DCError.self) { try ledger.existingRecord(request) }

        try FileManager.default.createDirectory(atPath: dir.file("holdings"), withIntermediateDirectories: true)
        let holding = #"{"clientScheme":"-bad","credentialName":"x","serials":["01"],"since":"2026-11-18T11:06:40Z"}"#
        _ = try dir.write("holdings/bad.json", holding)
        _ = try dir.write(
            "holdings/org.example.dcclient.json",
            holding.replacingOccurrences(of: "-bad", with: "org.example.dcclient"))
        #expect(Holdings(directory: dir.file("holdings")).all().map(\.clientScheme) == [.exampleClient])
    }

    @Test("A registration or a pinned key file with an invalid id is refused, and the error names the id")
    func damagedRegistrationAndPairing() throws {
        let dir = try TemporaryDirectory("stored-ids")
        defer { dir.remove() }
        let registration = """
            {"certificate":"","clientId":"dcclient","executable":"/usr/bin/dcclient","protocolVersion":2,\
            "scheme":"org.example.dcclient","spool":"/nowhere","status":"/nowhere"}
            """
        let good = try dir.write("good.json", registration)
        #expect(try Registrations.read(ClientRegistration.self, at: good)?.clientId == .exampleClient)
        let bad = try dir.write(
            "bad.json", registration.replacingOccurrences(of: #""dcclient""#, with: #""Not Valid""#))
        let refused = try #require(throws: DCError.self) { try Registrations.read(ClientRegistration.self, at: bad) }
        #expect(refused.code == .invalid)
        #expect(refused.message == "the registration cannot be read: 'Not Valid' is not a valid client id")
        #expect(refused.subject == bad)

        let pairing = ClientPairing(
            clientId: .exampleClient, scheme: .exampleClient, signingKey: "a2V5", paired: Self.created)
        let pinned = dir.file("pairing.json")
        try PinnedKeys.write(pairing, to: pinned)
        #expect(try PinnedKeys.read(ClientPairing.self, at: pinned) == pairing)
        let text = String(decoding: try dir.read("pairing.json"), as: UTF8.self)
        #expect(text.contains(#""scheme" : "org.example.dcclient""#), "\(text)")
        _ = try dir.write(
            "pairing.json", text.replacingOccurrences(of: "org.example.dcclient", with: "1.example"))
        let unpinned = try #require(throws: DCError.self) { try PinnedKeys.read(ClientPairing.self, at: pinned) }
        #expect(unpinned.code == .invalid)
        #expect(unpinned.message == "a pinned key file that cannot be read: '1.example' is not a valid URL scheme")
        // A file that is damaged some other way keeps its words.
        _ = try dir.write("pairing.json", "{")
        let damaged = try #require(throws: DCError.self) { try PinnedKeys.read(ClientPairing.self, at: pinned) }
        #expect(damaged.message == "a pinned key file that cannot be read")
    }
}
