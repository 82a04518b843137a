import FoundationEssentials
import SystemSupport

/// The provider's own records (the request ledger, the holdings): one file per record, compact
/// JSON with sorted keys and ISO 8601 dates, readable by the user only, written all-or-nothing.
enum RecordFile {
    /// Writes `value` to `directory/name` (made if missing), replacing an existing file only when
    /// `replacing`. Throws the `AtomicFileSet` errors.
    static func write<T: Encodable>(_ value: T, named name: String, in directory: String, replacing: Bool) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        try AtomicFileSet.ensureDirectory(directory)
        var files = AtomicFileSet(directory: directory)
        try files.add(name, .bytes(Array(try encoder.encode(value))), mode: 0o600)
        try files.commit(replacingExisting: replacing)
    }
}
