import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

/// What the test CA remembers of what it issued, so that it can revoke, publish CRLs, answer
/// OCSP and terminate the credentials derived from a card.
///
/// Two places in the CA's directory, both changed under `DIR/.lock`:
/// - `index.txt`: OpenSSL's CA database format, one line per certificate (`V` valid or `R`
///   revoked, expiry, revocation date and reason, serial, `unknown`, subject), so that
///   `openssl ocsp -index` and `openssl ca` read the same data we do;
/// - `credentials/ID.json`: one ``TestCA/IssuedCredential`` per credential, naming its
///   certificates and, for a derived credential, the card it was derived from.
///
/// ``TestCA/issue(_:)`` and ``TestCA/certify(_:validityDays:email:now:)`` only make certificates;
/// the provider records what it hands out with ``TestCA/record(_:)``.
extension TestCA {
    /// One credential the CA handed out.
    public struct IssuedCredential: Codable, Sendable, Hashable {
        /// One certificate of the credential.
        public struct Member: Codable, Sendable, Hashable {
            /// The entry it is for.
            public var tag: CredentialTag
            /// Its serial number, upper-case hex.
            public var serial: String
        }

        /// A random id, the file's name.
        public var id: String
        /// When it was issued.
        public var issued: Date
        /// For a derived credential: the serial number (hex) of the card certificate whose
        /// possession was proven.
        public var cardSerial: String?
        /// The certificates, current pairs first, then the escrow history.
        public var certificates: [Member]
    }

    /// One line of `index.txt`.
    public struct IndexEntry: Sendable, Hashable {
        /// The certificate's serial number, upper-case hex.
        public var serial: String
        /// Its notAfter.
        public var expires: Date
        /// When it was revoked; nil while valid.
        public var revoked: Date?
        /// Why, when it was revoked with a reason.
        public var reason: RevocationReason?
        /// Its subject in OpenSSL's one-line form.
        public var subject: String
    }

    var lockPath: String { directory + "/.lock" }
    var indexPath: String { directory + "/index.txt" }
    var credentialsDirectory: String { directory + "/credentials" }
    var archiveDirectory: String { directory + "/archive" }

