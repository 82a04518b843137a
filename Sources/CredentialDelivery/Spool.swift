import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The client's spool: a 0700 directory where the provider drops sealed payloads as 0600 files
/// named `<request>.cms` (and auth-token delegations as `<id>.dlg`, ``Kind``), written atomically (`AtomicFileSet`: `O_EXCL|O_NOFOLLOW`, fsync,
/// publish, fsync the directory). The client reads one only if it is a regular file (not a
/// symlink), owned by the client's user, readable by nobody else, under the size cap, and its
/// SHA-256 is the digest in the delivery URL.
public struct Spool: Sendable {
    /// The spool directory; created (0700) on the first write.
    public let directory: String
    /// The largest sealed payload written or read: 8 MiB.
    public static let maximumFileSize = 8 << 20

    /// What a spool file holds, which names its extension and caps its size.
    public enum Kind: Sendable {
        /// A sealed delivery payload, `<request>.cms`, at most ``Spool/maximumFileSize``.
        case sealedPayload
        /// An auth-token delegation (a compact JWS), `<id>.dlg`, at most 4 KiB.
        case delegation
        /// An identity JWT answering the client's request, `<request>.jwt`, at most 8 KiB.
        case identityToken
        /// A sealed delivery payload the client kept out as stale, `<request>.stale`, set aside
        /// (``Spool/setAside(request:)``) so that the user can still choose it by hand.
        case staleDelivery

        /// The file name's extension.
        public var fileExtension: String {
            switch self {
            case .sealedPayload: "cms"
            case .delegation: "dlg"
            case .identityToken: "jwt"
            case .staleDelivery: "stale"
            }
        }

        /// The largest such file written or read.
        public var maximumSize: Int {
            switch self {
            case .sealedPayload, .staleDelivery: Spool.maximumFileSize
            case .delegation: 4096
            case .identityToken: 8192
            }
        }
    }

    /// The spool in `directory`; nothing touches the disk until it is used.
    public init(directory: String) {
        self.directory = directory
    }

    /// Where the file for `request` is (or would be): `<directory>/<request>.cms` for a sealed
    /// payload, `<directory>/<request>.dlg` for a delegation.
    public func path(request: RequestID, kind: Kind = .sealedPayload) -> String {
        PathText.appending("\(request).\(kind.fileExtension)", to: directory)
    }

    /// Writes a sealed payload (or another `kind` of file); returns its SHA-256 as hex.
    public func write(_ sealed: [UInt8], request: RequestID, kind: Kind = .sealedPayload) throws -> String {
        guard sealed.count <= kind.maximumSize else {
            throw DCError(
                .inputTooLarge, "the spool file is larger than the spool's limit",
                hint: "send fewer escrow history pairs")
        }
        try AtomicFileSet.ensureDirectory(directory)
        var files = AtomicFileSet(directory: directory)
        try files.add("\(request).\(kind.fileExtension)", .bytes(sealed), mode: 0o600)
        try files.commit()
        return Digests.hex(Digests.sha256(sealed))
    }

    /// Reads and checks a spool file against the digest from the URL; with no digest (an answer to
    /// the client's own request, which no URL names), only the file's type, owner and mode.
    public func read(request: RequestID, digest: String?, kind: Kind = .sealedPayload) throws -> [UInt8] {
        let path = path(request: request, kind: kind)
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            switch errno {
            case ENOENT:
                throw DCError(
                    .notReady, "no spool file for this request (already processed, or never written)", subject: path)
            case ELOOP:
                throw DCError(
                    .invalid, "the spool file is a symbolic link", subject: path,
                    hint: "nothing was installed; remove it and ask the provider to send again")
            default:
                throw DCError(
                    .ioError, "cannot open the spool file: \(String(cString: strerror(errno)))", subject: path)
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw DCError(.ioError, "cannot stat the spool file", subject: path) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw DCError(
                .invalid, "the spool file is not a regular file", subject: path,
                hint: "nothing was installed; remove it and ask the provider to send again")
        }
        guard info.st_uid == geteuid() else {
            throw DCError(
                .invalid, "the spool file belongs to another user", subject: path,
                hint: "nothing was installed; run the provider and the client as the same user")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw DCError(
                .invalid,
                "the spool file is readable or writable by others (mode \(String(info.st_mode & 0o777, radix: 8)))",
                subject: path, hint: "nothing was installed; remove it and ask the provider to send again")
        }
        guard Int(info.st_size) <= kind.maximumSize else {
            throw DCError(.inputTooLarge, "the spool file is too large", subject: path)
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes {
                Glibc.read(fd, $0.baseAddress?.advanced(by: filled), $0.count - filled)
            }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw DCError(.ioError, "cannot read the spool file", subject: path) }
            if count == 0 { break }
            filled += count
        }
        guard filled == Int(info.st_size) else {
            throw DCError(
                .invalid, "the spool file changed while it was read", subject: path,
                hint: "nothing was installed; handle the same URL again")
        }
        let sealed = Array(bytes.prefix(filled))
        guard let digest else { return sealed }
        guard Digests.constantTimeEqual(Array(Digests.hex(Digests.sha256(sealed)).utf8), Array(digest.utf8)) else {
            throw DCError(
                .refusedMessage, "the spool file does not match the digest in the URL (altered or replaced)",
                subject: path, hint: "nothing was installed; ask the provider to send again")
        }
        return sealed
    }

    /// Renames the sealed payload of `request` to its ``Kind/staleDelivery`` name, dates it now
    /// (its age is how long it has been set aside) and syncs the directory. Nothing to rename is
    /// no failure: it was set aside already.
    public func setAside(request: RequestID) throws {
        let from = path(request: request)
        let to = path(request: request, kind: .staleDelivery)
        guard rename(from, to) == 0 || errno == ENOENT else {
            throw DCError(
                .ioError, "cannot set the stale delivery aside: \(String(cString: strerror(errno)))", subject: from)
        }
        _ = utimensat(AT_FDCWD, to, nil, AT_SYMLINK_NOFOLLOW)
        try AtomicFileSet.syncDirectory(directory)
    }

    /// Deletes the file for `request`, if any; never fails.
    public func remove(request: RequestID, kind: Kind = .sealedPayload) { unlink(path(request: request, kind: kind)) }
}
