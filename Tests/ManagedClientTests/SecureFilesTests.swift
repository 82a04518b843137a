import ClientWorld
import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

@testable import ManagedClient

/// A client set up and unlocked in a temporary directory, with its runtime directory there too.
struct SecureFilesWorld {
    let dir: TemporaryDirectory
    let client: ManagedClient
    let passphrase = SecretBytes(Array("client passphrase".utf8))
    var files: SecureFiles { client.secureFiles }
    var directory: String { client.secureFiles.directory }

    /// The provider and client of a ``World``: paired, so the client is ready and authorized.
    let world: World

    /// With `file`, a secure file named `file` holding it is written first.
    init(file: [UInt8]? = nil) throws {
        world = try World()
        dir = world.dir
        client = world.client
        if let file { try client.secureFiles.write(file, to: "file") }
    }

    /// The on-disk files (staging files included), sorted.
    func entries() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted() }

    /// Writes `content` as `name`, and returns the one on-disk file and its bytes.
    func written(_ content: [UInt8], as name: String) throws -> (path: String, bytes: [UInt8]) {
        try files.write(content, to: name)
        let path = try onlyFile()
        return (path, try contents(path))
    }

    /// The one on-disk file that is not a staging file.
    func onlyFile() throws -> String {
        let names = entries().filter { !$0.hasPrefix(".") }
        try #require(names.count == 1, "\(names)")
        return directory + "/" + names[0]
    }
}

/// Reads a file whole.
private func contents(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) }

/// Replaces a file's bytes in place.
private func overwrite(_ path: String, _ bytes: [UInt8]) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

/// The unlocked store key (32 bytes), written to a file for the Python oracle.
private func unlockedKeyFile(_ world: SecureFilesWorld) throws -> String {
    try world.dir.write("store-key", try world.client.storeKey().withUnsafeBytes { Array($0) })
}

/// Bytes that differ from one offset to the next, so a moved chunk shows.
private func pattern(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed) &+ $0 >> 8) }
}

/// The header and the chunks (each with its length prefix) of an on-disk secure file.
private func split(_ bytes: [UInt8]) throws -> (header: [UInt8], chunks: [[UInt8]]) {
    let header = Array(bytes.prefix(41))
    var chunks: [[UInt8]] = []
    var offset = 41
    while offset < bytes.count {
        try #require(offset + 4 <= bytes.count)
        let length = bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
        chunks.append(Array(bytes[offset..<(offset + 4 + length)]))
        offset += 4 + length
    }
    return (header, chunks)
}

