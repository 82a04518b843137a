import Foundation

/// The checkout the tests were built from, found from this source file's path, so tests read the
/// repository's own files (docs, samples, sources, fuzz seeds) wherever it is.
public enum Repository {
    /// The package root: `Tests/TestSupport/` is two levels below it.
    public static let root: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// Directory names never walked into: build products, version control, fetched packages, and
    /// the fuzzers' generated corpora and artifacts.
    static let skipped: Set<String> = [".git", ".swiftpm", "Corpus", "Artifacts"]

    /// The files under `directory` (relative to ``root``; the whole repository when empty), as
    /// paths relative to the root, sorted. Build directories (`.build`, `.build-*`) and ``skipped``
    /// ones are left out.
    public static func files(under directory: String = "") -> [String] {
        let base = directory.isEmpty ? root : root + "/" + directory
        let prefix = directory.isEmpty ? "" : directory + "/"
        var files: [String] = []
        guard let enumerator = FileManager.default.enumerator(atPath: base) else { return [] }
        while let relative = enumerator.nextObject() as? String {
            let name = (relative as NSString).lastPathComponent
            if enumerator.fileAttributes?[.type] as? FileAttributeType == .typeDirectory {
                if skipped.contains(name) || name.hasPrefix(".build") { enumerator.skipDescendants() }
                continue
            }
            files.append(prefix + relative)
        }
        return files.sorted()
    }

    /// The text of a file of the repository, by its path relative to ``root``.
    public static func text(_ relative: String) throws -> String {
        try String(contentsOfFile: root + "/" + relative, encoding: .utf8)
    }
}