    /// Records `credential`, issued now: its certificates join `index.txt` as valid, and
    /// `credentials/ID.json` names them. `cardSerial` ties a derived credential to its card. When
    /// the CA archives (``recoveryCertificate``), the `archiving` pairs (the encryption keys) are
    /// sealed to it into `archive/SERIAL.cms` in the same step.
    @discardableResult
    public func record(
        _ credential: [CredentialTag: [Certificate]], cardSerial: String? = nil, archiving: [CertifiedKey] = [],
        now: Date = Date()
    ) throws -> IssuedCredential {
        var members: [IssuedCredential.Member] = []
        var lines: [IndexEntry] = []
        for tag in CredentialTag.allCases {
            for certificate in credential[tag] ?? [] {
                let details = try CertificateDetails(certificate)
                members.append(.init(tag: tag, serial: details.serialNumber))
                lines.append(
                    IndexEntry(
                        serial: details.serialNumber, expires: details.notAfter ?? now, revoked: nil, reason: nil,
                        subject: CertificateDetails.openSSLSubject(of: certificate)))
            }
        }
        let id = (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let record = IssuedCredential(id: id, issued: now, cardSerial: cardSerial, certificates: members)
        var archive = AtomicFileSet(directory: archiveDirectory)
        if let recoveryCertificate {
            for pair in archiving {
                let serial = try CertificateDetails(pair.certificate).serialNumber
                try archive.add(
                    serial + ".cms", .bytes(try KeyArchive.seal(pair, to: recoveryCertificate)), mode: 0o600)
            }
        }
        var records = AtomicFileSet(directory: credentialsDirectory)
        try records.add(id + ".json", .bytes(try Self.encoder.encode(record) + [0x0A]), mode: 0o644)
        // All or nothing, under the lock: a step that fails puts back what the ones before wrote.
        try FileLock.withExclusiveLock(at: lockPath) { _ in
            try Rollback.allOrNothing { rollback in
                for set in [archive, records] { rollback.keep(set) }
                for name in ["index.txt", "index.txt.attr"] { rollback.keep(directory + "/" + name) }
                if !archive.names.isEmpty {
                    try AtomicFileSet.ensureDirectory(archiveDirectory)
                    try archive.commit(replacingExisting: true)
                }
                var index = try readIndex()
                let known = Set(index.map(\.serial))
                index += lines.filter { !known.contains($0.serial) }
                try AtomicFileSet.ensureDirectory(credentialsDirectory)
                try records.commit()
                try writeIndex(index)
            }
        }
        return record
    }

    /// Every line of `index.txt`, in order; empty before anything was recorded.
    public func index() throws -> [IndexEntry] { try readIndex() }

    /// Every recorded credential, oldest first.
    public func issuedCredentials() throws -> [IssuedCredential] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: credentialsDirectory)) ?? []
        return try names.filter { $0.hasSuffix(".json") }.map { name in
            let path = credentialsDirectory + "/" + name
            guard let data = FileManager.default.contents(atPath: path) else {
                throw DCError(.ioError, "cannot read", subject: path)
            }
            do {
                return try Self.decoder.decode(IssuedCredential.self, from: data)
            } catch {
                throw DCError(.malformedInput, "a credential record cannot be read: \(error)", subject: path)
            }
        }.sorted { ($0.issued, $0.id) < ($1.issued, $1.id) }
    }

    /// Marks the certificate with `serial` revoked at `now` for `reason`. Returns its line, and
    /// whether this call revoked it (false: it was revoked before, and is left as it was).
    /// Throws `DCError/Code/noSuchObject` for a serial this CA did not record.
    @discardableResult
    public func revoke(serial: String, reason: RevocationReason? = nil, now: Date = Date()) throws -> (
        entry: IndexEntry, changed: Bool
    ) {
        let wanted = try CertificateRevocationList.canonicalSerial(serial)
        return try FileLock.withExclusiveLock(at: lockPath) { _ in
            var index = try readIndex()
            guard let position = index.firstIndex(where: { $0.serial == wanted }) else {
                throw DCError(
                    .noSuchObject, "this test CA issued no certificate with serial \(wanted)", subject: directory,
                    hint: "see the serials in \(indexPath)")
            }
            if index[position].revoked != nil { return (index[position], false) }
            index[position].revoked = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
            index[position].reason = reason
            try writeIndex(index)
            return (index[position], true)
        }
    }

    /// A CRL of every revoked certificate in `index.txt` that has not expired, signed by the
    /// issuing CA, valid from `now` for `validity`, numbered one above the last (`crlnumber`).
    public func makeCRL(now: Date = Date(), validity: TimeInterval = 7 * 86400) throws -> CertificateRevocationList {
        let revoked = try readIndex().compactMap { entry -> CertificateRevocationList.Entry? in
            guard let date = entry.revoked, entry.expires > now else { return nil }
            return .init(serial: entry.serial, date: date, reason: entry.reason)
        }
        let number = try FileLock.updateNumber(at: directory + "/crlnumber") { UInt64($0).map { $0 + 1 } ?? 1 }
        let start = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        return try CertificateRevocationList.issue(
            revoked, number: number, thisUpdate: start, nextUpdate: start.addingTimeInterval(validity), by: issuer)
    }

    /// What the OCSP responder says about `serial`: good while valid, revoked once revoked,
    /// unknown when this CA never recorded it (as `openssl ocsp -index` answers).
    public func ocspAnswer(serial: String) throws -> OCSPResponder.Answer {
        guard let entry = try readIndex().first(where: { $0.serial == serial }) else { return .unknown }
        guard let date = entry.revoked else { return .good }
        return .revoked(date: date, reason: entry.reason)
    }

    /// An OCSP responder signing with the issuing CA's key.
    public func ocspResponder(validity: TimeInterval = 3600) throws -> OCSPResponder {
        try OCSPResponder(signer: issuer, validity: validity)
    }

    // MARK: - index.txt

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    private func readIndex() throws -> [IndexEntry] {
        guard let data = FileManager.default.contents(atPath: indexPath) else { return [] }
        return try String(decoding: data, as: UTF8.self).split(separator: "\n").enumerated().map { number, line in
            guard let entry = IndexFormat.parse(String(line)) else {
                throw DCError(.malformedInput, "line \(number + 1) is not an index line", subject: indexPath)
            }
            return entry
        }
    }

    private func writeIndex(_ index: [IndexEntry]) throws {
        var files = AtomicFileSet(directory: directory)
        try files.add("index.txt", .bytes(Array(try index.map(IndexFormat.line).joined().utf8)), mode: 0o644)
        // openssl ca reads this beside index.txt; without it, it warns on every run.
        try files.add("index.txt.attr", .bytes(Array("unique_subject = no\n".utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
    }
}

/// The lines of OpenSSL's CA database, as `openssl ca` writes them and `openssl ocsp -index` reads
/// them: six tab-separated fields, times as UTCTime (GeneralizedTime from 2050).
enum IndexFormat {
    static func line(_ entry: TestCA.IndexEntry) throws -> String {
        var revocation = ""
        if let revoked = entry.revoked {
            revocation = try time(revoked) + (entry.reason.map { "," + $0.rawValue } ?? "")
        }
        let subject = String(entry.subject.map { $0 == "\t" || $0 == "\n" || $0 == "\r" ? " " : $0 })
        return [
            entry.revoked == nil ? "V" : "R", try time(entry.expires), revocation, entry.serial, "unknown", subject,
        ]
        .joined(separator: "\t") + "\n"
    }

    static func parse(_ line: String) -> TestCA.IndexEntry? {
        let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard fields.count == 6, ["V", "R", "E"].contains(fields[0]), let expires = ASN1Time.date(fields[1]) else {
            return nil
        }
        var revoked: Date?
        var reason: RevocationReason?
        if fields[0] == "R" {
            let parts = fields[2].split(separator: ",", maxSplits: 1).map(String.init)
            guard let first = parts.first, let date = ASN1Time.date(first) else { return nil }
            revoked = date
            if parts.count == 2 {
                guard let named = RevocationReason(rawValue: parts[1]) else { return nil }
                reason = named
            }
        }
        return .init(serial: fields[3], expires: expires, revoked: revoked, reason: reason, subject: fields[5])
    }

    static func time(_ date: Date) throws -> String {
        guard let text = ASN1Time.text(date) else {
            throw DCError(.invalid, "\(date) cannot be written as an X.509 time", hint: "use a date from 0 to 9999")
        }
        return text
    }

}