@Suite("SecureFiles: encrypted files of managed apps", .ownThreads, .timeLimit(.minutes(3)))
struct SecureFilesTests {
    @Test("round trip, byte for byte", arguments: [0, 1, 1000, 65536, 65537, 200 * 1024])
    func roundTrip(size: Int) async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let content = pattern(size)
        try world.files.write(content, to: "report.txt")
        #expect(try world.files.read("report.txt") == SecretBytes(content))
        var pieces: [Int] = []
        var streamed: [UInt8] = []
        try world.files.read("report.txt") {
            pieces.append($0.count)
            streamed += $0
        }
        #expect(streamed == content)
        #expect(pieces.allSatisfy { $0 <= SecureFiles.chunkSize })
        #expect(pieces.count == (size + SecureFiles.chunkSize - 1) / SecureFiles.chunkSize)
    }

    @Test("streamed from a closure in odd pieces, an async sequence and a descriptor")
    func streamedWrites() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let content = pattern(200 * 1024, seed: 3)
        try write(content, to: "closure", in: world.files, pieces: 7777)
        #expect(try world.files.read("closure") == SecretBytes(content))

        let stream = AsyncStream<[UInt8]> { continuation in
            for start in stride(from: 0, to: content.count, by: 50_000) {
                continuation.yield(Array(content[start..<min(start + 50_000, content.count)]))
            }
            continuation.finish()
        }
        try await world.files.write(to: "async", from: stream)
        #expect(try world.files.read("async") == SecretBytes(content))

        let input = try world.dir.write("input", content)
        let fd = open(input, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        try world.files.write(to: "descriptor", fromDescriptor: fd)
        #expect(try world.files.read("descriptor") == SecretBytes(content))
    }

    @Test("list, rename, remove, replace")
    func manage() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        #expect(try world.files.list() == [])
        try world.files.write(Array("one".utf8), to: "b file")
        try world.files.write(pattern(70_000), to: "a file")
        try world.files.write([], to: "empty")
        #expect(try world.files.list() == ["a file", "b file", "empty"])

        try world.files.rename("a file", to: "z file")
        #expect(try world.files.list() == ["b file", "empty", "z file"])
        #expect(try world.files.read("z file") == SecretBytes(pattern(70_000)))
        #expect(await thrownCode { _ = try world.files.read("a file") } == .fileNotFound)
        #expect(await thrownCode { try world.files.rename("b file", to: "z file") } == .outputExists)

        try world.files.write(Array("two".utf8), to: "b file")
        #expect(try world.files.read("b file") == SecretBytes(Array("two".utf8)))

        try world.files.remove("empty")
        #expect(try world.files.list() == ["b file", "z file"])
        #expect(await thrownCode { try world.files.remove("empty") } == .fileNotFound)
        #expect(world.entries().count == 2)
    }

    @Test(
        "names are checked (bytes, not characters: a slash or a leading dot with a combining mark is still one)",
        arguments: ["", "a/b", ".hidden", "tab\there", "nul\u{0}", "del\u{7F}", "c1\u{85}", "a/\u{301}b", ".\u{301}x"])
    func badNames(name: String) async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        #expect(await thrownCode { try world.files.write([1], to: name) } == .usage)
        #expect(await thrownCode { _ = try world.files.read(name) } == .usage)
        #expect(await thrownCode { try SecureFiles.validate(name: String(repeating: "é", count: 128)) } == .usage)
        try SecureFiles.validate(name: String(repeating: "a", count: 255))
        try SecureFiles.validate(name: "rapport été.pdf")
    }

    @Test("names never on disk in the clear; 0700 directory, 0600 files")
    func namesHidden() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let names = ["quarterly-secret-report.pdf", "patient records", "ÉTÉ-2026"]
        for name in names { try world.files.write(pattern(100_000), to: name) }
        var info = stat()
        try #require(stat(world.directory, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o700)
        for entry in world.entries() {
            #expect(!entry.hasPrefix("."), "a staging file was left: \(entry)")
            #expect(entry.count == 64 && entry.allSatisfy(\.isHexDigit))
            try #require(stat(world.directory + "/" + entry, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)
            let bytes = try contents(world.directory + "/" + entry)
            for name in names {
                #expect(!entry.contains(name))
                #expect(!Self.contains(bytes, Array(name.utf8)), "\(name) in the clear")
            }
        }
        #expect(try world.files.list() == names.sorted())
    }

    @Test("a flipped byte anywhere is refused")
    func flippedByte() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let (path, original) = try world.written(pattern(140_000), as: "file")
        for position in [0, 4, 5, 36, 37, 40, 41, 44, 60, 41 + 4 + 4 + 16 + 2, original.count / 2, original.count - 1] {
            var bytes = original
            bytes[position] ^= 0x01
            try overwrite(path, bytes)
            #expect(await thrownCode { _ = try world.files.read("file") } == .invalid, "byte \(position)")
            #expect(await thrownCode { _ = try world.files.list() } == .invalid, "byte \(position)")
        }
        try overwrite(path, original)
        #expect(try world.files.read("file") == SecretBytes(pattern(140_000)))
    }

    @Test("a truncated or extended file is refused")
    func truncated() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let (path, original) = try world.written(pattern(140_000), as: "file")
        let (header, chunks) = try split(original)
        try #require(chunks.count == 4)
        let cuts: [[UInt8]] = [
            Array(original.dropLast()), Array(original.prefix(20)), header, header + chunks[0],
            header + chunks[0] + chunks[1], header + chunks[0] + chunks[1] + chunks[2],
            original + chunks[3], original + [0, 0, 0, 0],
        ]
        for (index, cut) in cuts.enumerated() {
            try overwrite(path, cut)
            #expect(await thrownCode { _ = try world.files.read("file") } == .invalid, "cut \(index)")
        }
    }

    @Test("chunks reordered, dropped or taken from another file are refused")
    func reordered() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let (path, original) = try world.written(pattern(200 * 1024), as: "file")
        let (header, chunks) = try split(original)
        try #require(chunks.count == 5)
        let edits: [[UInt8]] = [
            header + chunks[0] + chunks[2] + chunks[1] + chunks[3] + chunks[4],
            header + chunks[0] + chunks[1] + chunks[3] + chunks[4],
            header + chunks[0] + chunks[1] + chunks[2] + chunks[4] + chunks[3],
            header + chunks[1] + chunks[0] + chunks[2] + chunks[3] + chunks[4],
        ]
        for (index, edit) in edits.enumerated() {
            try overwrite(path, edit)
            #expect(await thrownCode { _ = try world.files.read("file") } == .invalid, "edit \(index)")
        }
        // The same content written again has its own salt: its chunks do not fit the first file.
        try overwrite(path, header + chunks.joined())
        try world.files.write(pattern(200 * 1024), to: "other")
        let other = try #require(world.entries().first { $0 != (path as NSString).lastPathComponent })
        let (_, otherChunks) = try split(try contents(world.directory + "/" + other))
        try overwrite(path, header + chunks[0] + otherChunks[1] + chunks[2] + chunks[3] + chunks[4])
        #expect(await thrownCode { _ = try world.files.read("file") } == .invalid)
    }

    @Test("two files' contents swapped on disk are refused")
    func swapped() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        try world.files.write(Array("alpha".utf8), to: "alpha")
        let first = try world.onlyFile()
        try world.files.write(Array("beta".utf8), to: "beta")
        let second = try #require(world.entries().map { world.directory + "/" + $0 }.first { $0 != first })
        let (a, b) = (try contents(first), try contents(second))
        try overwrite(first, b)
        try overwrite(second, a)
        #expect(await thrownCode { _ = try world.files.read("alpha") } == .invalid)
        #expect(await thrownCode { _ = try world.files.read("beta") } == .invalid)
        #expect(await thrownCode { _ = try world.files.list() } == .invalid)
        // A copy under the other's name is refused too.
        try overwrite(second, a)
        try overwrite(first, a)
        #expect(await thrownCode { _ = try world.files.read("beta") } == .invalid)
        #expect(try world.files.read("alpha") == SecretBytes(Array("alpha".utf8)))
    }

    @Test("locked: every operation refused as service unavailable")
    func locked() async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        try world.files.write(Array("kept".utf8), to: "file")
        try world.client.lock()
        #expect(await thrownCode { try world.files.write([1], to: "file") } == .serviceUnavailable)
        #expect(await thrownCode { _ = try world.files.read("file") } == .serviceUnavailable)
        #expect(await thrownCode { _ = try world.files.list() } == .serviceUnavailable)
        #expect(await thrownCode { try world.files.rename("file", to: "other") } == .serviceUnavailable)
        #expect(await thrownCode { try world.files.remove("file") } == .serviceUnavailable)
        #expect(DCError.Code.serviceUnavailable.category.exitStatus == 69)
        try world.client.unlock(passphrase: world.passphrase)
        #expect(try world.files.read("file") == SecretBytes(Array("kept".utf8)))
    }

    @Test("locked between chunks: a write stops leaving the old file and no staging file; a read stops")
    func lockedMidWrite() async throws {
        let old = pattern(100_000, seed: 1)
        let world = try SecureFilesWorld(file: old)
        defer { world.dir.remove() }
        var calls = 0
        let error = await thrownCode {
            try world.files.write(to: "file") {
                calls += 1
                if calls == 3 { try world.client.lock() }
                return calls <= 5 ? pattern(SecureFiles.chunkSize, seed: 9) : nil
            }
        }
        #expect(error == .serviceUnavailable)
        #expect(calls == 3)
        #expect(world.entries().count == 1, "\(world.entries())")
        try world.client.unlock(passphrase: world.passphrase)
        #expect(try world.files.read("file") == SecretBytes(old))

        // A read stops at the next chunk too.
        var seen = 0
        let stopped = await thrownCode {
            try world.files.read("file") { _ in
                seen += 1
                try world.client.lock()
            }
        }
        #expect(stopped == .serviceUnavailable)
        #expect(seen == 1)
    }

    @Test(
        "unauthorized mid-stream (before the app even acknowledges): a write stops at the next chunk, the old file kept"
    )
    func unauthorizedMidStream() async throws {
        let old = pattern(100_000, seed: 1)
        let world = try SecureFilesWorld(file: old)
        defer { world.dir.remove() }
        var policy = try #require(try world.client.currentPolicy())
        policy.sequence += 1
        policy.state = .unauthorized
        let url = try world.world.policyURL(policy)
        var calls = 0
        let error = await thrownCode {
            try world.files.write(to: "file") {
                calls += 1
                if calls == 3 { _ = try world.client.handlePolicy(url) }
                return calls <= 60 ? pattern(SecureFiles.chunkSize, seed: 9) : nil
            }
        }
        #expect(error == .notAuthorized)
        #expect((3...4).contains(calls), "\(calls) chunks")
        #expect(world.entries().count == 1, "\(world.entries())")
    }

    @Test(
        "the format, checked both ways by Python's AES-GCM: our files open there, its files open here",
        arguments: [0, 1, 65536, 65537, 3 * 65536 + 5, 40 * 65536 + 123])
    func pythonOracle(size: Int) async throws {
        let world = try SecureFilesWorld()
        defer { world.dir.remove() }
        let oracle = Repository.root + "/Tests/ManagedClientTests/secure_file_oracle.py"
        let keyFile = try unlockedKeyFile(world)
        // Written in odd pieces, so chunks are formed across the pieces' edges.
        let content = pattern(size, seed: 6)
        try write(content, to: "ours", in: world.files, pieces: 50_001)
        let opened = try runChecked("python3", [oracle, "open", keyFile, try world.onlyFile(), "ours"])
        #expect(String(decoding: opened.stdout, as: UTF8.self) == Digests.hex(Digests.sha256(content)) + "\n")
        // And from a descriptor, read straight into the chunks (past a batch of 16 at the largest).
        let input = try world.dir.write("input", content)
        let fd = open(input, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        try world.files.remove("ours")
        try world.files.write(to: "ours", fromDescriptor: fd)
        let fromDescriptor = try runChecked("python3", [oracle, "open", keyFile, try world.onlyFile(), "ours"])
        #expect(fromDescriptor.stdout == opened.stdout)

        let sealed = try runChecked("python3", [oracle, "seal", keyFile, world.directory, "theirs", "\(size)"])
        let theirs = try world.files.read("theirs")
        #expect(
            String(decoding: sealed.stdout, as: UTF8.self) == Digests.hex(theirs.withUnsafeBytes { Digests.sha256($0) })
                + "\n")
        #expect(theirs.count == size)
        #expect(try world.files.list() == ["ours", "theirs"])
    }

    @Test("an interrupted write leaves the old file readable and no staging file")
    func interrupted() async throws {
        let old = pattern(150_000, seed: 2)
        let world = try SecureFilesWorld(file: old)
        defer { world.dir.remove() }
        struct Interrupted: Error {}
        var calls = 0
        #expect(throws: Interrupted.self) {
            try world.files.write(to: "file") {
                calls += 1
                if calls == 4 { throw Interrupted() }
                return pattern(40_000, seed: 5)
            }
        }
        let stream = AsyncThrowingStream<[UInt8], any Error> { continuation in
            continuation.yield(pattern(SecureFiles.chunkSize * 2))
            continuation.finish(throwing: Interrupted())
        }
        await #expect(throws: Interrupted.self) { try await world.files.write(to: "file", from: stream) }
        #expect(
            await thrownCode { try world.files.write(to: "new file") { throw DCError(.ioError, "disk gone") } }
                == .ioError)
        #expect(world.entries().count == 1, "\(world.entries())")
        #expect(try world.files.read("file") == SecretBytes(old))
        #expect(try world.files.list() == ["file"])
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains {
            haystack[$0..<($0 + needle.count)].elementsEqual(needle)
        }
    }
}

/// Writes `content` to the secure file `name` through the streaming write, handing it over in
/// pieces of `pieces` bytes (so that chunks form across the pieces' edges).
private func write(_ content: [UInt8], to name: String, in files: SecureFiles, pieces: Int) throws {
    var offset = 0
    try files.write(to: name) {
        guard offset < content.count else { return nil }
        let piece = Array(content[offset..<min(offset + pieces, content.count)])
        offset += piece.count
        return piece
    }
}
