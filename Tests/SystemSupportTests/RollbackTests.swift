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

/// The two things a rollback must never undo: another process's lock and a revocation list that
/// already exists.
@Suite("Rollback never takes a held lock or an existing revocation list back", .ownThreads, .timeLimit(.minutes(1)))
struct RollbackLimitsTests {
    @Test(
        "Attack: a lock another process holds inside a directory the failed work made stays, with its directory; an unheld one goes"
    )
    func heldLockStays() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let made = directory.file("delegations")
        let held = made + "/other.json.lock"
        var holder: Int32 = -1
        #expect(throws: RollbackTests.Stop.self) {
            try Rollback.allOrNothing { rollback in
                rollback.keep(made + "/mine.json")
                try AtomicFileSet.ensureDirectory(made)
                try Data("mine".utf8).write(to: URL(fileURLWithPath: made + "/mine.json"))
                // Another process locks its record in the new directory meanwhile.
                holder = open(held, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                flock(holder, LOCK_EX)
                throw RollbackTests.Stop()
            }
        }
        #expect(FileManager.default.fileExists(atPath: held), "a held lock was unlinked")
        #expect(!FileManager.default.fileExists(atPath: made + "/mine.json"))
        close(holder)
        #expect(throws: RollbackTests.Stop.self) {
            try Rollback.allOrNothing { rollback in
                rollback.keep(directory.file("fresh/mine.json"))
                try AtomicFileSet.ensureDirectory(directory.file("fresh"))
                FileManager.default.createFile(atPath: directory.file("fresh/x.lock"), contents: nil)
                throw RollbackTests.Stop()
            }
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("fresh")), "an unheld lock and its directory go")
    }

    @Test("A list kept with keepIfAbsent is removed when the work made it, and never put back once it existed")
    func existingListStays() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let list = directory.file("revocations.json")
        #expect(throws: RollbackTests.Stop.self) {
            try Rollback.allOrNothing { rollback in
                rollback.keepIfAbsent(list)
                try Data("[]".utf8).write(to: URL(fileURLWithPath: list))
                throw RollbackTests.Stop()
            }
        }
        #expect(!FileManager.default.fileExists(atPath: list))
        try Data("[]".utf8).write(to: URL(fileURLWithPath: list))
        #expect(throws: RollbackTests.Stop.self) {
            try Rollback.allOrNothing { rollback in
                rollback.keepIfAbsent(list)
                // A policy command revokes meanwhile; the failing command must not undo that.
                try Data("[\"revoked\"]".utf8).write(to: URL(fileURLWithPath: list))
                throw RollbackTests.Stop()
            }
        }
        #expect(try String(contentsOfFile: list, encoding: .utf8) == "[\"revoked\"]")
    }
}
