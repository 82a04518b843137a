import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

@Suite("Atomic file sets", .ownThreads, .timeLimit(.minutes(3)))
struct AtomicFileSetTests {
    @Test("All files appear with their modes, and no staging file is left")
    func writesAll() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var set = AtomicFileSet(directory: directory.path)
        try set.add("a.cert.der", .bytes([1, 2, 3]), mode: 0o644)
        try set.add("a.key.der", .secret(SecretBytes([4, 5])), mode: 0o600)
        try set.commit()
        #expect(directory.contents() == ["a.cert.der", "a.key.der"])
        #expect(try directory.read("a.key.der") == [4, 5])
        var info = stat()
        stat(directory.file("a.key.der"), &info)
        #expect(info.st_mode & 0o777 == 0o600)
        stat(directory.file("a.cert.der"), &info)
        #expect(info.st_mode & 0o777 == 0o644)
    }

    @Test("An existing output refuses the whole set unless replacing")
    func existing() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        _ = try directory.write("b.cert.der", "old")
        var set = AtomicFileSet(directory: directory.path)
        try set.add("a.cert.der", .bytes([1]), mode: 0o644)
        try set.add("b.cert.der", .bytes([2]), mode: 0o644)
        #expect(throws: DCError.self) { try set.commit() }
        #expect(directory.contents() == ["b.cert.der"])
        #expect(try directory.read("b.cert.der") == Array("old".utf8))
        try set.commit(replacingExisting: true)
        #expect(try directory.read("b.cert.der") == [2])
    }

    @Test("Names that are paths or hidden are refused, and duplicates too")
    func names() throws {
        var set = AtomicFileSet(directory: "/nonexistent")
        // A combining mark after the slash or the dot makes one character of them, not one byte.
        for bad in ["../x", "a/b", "", ".hidden", "..", ".", "a/\u{301}b", ".\u{301}hidden", "..\u{301}"] {
            #expect(throws: DCError.self) { try set.add(bad, .bytes([]), mode: 0o600) }
        }
        try set.add("x", .bytes([]), mode: 0o600)
        #expect(throws: DCError.self) { try set.add("x", .bytes([]), mode: 0o600) }
    }

    @Test("Staging files of dead writers are removed; a live writer's are kept")
    func staleStaging() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // A writer that has exited: start a process and wait for it, then use its pid.
        let finished = try SpawnedProcess("/bin/true", [])
        #expect(finished.wait() == 0)
        _ = try directory.write(".x.key.der\(AtomicFileSet.stagingMarker)\(finished.pid)-abcd", "partial")
        _ = try directory.write(".y.key.der\(AtomicFileSet.stagingMarker)old-format", "partial")
        let live = ".z.key.der\(AtomicFileSet.stagingMarker)\(getpid())-abcd"
        _ = try directory.write(live, "being written")
        _ = try directory.write("keep.der", "data")
        AtomicFileSet.removeStaleStagingFiles(in: directory.path)
        #expect(directory.contents() == [live, "keep.der"])
    }
}
