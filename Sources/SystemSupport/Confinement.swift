internal import CSystemShims
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// What a child the toolkit starts for code it does not trust (an exec plug-in) may reach: the
/// file-system hierarchies it may read (and run programs from) and those it may write, enforced by
/// the kernel through Landlock (landlock(7)). Everything else of the file system is out of its
/// reach by any path: a symbolic link, a hard link, `/proc/PID/root` or `/proc/PID/cwd` of another
/// process. The child also runs with no new privileges and a seccomp filter that refuses the
/// kernel keyring, other processes' memory and their descriptors; Landlock keeps it from tracing
/// or signalling processes outside its domain, this one included.
///
/// A confinement is applied by ``ChildProcess/run(_:arguments:stdin:environment:currentDirectory:limits:confinement:)``
/// on a thread made for starting that one child, never on a thread of the caller's.
public struct Confinement: Sendable, Equatable {
    /// Hierarchies (directories, with everything below them, or single files) the child may read
    /// and execute.
    public var readable: [String]
    /// Hierarchies the child may read, write, create in and remove from.
    public var writable: [String]
    /// Hierarchies the child may never be given, even when named in ``readable`` or ``writable``: a
    /// path inside one of them, or one that holds one of them, is dropped from the grants.
    public var withheld: [String]

    /// A confinement granting `readable` and `writable` and nothing inside or around `withheld`.
    public init(readable: [String], writable: [String], withheld: [String] = []) {
        self.readable = readable
        self.writable = writable
        self.withheld = withheld
    }

    /// Where the system's programs, libraries and configuration live: what every program needs to
    /// start. `/opt` is there for toolchains installed outside `/usr`, `/sys` for the runtimes
    /// that read the processor count there. Not `/proc`: Landlock lets a confined process read
    /// another process's `/proc/PID/environ` wherever the ordinary ptrace rules do (the same user
    /// and a dumpable process, or root), so `/proc` stays closed, its own entries too. The device
    /// files a program commonly opens (`/dev/null`, `/dev/zero`, `/dev/urandom`, `/dev/random`)
    /// are added on their own terms (`/dev/null` writable).
    public static let systemDirectories = [
        "/usr", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/sys",
    ]

    /// The confinement of an exec plug-in at `executable`. Readable: the system directories; the
    /// plug-in's own directory (only the executable itself when that directory holds a withheld
    /// one, as a plug-in dropped into the home directory would); every file among `namedPaths`
    /// that exists (what the operator named in `--option`, resolved against `workingDirectory`).
    /// Writable: `temporaryDirectory`, and every directory among `namedPaths` (a CA plug-in keeps
    /// its state in the directory its operator names). Withheld, even when named: the toolkit's own
    /// directories under `directories` (the provider's configuration and state, the client's
    /// stores, the handler launchers) and the whole runtime directory.
    public static func plugIn(
        executable: String, namedPaths: [String], relativeTo workingDirectory: String, temporaryDirectory: String,
        directories: XDGDirectories = XDGDirectories()
    ) -> Confinement {
        let withheld =
            [directories.configHome, directories.stateHome, directories.dataHome].flatMap { base in
                ["dcprovision", "dcclient"].map { base + "/" + $0 }
            } + ["dc-handlers", "derived-credentials"].map { directories.dataHome + "/" + $0 }
            + [directories.runtimeDirectory].compactMap { $0 }
        // The executable as named and as its links resolve (a plug-in installed as a link to
        // where its files are); the system's resolver configuration, often a link out of /etc.
        let own = [executable, canonical(executable)].map { path in
            let directory = PathText.parent(of: path)
            return overlaps(directory, withheld) ? path : directory
        }
        let resolver = [canonical("/etc/resolv.conf")]
        let named = Set(namedPaths.flatMap { candidatePaths($0, relativeTo: workingDirectory) }).filter {
            access($0, F_OK) == 0 && !overlaps($0, withheld)
        }.sorted()
        let namedDirectories = named.filter { path in
            var info = stat()
            return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
        }
        return Confinement(
            readable: systemDirectories + Array(Set(own)).sorted() + resolver
                + named.filter { !namedDirectories.contains($0) },
            writable: [temporaryDirectory] + namedDirectories, withheld: withheld)
    }

    /// The paths an option value may name: the value itself, what follows `KEY=`, and each part
    /// between commas (`TAG=CERT,KEY`), made absolute against `workingDirectory`.
    static func candidatePaths(_ value: String, relativeTo workingDirectory: String) -> [String] {
        var candidates = [value]
        if let equals = value.firstIndex(of: "=") { candidates.append(String(value[value.index(after: equals)...])) }
        candidates += candidates.flatMap { $0.split(separator: ",").map(String.init) }
        return candidates.filter { !$0.isEmpty }.map {
            $0.hasPrefix("/") ? $0 : PathText.appending($0, to: workingDirectory)
        }
    }

    /// Whether `path`, its links resolved, is inside one of `withheld` or holds one of them.
    static func overlaps(_ path: String, _ withheld: [String]) -> Bool {
        let resolved = canonical(path)
        return withheld.map(canonical).contains { protected in
            isWithin(resolved, protected) || isWithin(protected, resolved)
        }
    }

    /// `path` with every symbolic link resolved, as far as it exists.
    static func canonical(_ path: String) -> String {
        PathText.resolvingLinks(path)
    }

