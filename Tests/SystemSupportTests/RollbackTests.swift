import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

/// `Rollback`: what a failed command kept is put back exactly, and what it made is gone.
@Suite("Rollback puts back what a failed command changed", .ownThreads, .timeLimit(.minutes(1)))
struct RollbackTests {
    struct Stop: Error {}

    @Test(
        "A failure puts back a replaced file's bytes and mode, a link, and removes what appeared with the directories made for it; success keeps everything"
    )
    func putsBack() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let kept = directory.file("kept.json")
        try Data("old".utf8).write(to: URL(fileURLWithPath: kept))
        chmod(kept, 0o600)
        symlink("kept.json", directory.file("link"))
        let new = directory.file("a/b/new.json")
        #expect(throws: Stop.self) {
            try Rollback.allOrNothing { rollback in
                for path in [kept, directory.file("link"), new] { rollback.keep(path) }
                var files = AtomicFileSet(directory: directory.path)
                try files.add("kept.json", .bytes(Array("new".utf8)), mode: 0o644)
                try files.commit(replacingExisting: true)
                unlink(directory.file("link"))
                symlink("elsewhere", directory.file("link"))
                try AtomicFileSet.ensureDirectory(directory.file("a/b"))
                try Data("made".utf8).write(to: URL(fileURLWithPath: new))
                throw Stop()
            }
        }
        #expect(try String(contentsOfFile: kept, encoding: .utf8) == "old")
        var info = stat()
        stat(kept, &info)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: directory.file("link")) == "kept.json")
        #expect(directory.contents() == ["kept.json", "link"], "a/b made for the new file goes with it")

        try Rollback.allOrNothing { rollback in
            rollback.keep(new)
            try AtomicFileSet.ensureDirectory(directory.file("a/b"))
            try Data("made".utf8).write(to: URL(fileURLWithPath: new))
        }
        #expect(FileManager.default.fileExists(atPath: new))
    }

    @Test(
        "A kept tree loses what appeared in it and gets back what changed, but for the paths excepted and the lock files"
    )
    func tree() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let state = directory.file("state")
        try FileManager.default.createDirectory(atPath: state + "/old", withIntermediateDirectories: true)
        try Data("1".utf8).write(to: URL(fileURLWithPath: state + "/old/record"))
        #expect(throws: Stop.self) {
            try Rollback.allOrNothing { rollback in
                rollback.keepTree(state, except: [state + "/number"])
                try Data("2".utf8).write(to: URL(fileURLWithPath: state + "/old/record"))
                try Data("7".utf8).write(to: URL(fileURLWithPath: state + "/number"))
                try FileManager.default.createDirectory(atPath: state + "/new", withIntermediateDirectories: true)
                try Data("x".utf8).write(to: URL(fileURLWithPath: state + "/new/file"))
                FileManager.default.createFile(atPath: state + "/record.lock", contents: nil)
                throw Stop()
            }
        }
        #expect(try String(contentsOfFile: state + "/old/record", encoding: .utf8) == "1")
        #expect(
            Set(try FileManager.default.subpathsOfDirectory(atPath: state)) == [
                "old", "old/record", "number", "record.lock",
            ])
    }
}
