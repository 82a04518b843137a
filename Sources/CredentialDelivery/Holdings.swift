import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// What the provider knows each managed client holds: the certificates of the last credential a
/// client confirmed installing, by serial number. Kept so that revoking certificates (a
/// terminated card: `dcprovision terminate`) can reach the clients that hold them.
///
/// One 0600 JSON file per client scheme in a 0700 directory of the provider's state, replaced
/// atomically when a newer delivery is confirmed.
public struct Holdings: Sendable {
    /// What one client holds.
    public struct Holding: Codable, Sendable, Hashable {
        /// The client's URL scheme.
        public var clientScheme: URLScheme
        /// The credential's name.
        public var credentialName: String
        /// The serial numbers (upper-case hex) of its certificates, the key history included.
        public var serials: [String]
        /// When the client confirmed it.
        public var since: Date
    }

    /// The directory holding one `<client-scheme>.json` per client.
    public let directory: String

    /// Holdings kept in `directory`; nothing is read or created until used.
    public init(directory: String) {
        self.directory = directory
    }

    /// Records that `clientScheme` now holds a credential with these certificate serials.
    public func record(
        clientScheme: URLScheme, credentialName: String, serials: [String], at now: Date = Date()
    ) throws {
        let holding = Holding(clientScheme: clientScheme, credentialName: credentialName, serials: serials, since: now)
        try RecordFile.write(holding, named: "\(clientScheme).json", in: directory, replacing: true)
    }

    /// Forgets what `clientScheme` holds (it was retired: it holds nothing any more).
    public func forget(clientScheme: URLScheme) {
        unlink(directory + "/\(clientScheme).json")
    }

    /// Every client's holding, by scheme; a file that cannot be read is skipped.
    public func all() -> [Holding] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return names.sorted().filter { $0.hasSuffix(".json") }.compactMap { name in
            FileManager.default.contents(atPath: directory + "/" + name).flatMap {
                try? decoder.decode(Holding.self, from: $0)
            }
        }
    }

    /// The clients holding a certificate with any of `serials`.
    public func holders(ofAny serials: Set<String>) -> [Holding] {
        all().filter { !serials.isDisjoint(with: $0.serials) }
    }
}
