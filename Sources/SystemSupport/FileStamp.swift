import Glibc

/// What `stat` says of a file that changes when it is replaced or rewritten: its identity (device
/// and inode: a file replaced by renaming has a new inode), its size, and its last modification
/// and status change. Two stamps of one path differ when the file was changed in between; a
/// reader that keeps the stamp of what it read reads again only then.
public struct FileStamp: Sendable, Equatable {
    /// The device the file is on (`st_dev`).
    public var device: UInt64
    /// The file's inode number (`st_ino`).
    public var inode: UInt64
    /// The file's size in bytes (`st_size`).
    public var size: Int64
    /// The last modification (`st_mtim`).
    public var modified: timespec
    /// The last status change (`st_ctim`): a write, a rename onto it, a change of mode or owner.
    public var changed: timespec

    /// The stamp of the file at `path` now, following symbolic links; nil when it cannot be had
    /// (no such file, no permission).
    public init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    /// Stamps are equal when every field is, times to the nanosecond.
    public static func == (lhs: FileStamp, rhs: FileStamp) -> Bool {
        lhs.device == rhs.device && lhs.inode == rhs.inode && lhs.size == rhs.size
            && lhs.modified.tv_sec == rhs.modified.tv_sec && lhs.modified.tv_nsec == rhs.modified.tv_nsec
            && lhs.changed.tv_sec == rhs.changed.tv_sec && lhs.changed.tv_nsec == rhs.changed.tv_nsec
    }
}
