import Foundation

/// A private (0700) directory of the test's own on a file system that keeps its files in memory
/// (a tmpfs), for the tests of a secret's runtime file, which is written nowhere else: the
/// sandbox's runtime directory lies under `TMPDIR`, on the root disk in CI.
///
/// It is made under `/dev/shm` or `/run/user/UID`, whichever `stat -f` (the oracle, not our
/// code) says is a tmpfs, and removed by ``remove()``. A machine with neither has no memory
/// directory: the tests that need one are skipped there (``available``), and the toolkit keeps
/// its secrets in the kernel keyring only.
public struct MemoryDirectory: Sendable {
    /// The directory's path.
    public let path: String

    /// The candidates, in the order tried.
    static var candidates: [String] { ["/dev/shm", "/run/user/\(getuid())"] }

    /// The first candidate that is a writable tmpfs; nil when there is none.
    static let parent: String? = candidates.first { candidate in
        access(candidate, W_OK | X_OK) == 0 && MemoryDirectory.fileSystemType(candidate) == "tmpfs"
    }

    /// Whether this machine has a tmpfs a test can make a directory in.
    public static var available: Bool { parent != nil }

    /// The file system type of the one holding `path`, as `stat -f -c %T` names it (`tmpfs`,
    /// `ext2/ext3`, `ramfs`, …); nil when stat cannot say.
    public static func fileSystemType(_ path: String) -> String? {
        guard let result = try? run("stat", ["-f", "-c", "%T", path]), result.status == 0 else { return nil }
        return result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A fresh 0700 directory in memory, named after `label`.
    public init(_ label: String) throws {
        guard let parent = Self.parent else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSLocalizedDescriptionKey: "no tmpfs on this machine"])
        }
        var template = Array("\(parent)/dc-test-\(label)-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "mkdtemp in \(parent) failed"])
        }
        path = String(cString: made)
        chmod(path, 0o700)
    }

    /// A path inside the directory.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Removes the directory and everything in it.
    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}
