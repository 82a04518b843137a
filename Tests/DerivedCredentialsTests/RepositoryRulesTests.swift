import Foundation
import Testing

/// The repository stands alone: nothing in it (README, docs, code, comments, samples, scripts)
/// points at a file outside it. The design is explained in docs/ in the project's own words.
@Suite("The repository stands alone", .timeLimit(.minutes(3)))
struct RepositoryRulesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// Text files in the repository, outside build products and fetched packages.
    static func textFiles() -> [String] {
        let skipped = ["/.build", "/.git/", "/.swiftpm", "/Corpus/", "/Artifacts/"]
        let suffixes = [".swift", ".md", ".sh", ".h", ".c", ".json", ".txt", ".py", ".yml", ".modulemap"]
        var files: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            let path = "/" + relative
            guard !skipped.contains(where: { path.contains($0) || path.hasPrefix($0) }) else { continue }
            let name = (relative as NSString).lastPathComponent
            if suffixes.contains(where: name.hasSuffix) || relative.hasPrefix("scripts/") || relative.hasPrefix(".ci/")
                || relative.hasPrefix("Samples/exec-")
            {
                files.append(relative)
            }
        }
        return files.sorted()
    }

    @Test("No file refers to the design notes or anything else outside the repository")
    func noOutsideReferences() throws {
        let files = Self.textFiles()
        #expect(files.contains("README.md") && files.contains("docs/ARCHITECTURE.md"))
        for file in files where file != "Tests/DerivedCredentialsTests/RepositoryRulesTests.swift" {
            guard let text = try? String(contentsOfFile: Self.root + "/" + file, encoding: .utf8) else { continue }
            for needle in ["../shared", "DESIGN.md", "shared/seeds", "FACTS.md", "STYLE.md"] {
                #expect(!text.contains(needle), "\(file) refers to \(needle), which is not in the repository")
            }
        }
    }
}
