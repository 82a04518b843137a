import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// What the verifier must refuse although it is signed and unexpired: revoked issuing keys,
/// revoked delegations and retired containers. The provider writes it as `revocations.json`.
///
/// ```json
/// {"v":1,"issued":1760000000,"revokedIssuerKeys":["<kid>"],"revokedDelegations":["<jti>"],
///  "retiredContainers":[{"app":"<app id>","ctr":"<container id>"}]}
/// ```
///
/// ``init(json:)`` and ``load(from:)`` read it strictly: every member required, no other, no
/// duplicate member, strings only in the arrays. ``json()`` writes it canonically (arrays sorted),
/// and ``write(to:)`` replaces the file atomically, so a verifier that reloads it never sees half
/// a list. The Codable conformance writes the same shape.
public struct RevocationList: Sendable, Equatable, Codable {
    /// One app's container, retired: every delegation for it is refused.
    public struct RetiredContainer: Sendable, Hashable, Codable, Comparable {
        /// The app's id (`app`).
        public var appID: String
        /// The container's id (`ctr`).
        public var containerID: String

        /// The container `containerID` of the app `appID`.
        public init(appID: String, containerID: String) {
            self.appID = appID
            self.containerID = containerID
        }

        enum CodingKeys: String, CodingKey {
            case appID = "app"
            case containerID = "ctr"
        }

        /// Ordered by app id, then container id (the order ``RevocationList/json()`` writes).
        public static func < (lhs: RetiredContainer, rhs: RetiredContainer) -> Bool {
            (lhs.appID, lhs.containerID) < (rhs.appID, rhs.containerID)
        }
    }

    /// The only format version.
    public static let version = 1
    /// The largest file ``load(from:)`` reads: 16 MiB.
    public static let maximumFileSize = 16 << 20

    /// When the provider wrote the list, in seconds since 1970.
    public var issued: Int64
    /// Key ids (RFC 7638 thumbprints) of issuing keys whose delegations are all refused.
    public var revokedIssuerKeys: Set<String>
    /// Ids (`jti`) of delegations that are refused.
    public var revokedDelegations: Set<String>
    /// Containers whose delegations are all refused.
    public var retiredContainers: Set<RetiredContainer>

    /// A list issued at `issued` (seconds since 1970) revoking what is given.
    public init(
        issued: Int64 = 0, revokedIssuerKeys: Set<String> = [], revokedDelegations: Set<String> = [],
        retiredContainers: Set<RetiredContainer> = []
    ) {
        self.issued = issued
        self.revokedIssuerKeys = revokedIssuerKeys
        self.revokedDelegations = revokedDelegations
        self.retiredContainers = retiredContainers
    }

    /// A list that revokes nothing.
    public static let empty = RevocationList()

    /// Whether app `appID`'s container `containerID` is retired.
    public func isRetired(appID: String, containerID: String) -> Bool {
        !retiredContainers.isEmpty
            && retiredContainers.contains(RetiredContainer(appID: appID, containerID: containerID))
    }

    /// Reads the list strictly from JSON. Throws `DCError.Code.invalid` naming the first rule broken.
    public init(json: [UInt8]) throws {
        do throws(FormatError) {
            let fields = try JSONFields(
                StrictJSON.parse(json), required: RevocationList.members, what: "the revocation list")
            guard try fields.integer("v") == Int64(RevocationList.version) else {
                throw FormatError("an unknown revocation list version")
            }
            try self.init(fields: fields)
        } catch {
            throw DCError(.invalid, "not a valid revocation list: \(error.description)")
        }
    }

    /// The members of the unsigned list, every one required.
    static let members: Set<String> = ["v", "issued", "revokedIssuerKeys", "revokedDelegations", "retiredContainers"]

    /// Reads `issued` and the three arrays from `fields` strictly (the caller checked the members
    /// and the version): the one reading of a list's contents, for the unsigned file and the
    /// payload of a ``SignedTrustList`` alike.
    package init(fields: JSONFields) throws(FormatError) {
        func strings(_ name: String) throws(FormatError) -> Set<String> {
            var result = Set<String>()
            for element in try fields.array(name) {
                guard case .string(let text) = element, !text.isEmpty else {
                    throw FormatError("\"\(name)\" holds something other than a non-empty string")
                }
                result.insert(text)
            }
            return result
        }
        var containers = Set<RetiredContainer>()
        for element in try fields.array("retiredContainers") {
            let container = try JSONFields(element, required: ["app", "ctr"], what: "a retired container")
            containers.insert(
                RetiredContainer(appID: try container.string("app"), containerID: try container.string("ctr")))
        }
        self.init(
            issued: try fields.integer("issued"), revokedIssuerKeys: try strings("revokedIssuerKeys"),
            revokedDelegations: try strings("revokedDelegations"), retiredContainers: containers)
    }