    /// Whether `path` is `ancestor` or below it.
    static func isWithin(_ path: String, _ ancestor: String) -> Bool {
        path == ancestor || ancestor == "/" || path.hasPrefix(ancestor + "/")
    }

    // MARK: - The kernel's side

    /// The running kernel's Landlock ABI version, or nil when it has none (not built in, disabled
    /// at boot, or hidden by a seccomp filter), asked once per process.
    public static let landlockABI: Int32? = {
        let abi = dc_landlock_abi()
        return abi > 0 ? abi : nil
    }()

    /// Why a child cannot be confined to its paths here, or nil when it can: one line for a warning
    /// or an error.
    public static var unavailableReason: String? {
        landlockABI == nil
            ? "this kernel offers no Landlock (landlock(7)): the plug-in can read every file this user can" : nil
    }

    /// The Landlock ruleset of this confinement, as a descriptor for ``ChildProcess`` to apply on
    /// the thread that starts the child, or nil when the kernel has no Landlock (the child then
    /// gets the seccomp filter and no new privileges only). The caller closes the descriptor.
    func makeRuleset() throws -> Int32? {
        guard let abi = Self.landlockABI else { return nil }
        let rights = Rights(abi: abi)
        let ruleset = dc_landlock_create_ruleset(rights.handled, rights.scopes, abi)
        guard ruleset >= 0 else {
            throw DCError(
                .sandboxUnavailable, "cannot create a Landlock ruleset: \(String(cString: strerror(errno)))")
        }
        do {
            let grants =
                readable.map { ($0, rights.read) } + writable.map { ($0, rights.write) }
                + [("/dev/null", rights.readWriteFile), ("/dev/zero", rights.read), ("/dev/urandom", rights.read)]
                + [("/dev/random", rights.read)]
            for (path, access) in grants {
                try allow(path, access: access, rights: rights, in: ruleset)
            }
            return ruleset
        } catch {
            close(ruleset)
            throw error
        }
    }

    /// Adds one rule: `access` on the hierarchy at `path` (a file gets only the rights a file can
    /// have), unless it is inside or around a withheld place. The path is opened first and the
    /// check made on what was opened (its links resolved through the descriptor), so that a link
    /// swapped in between the check and the rule cannot carry the rule into a withheld place. A
    /// path that does not exist is skipped: there is nothing to reach there.
    func allow(_ path: String, access: UInt64, rights: Rights, in ruleset: Int32) throws {
        let fd = dc_open_path(path)
        guard fd >= 0 else { return }
        defer { close(fd) }
        guard !Self.overlaps(Self.canonical("/proc/self/fd/\(fd)"), withheld) else { return }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return }
        let allowed = info.st_mode & S_IFMT == S_IFDIR ? access : access & rights.fileRights
        guard dc_landlock_allow_beneath(ruleset, fd, allowed) == 0 else {
            throw DCError(
                .sandboxUnavailable, "cannot add a Landlock rule: \(String(cString: strerror(errno)))", subject: path)
        }
    }

    /// The Landlock rights one ABI version knows, grouped as the rules use them.
    struct Rights {
        /// Every file-system right of the ABI: what the ruleset handles (denies unless a rule allows).
        let handled: UInt64
        /// What a writable place allows: everything handled but making device files.
        let write: UInt64
        /// The rights that apply to a file rather than a directory.
        let fileRights: UInt64
        /// The scopes (ABI 6): abstract UNIX sockets and signals outside the domain.
        let scopes: UInt64
        /// Execute, read a file, list a directory.
        let read: UInt64 = 1 << 0 | 1 << 2 | 1 << 3
        /// Read and write a file, and truncate it (ABI 3) and use its ioctls (ABI 5), as `/dev/null` needs.
        let readWriteFile: UInt64

        init(abi: Int32) {
            // EXECUTE … MAKE_SYM are ABI 1; REFER is ABI 2, TRUNCATE ABI 3, IOCTL_DEV ABI 5.
            var handled: UInt64 = (1 << 13) - 1
            if abi >= 2 { handled |= 1 << 13 }
            if abi >= 3 { handled |= 1 << 14 }
            if abi >= 5 { handled |= 1 << 15 }
            self.handled = handled
            // MAKE_CHAR (1 << 6) and MAKE_BLOCK (1 << 11): a device file made in a writable
            // directory would open a device that no path rule covers.
            write = handled & ~(1 << 6 | 1 << 11)
            // EXECUTE, WRITE_FILE, READ_FILE, TRUNCATE, IOCTL_DEV.
            fileRights = (1 << 0 | 1 << 1 | 1 << 2 | 1 << 14 | 1 << 15) & handled
            readWriteFile = (1 << 1 | 1 << 2 | 1 << 14 | 1 << 15) & handled
            scopes = abi >= 6 ? (1 << 0 | 1 << 1) : 0
        }
    }
}

extension Confinement {
    /// Removes `directory`, a confined child's writable place, and everything in it, from a thread
    /// confined to that directory alone: a link the child planted there, or swapped in for one of
    /// its directories while the removal walks the tree (a process it left behind can), leads the
    /// removal nowhere else. The emptied directory itself goes last, with rmdir(2), which follows
    /// no link. (On a kernel without Landlock the walk is not confined.)
    public static func removeTree(_ directory: String) {
        try? ChildProcess.onConfinedThread(Confinement(readable: [], writable: [directory])) {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
                try? FileManager.default.removeItem(atPath: directory + "/" + name)
            }
        }
        rmdir(directory)
    }
}
