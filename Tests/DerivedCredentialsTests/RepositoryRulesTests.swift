import Foundation
import TestSupport
import Testing

/// The repository stands alone: nothing in it (README, docs, code, comments, samples, scripts)
/// points at a file outside it. The design is explained in docs/ in the project's own words.
@Suite("The repository stands alone", .ownThreads, .timeLimit(.minutes(3)))
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

    @Test("docs/SECURITY.md names only tests that exist: every suite it cites, every test title it quotes")
    func securityPromisesNameRealTests() throws {
        let security = try Repository.text("docs/SECURITY.md")
        let tests = Repository.files(under: "Tests").filter { $0.hasSuffix(".swift") }.compactMap {
            try? Repository.text($0)
        }.joined(separator: "\n")
        let suites = security.matches(of: /`([A-Z][A-Za-z]*Tests)`/).map { String($0.output.1) }
        #expect(suites.count > 20, "the page should cite the suites that hold its promises")
        for suite in Set(suites) {
            let exists = tests.contains("struct \(suite) ")
            #expect(exists, "docs/SECURITY.md cites \(suite), which is not a suite")
        }
        // A quoted title, or its start when the page shortens it with "…", is a test's display name.
        let titles = security.matches(of: /"([^"\n]{12,})"/).map { String($0.output.1) }
        #expect(titles.count > 10)
        for title in titles {
            let start = title.hasSuffix("…") ? String(title.dropLast()) : title
            let exists = tests.contains("\"" + start)
            #expect(exists, "docs/SECURITY.md quotes \"\(title)\", which no test is called")
        }
    }
}