    /// Reads and checks the list at `path` (at most ``maximumFileSize`` bytes).
    public static func load(from path: String) throws -> RevocationList {
        do {
            return try RevocationList(json: try TrustFile.contents(path, maximumSize: maximumFileSize))
        } catch var error as DCError {
            error.subject = error.subject ?? path
            throw error
        }
    }

    /// The list as canonical JSON: members in the documented order, arrays sorted, no white space.
    public func json() -> [UInt8] {
        let text = JSONText.object(
            [("v", String(RevocationList.version)), ("issued", String(issued))] + contentMembers())
        return Array((text + "\n").utf8)
    }

    /// The three arrays as JSON members, sorted: what the unsigned file and a signed list's payload share.
    func contentMembers() -> [(String, String)] {
        let containers = retiredContainers.sorted().map {
            JSONText.object([("app", JSONText.string($0.appID)), ("ctr", JSONText.string($0.containerID))])
        }
        return [
            ("revokedIssuerKeys", JSONText.array(revokedIssuerKeys.sorted().map(JSONText.string))),
            ("revokedDelegations", JSONText.array(revokedDelegations.sorted().map(JSONText.string))),
            ("retiredContainers", JSONText.array(containers)),
        ]
    }

    /// Replaces the file at `path` with ``json()`` atomically (mode 0644): a reader sees the old
    /// list or the new one, never a mixture.
    public func write(to path: String) throws {
        try TrustFile.replace(path, with: json())
    }

    enum CodingKeys: String, CodingKey {
        case version = "v"
        case issued, revokedIssuerKeys, revokedDelegations, retiredContainers
    }

    /// Decodes the documented shape; refuses another version with `DecodingError.dataCorrupted`.
    /// (``init(json:)`` is stricter: it also refuses unknown and duplicate members.)
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard try container.decode(Int.self, forKey: .version) == RevocationList.version else {
            throw DecodingError.dataCorruptedError(
                forKey: .version, in: container, debugDescription: "an unknown revocation list version")
        }
        self.init(
            issued: try container.decode(Int64.self, forKey: .issued),
            revokedIssuerKeys: try container.decode(Set<String>.self, forKey: .revokedIssuerKeys),
            revokedDelegations: try container.decode(Set<String>.self, forKey: .revokedDelegations),
            retiredContainers: try container.decode(Set<RetiredContainer>.self, forKey: .retiredContainers))
    }

    /// Encodes the documented shape, arrays sorted.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(RevocationList.version, forKey: .version)
        try container.encode(issued, forKey: .issued)
        try container.encode(revokedIssuerKeys.sorted(), forKey: .revokedIssuerKeys)
        try container.encode(revokedDelegations.sorted(), forKey: .revokedDelegations)
        try container.encode(retiredContainers.sorted(), forKey: .retiredContainers)
    }
}

/// Reading and replacing the verifier's trust files.
enum TrustFile {
    /// The bytes of the regular file at `path`, refusing one over `maximumSize` and anything that
    /// is not a regular file (opened without blocking, so a FIFO planted there cannot hang a reader).
    static func contents(_ path: String, maximumSize: Int) throws -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw fileError(errno, path, "cannot open") }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw DCError(.malformedInput, "not a regular file", subject: path)
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw fileError(errno, path, "cannot read")
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= maximumSize else {
                throw DCError(.inputTooLarge, "larger than \(maximumSize) bytes", subject: path)
            }
        }
    }

    /// Replaces `path` with `bytes` atomically, mode 0644.
    static func replace(_ path: String, with bytes: [UInt8]) throws {
        let url = URL(fileURLWithPath: path)
        var files = AtomicFileSet(directory: url.deletingLastPathComponent().path)
        try files.add(url.lastPathComponent, .bytes(bytes), mode: 0o644)
        try files.commit(replacingExisting: true)
    }

    static func fileError(_ number: Int32, _ path: String, _ what: String) -> DCError {
        let reason = String(cString: strerror(number))
        switch number {
        case ENOENT, ENOTDIR: return DCError(.fileNotFound, "\(what): \(reason)", subject: path)
        case EACCES, EPERM: return DCError(.permissionDenied, "\(what): \(reason)", subject: path)
        default: return DCError(.ioError, "\(what): \(reason)", subject: path)
        }
    }
}
