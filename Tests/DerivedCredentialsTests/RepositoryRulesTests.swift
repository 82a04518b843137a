import Foundation
import TestSupport
import Testing

/// The repository stands alone: nothing in it (README, docs, code, comments, samples, scripts)
/// points at a file outside it. The design is explained in docs/ in the project's own words.
@Suite("The repository stands alone", .timeLimit(.minutes(3)))
struct RepositoryRulesTests {
    /// Text files in the repository, outside build products and fetched packages.
    static func textFiles() -> [String] {
        let suffixes = [".swift", ".md", ".sh", ".h", ".c", ".json", ".txt", ".py", ".yml", ".modulemap"]
        return Repository.files().filter { relative in
            suffixes.contains(where: relative.hasSuffix) || relative.hasPrefix("scripts/") || relative.hasPrefix(".ci/")
                || relative.hasPrefix("Samples/exec-")
        }
    }

    /// What would point outside the repository: the team's notes next to it, by their names. Put
    /// together here so that this file does not name them itself.
    static let outsideReferences = [
        [".", ".", "/", "shared"], ["DESIGN", ".md"], ["shared", "/", "seeds"], ["FACTS", ".md"], ["STYLE", ".md"],
    ].map { $0.joined() }

    @Test("No file refers to the design notes or anything else outside the repository")
    func noOutsideReferences() throws {
        let files = Self.textFiles()
        #expect(files.contains("README.md") && files.contains("docs/ARCHITECTURE.md"))
        for file in files {
            guard let text = try? Repository.text(file) else { continue }
            for needle in Self.outsideReferences {
                #expect(!text.contains(needle), "\(file) refers to \(needle), which is not in the repository")
            }
        }
    }
}
