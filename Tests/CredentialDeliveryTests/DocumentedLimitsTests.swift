import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The numbers docs/PROTOCOL.md and docs/SECURITY.md promise about messages and the provider's
/// ledger, each written out here as the documents write it, never computed from the constant that
/// holds it: a constant changed without the documents fails these tests.
@Suite(
    "Documented limits: URL length, ids, numbers, auto-lock, messages, results, the ledger", .ownThreads,
    .timeLimit(.minutes(1)))
struct DocumentedLimitsTests {
    static let zeros128 = String(repeating: "0", count: 128)

    /// A `new` URL for `scheme`, signature unchecked (parsing comes first).
    static func newURL(scheme: String, client: String = "dcclient", time: String = "1795000000") -> String {
        "\(scheme):/new?v=2&client=\(client)&request=\(String(repeating: "0", count: 32))&time=\(time)&sig=\(zeros128)"
    }

    /// A `policy` URL for `org.example.dcclient` with `autolock` and `message` as given.
    static func policyURL(autolock: String = "900", message: String = "") -> String {
        "org.example.dcclient:/policy?v=2&client=dcclient&seq=3&state=unauthorized&autolock=\(autolock)"
            + "&message=\(message)&time=1795000000&sig=\(zeros128)"
    }

    /// Whether `url` parses for `scheme` (which must itself be a valid scheme: an invalid one fails the test).
    static func parses(_ url: String, scheme: String) -> Bool {
        guard let scheme = URLScheme(validating: scheme) else {
            Issue.record("'\(scheme)' is not a valid URL scheme")
            return false
        }
        return (try? DeliveryMessage.parse(url, scheme: scheme)) != nil
    }

    @Test("A URL of 1024 bytes is parsed; one of 1025 bytes is refused before anything else is read")
    func urlLength() throws {
        let rest = Self.newURL(scheme: "").utf8.count
        let scheme = "org.example." + String(repeating: "a", count: 1024 - rest - 12)
        let longest = Self.newURL(scheme: scheme)
        #expect(longest.utf8.count == 1024)
        #expect(Self.parses(longest, scheme: scheme))
        let longer = Self.newURL(scheme: scheme + "a")
        #expect(longer.utf8.count == 1025)
        let refused = try #require(throws: DCError.self) {
            try DeliveryMessage.parse(longer, scheme: try URLScheme(scheme + "a"))
        }
        #expect(refused.message.contains("longer than 1024 bytes"))
    }

    @Test("An id is 1 to 64 characters; a number is 1 to 18 digits")
    func idsAndNumbers() {
        let scheme = "org.example.provider"
        #expect(Self.parses(Self.newURL(scheme: scheme, client: "a"), scheme: scheme))
        #expect(Self.parses(Self.newURL(scheme: scheme, client: String(repeating: "a", count: 64)), scheme: scheme))
        #expect(!Self.parses(Self.newURL(scheme: scheme, client: String(repeating: "a", count: 65)), scheme: scheme))
        #expect(!Self.parses(Self.newURL(scheme: scheme, client: ""), scheme: scheme))
        #expect(Self.parses(Self.newURL(scheme: scheme, time: "1"), scheme: scheme))
        #expect(Self.parses(Self.newURL(scheme: scheme, time: "999999999999999999"), scheme: scheme))
        #expect(!Self.parses(Self.newURL(scheme: scheme, time: "1000000000000000000"), scheme: scheme))
    }

    @Test("A policy's auto-lock is 1 to 604800 s (a week): 0 and 604801 are refused; 900 s until a provider sets one")
    func autoLock() {
        for (autolock, valid) in [("0", false), ("1", true), ("900", true), ("604800", true), ("604801", false)] {
            #expect(
                Self.parses(Self.policyURL(autolock: autolock), scheme: "org.example.dcclient") == valid, "\(autolock)")
        }
        #expect(ClientPolicy(state: .authorized, sequence: 1).autoLock == 900)
    }

    @Test("A message is at most 200 bytes of UTF-8, at most 267 base64url characters")
    func messageLength() {
        func base64url(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let longest = base64url(String(repeating: "a", count: 200))
        #expect(longest.count == 267)
        #expect(Self.parses(Self.policyURL(message: longest), scheme: "org.example.dcclient"))
        #expect(
            !Self.parses(
                Self.policyURL(message: base64url(String(repeating: "a", count: 201))), scheme: "org.example.dcclient"))
        #expect((try? PolicyText.check(String(repeating: "é", count: 100))) != nil)
        #expect((try? PolicyText.check(String(repeating: "é", count: 100) + "a")) == nil)
    }

    @Test("A result is accepted within 600 s of its request: 601 s after it is refused, 600 s after it is accepted")
    func resultWindow() throws {
        let dir = try TemporaryDirectory("limits-result")
        defer { dir.remove() }
        let ledger = RequestLedger(directory: dir.file("requests"))
        let created = Date(timeIntervalSince1970: 1_795_000_000)
        // docs/PROTOCOL.md's test vector: key 01 02 … 20, this request, status ok.
        let request = try RequestID("00112233445566778899aabbccddeeff")
        let mac = "adae2e8e978337516622bb2383d4fb4ab5eef354db93d9a8b98190594b9d921e"
        try ledger.create(
            RequestLedger.Record(
                request: request, clientScheme: .exampleClient, credentialName: "limits", created: created,
                resultKey: Data((1...32).map { UInt8($0) }).base64EncodedString()))
        let late = try #require(throws: DCError.self) {
            try ledger.complete(request: request, status: .ok, mac: mac, now: created.addingTimeInterval(601))
        }
        #expect(late.code == .refusedMessage)
        #expect(
            try ledger.complete(request: request, status: .ok, mac: mac, now: created.addingTimeInterval(600))
                .outcome == .ok)
    }

    @Test(
        "Spool files: a sealed payload of 8 MiB, a delegation of 4 KiB, an identity JWT of 8 KiB are read; one byte more is refused"
    )
    func spoolSizes() throws {
        let dir = try TemporaryDirectory("limits-spool")
        defer { dir.remove() }
        let spool = Spool(directory: dir.path)
        for (kind, size) in [(Spool.Kind.sealedPayload, 8_388_608), (.delegation, 4096), (.identityToken, 8192)] {
            for (extra, fits) in [(0, true), (1, false)] {
                let bytes = [UInt8](repeating: 0x2E, count: size + extra)
                let request = try RequestID(String(repeating: fits ? "a" : "b", count: 32))
                let path = spool.path(request: request, kind: kind)
                _ = try dir.write((path as NSString).lastPathComponent, bytes)
                try #require(chmod(path, 0o600) == 0)
                let digest = Digests.hex(Digests.sha256(bytes))
                if fits {
                    #expect(try spool.read(request: request, digest: digest, kind: kind).count == size, "\(kind)")
                } else {
                    let refused = try #require(throws: DCError.self, "\(kind)") {
                        try spool.read(request: request, digest: digest, kind: kind)
                    }
                    #expect(refused.code == .inputTooLarge)
                }
            }
        }
    }

    /// Writes finished records (outcome `ok`) into `ledger`'s directory, each `age` seconds before `now`.
    static func finished(_ ages: [Int], in ledger: RequestLedger, now: Date, prefix: String) throws -> [RequestID] {
        try FileManager.default.createDirectory(atPath: ledger.directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return try ages.enumerated().map { index, age in
            let request = try RequestID(prefix + String(format: "%024x", index))
            var record = RequestLedger.Record(
                request: request, clientScheme: .exampleClient, credentialName: "limits",
                created: now.addingTimeInterval(-TimeInterval(age)), resultKey: nil)
            record.outcome = .ok
            try Data(try encoder.encode(record)).write(to: URL(fileURLWithPath: ledger.directory + "/\(request).json"))
            return request
        }
    }

    @Test(
        "The ledger keeps finished records 7 days (604800 s), the newest 1000, and none younger than 1200 s is removed")
    func ledgerBounds() throws {
        let dir = try TemporaryDirectory("limits-ledger")
        defer { dir.remove() }
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        // Seven days: 604800 s old is kept, 604801 s old is removed.
        let week = RequestLedger(directory: dir.file("week"))
        let weekOld = try Self.finished([604_800, 604_801], in: week, now: now, prefix: "aaaaaaaa")
        #expect(week.prune(now: now) == [weekOld[1]])
        // The newest 1000: of 1001 records between 1201 and 2201 s old, the oldest goes.
        let many = RequestLedger(directory: dir.file("many"))
        let manyOld = try Self.finished(Array(1201...2201), in: many, now: now, prefix: "bbbbbbbb")
        #expect(many.prune(now: now) == [manyOld[1000]])
        #expect(many.recent(limit: .max).count == 1000)
        // Twice the 600 s window: the 1001st record stays while it is 1200 s old, goes at 1201 s.
        let young = RequestLedger(directory: dir.file("young"))
        let youngOld = try Self.finished(Array(200...1200), in: young, now: now, prefix: "cccccccc")
        #expect(young.prune(now: now).isEmpty)
        #expect(young.prune(now: now.addingTimeInterval(1)) == [youngOld[1000]])
    }
}
