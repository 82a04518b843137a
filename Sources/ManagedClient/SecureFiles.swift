import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

extension ManagedClient {
    /// The managed app's encrypted files, kept under `store/files/` (``SecureFiles``).
    public var secureFiles: SecureFiles { SecureFiles(client: self) }
}

/// Encrypted files a managed app keeps in the client's store, readable only while it is unlocked.
///
/// Each file lives in `store/files/` (0700) as a 0600 file named by a keyed hash of its logical
/// name (HMAC-SHA-256 under a key derived from the store key), so no name appears on disk in the
/// clear. The format is a header, `"DCSF" ‖ version(1) ‖ salt(32) ‖ nonce prefix(4)`, then
/// chunks, each `length(4, big-endian) ‖ ciphertext ‖ tag(16)`: AES-256-GCM under a key derived
/// from the store key and the file's salt, nonce `prefix ‖ index(8)`. Chunk 0 holds the logical
/// name; the others hold at most 64 KiB of content each. The associated data of every chunk is
/// `version ‖ name ‖ index(8) ‖ final(1)` (chunk 0 with an empty name, its name then checked
/// against the file's on-disk name), so chunks cannot be reordered, dropped, appended or moved to
/// another file without the file failing to open.
///
/// A write goes to a staging file in the same directory, is synced and renamed over the old file,
/// then the directory is synced: a crash or a failure leaves the old file or the new one. The store
/// key is checked before every chunk, so locking the client stops a read or a write at once
/// (`DCError/Code/serviceUnavailable`); a failed write leaves the old file and no staging file.
public struct SecureFiles: Sendable {
    /// The client whose store key encrypts the files.
    public let client: ManagedClient

    /// The files of `client`; nothing is read or created until it is used.
    public init(client: ManagedClient) {
        self.client = client
    }

    /// The plaintext bytes in each chunk but the last.
    public static let chunkSize = 65536
    static let magic = Array("DCSF".utf8)
    static let version: UInt8 = 1
    static let headerSize = 4 + 1 + 32 + 4
    static let nameContext = Array("dcclient secure-files name key v1".utf8)
    static let fileContext = Array("dcclient secure-files file key v1".utf8)

    /// `store/files`, where the encrypted files are kept.
    public var directory: String { client.base + "/store/files" }

    // MARK: - Names

    /// Checks that `name` can name a secure file: 1 to 255 bytes of UTF-8, no `/`, not starting
    /// with `.`, no control character. Throws `DCError/Code/usage` otherwise.
    public static func validate(name: String) throws {
        let bytes = name.utf8.count
        guard (1...255).contains(bytes), !name.contains("/"), !name.hasPrefix("."),
            !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            // The name is not repeated: an app's file names may be as private as its files.
            throw DCError(
                .usage, "not a secure file name (\(bytes) bytes)",
                hint: "use 1-255 bytes without /, control characters or a leading .")
        }
    }

    /// The on-disk name of `name`: 64 hex digits of HMAC-SHA-256 under the store's name key.
    func diskName(_ name: String, storeKey: SecretBytes) -> String {
        let nameKey = Self.derive(storeKey, Self.nameContext)
        return Digests.hex(Digests.hmacSHA256(key: nameKey, message: Array(name.utf8)))
    }

    static func derive(_ storeKey: SecretBytes, _ info: [UInt8]) -> SecretBytes {
        var key = Digests.hmacSHA256(key: storeKey, message: info)
        return SecretBytes(consuming: &key)
    }

    static func associatedData(name: [UInt8], index: UInt64, final: Bool) -> [UInt8] {
        [version] + name + bigEndian(index) + [final ? 1 : 0]
    }

    static func nonce(prefix: [UInt8], index: UInt64) -> [UInt8] { prefix + bigEndian(index) }

    static func bigEndian(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    // MARK: - Writing

    /// Writes `bytes` as the file `name`, replacing it atomically if it exists.
    public func write(_ bytes: [UInt8], to name: String) throws {
        var sent = false
        try write(to: name) {
            guard !sent else { return nil }
            sent = true
            return bytes
        }
    }

    /// Writes the file `name` from `next`, called until it returns nil; each call may return any
    /// number of bytes. The content is never held in memory whole. If `next` throws, or the client
    /// is locked before the end, the old file (if any) stays as it was and no staging file is left.
    public func write(to name: String, from next: () throws -> [UInt8]?) throws {
        let writer = try Writer(files: self, name: name)
        do {
            while let bytes = try next() { try writer.append(bytes) }
            try writer.commit()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// Writes the file `name` from the chunks of `sequence`, as ``write(to:from:)-(_,()->[UInt8]?)`` does.
    public func write<Chunks: AsyncSequence>(to name: String, from sequence: Chunks) async throws
    where Chunks.Element == [UInt8] {
        let writer = try Writer(files: self, name: name)
        do {
            for try await bytes in sequence { try writer.append(bytes) }
            try writer.commit()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// Writes the file `name` from what the descriptor `fd` reads until its end (the descriptor
    /// stays open), as ``write(to:from:)-(_,()->[UInt8]?)`` does.
    public func write(to name: String, fromDescriptor fd: Int32) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 16)
        defer {
            SecretBytes.wipe(buffer)
            buffer.deallocate()
        }
        let writer = try Writer(files: self, name: name)
        do {
            while true {
                let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
                if count < 0 && errno == EINTR { continue }
                guard count >= 0 else {
                    throw DCError(.ioError, "cannot read the input: \(String(cString: strerror(errno)))")
                }
                if count == 0 { break }
                // Appended straight from the buffer: no copy of the content per read.
                try writer.append(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            }
            try writer.commit()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// One write in progress: a staging file that becomes the file on ``commit()``.
    final class Writer {
        let files: SecureFiles
        let name: [UInt8]
        let target: String
        let staging: String
        let fd: Int32
        let key: SecretBytes
        /// The unlocked store key's file, resolved once; read before every chunk.
        let unlockedKey: ExpiringSecret
        let prefix: [UInt8]
        var index: UInt64 = 0
        /// The chunk formed last, written once it is known whether it is the final one.
        var held: [UInt8]
        /// Content not yet in a chunk: less than one chunk.
        var pending: [UInt8] = []
        var done = false

        init(files: SecureFiles, name: String) throws {
            try SecureFiles.validate(name: name)
            try files.client.requireSecureServices()
            unlockedKey = try files.client.unlockedKey
            let storeKey = try files.client.storeKey(from: unlockedKey)
            try files.ensureDirectory()
            AtomicFileSet.removeStaleStagingFiles(in: files.directory)
            self.files = files
            self.name = Array(name.utf8)
            let disk = files.diskName(name, storeKey: storeKey)
            target = files.directory + "/" + disk
            staging =
                files.directory + "/." + disk + AtomicFileSet.stagingMarker + "\(getpid())-"
                + Digests.hex(try Digests.random(8).withUnsafeBytes { Array($0) })
            let salt = try Digests.random(32).withUnsafeBytes { Array($0) }
            prefix = try Digests.random(4).withUnsafeBytes { Array($0) }
            key = SecureFiles.derive(storeKey, SecureFiles.fileContext + salt)
            held = self.name
            fd = Glibc.open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw DCError(
                    .cannotCreateOutput, "cannot create a secure file: \(String(cString: strerror(errno)))",
                    subject: files.directory)
            }
            do {
                guard fchmod(fd, 0o600) == 0 else { throw Self.failure("cannot set the mode", files.directory) }
                try output(SecureFiles.magic + [SecureFiles.version] + salt + prefix)
            } catch {
                abandon()
                throw error
            }
        }

        deinit { abandon() }

        func append(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try append($0) } }

        /// Adds `bytes` to the content, sealing each chunk as soon as the next one starts.
        func append(_ bytes: UnsafeRawBufferPointer) throws {
            var rest = bytes[...]
            while !rest.isEmpty {
                if pending.isEmpty { pending.reserveCapacity(SecureFiles.chunkSize) }
                let take = min(SecureFiles.chunkSize - pending.count, rest.count)
                pending += rest.prefix(take)
                rest = rest.dropFirst(take)
                if pending.count == SecureFiles.chunkSize {
                    try seal(held, final: false)
                    held.withUnsafeMutableBytes { SecretBytes.wipe($0) }
                    // The two chunk buffers trade places: none is allocated per chunk.
                    swap(&held, &pending)
                    pending.removeAll(keepingCapacity: true)
                }
            }
        }

        func commit() throws {
            if !pending.isEmpty {
                try seal(held, final: false)
                held.withUnsafeMutableBytes { SecretBytes.wipe($0) }
                held = pending
            }
            try seal(held, final: true)
            _ = try files.client.storeKey(from: unlockedKey)
            guard fsync(fd) == 0 else { throw Self.failure("cannot sync", files.directory) }
            guard Glibc.rename(staging, target) == 0 else { throw Self.failure("cannot publish", files.directory) }
            done = true
            close(fd)
            try files.syncDirectory()
        }

        /// Removes the staging file; the old file, if any, is untouched.
        func abandon() {
            guard !done else { return }
            done = true
            close(fd)
            unlink(staging)
            held.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            pending.withUnsafeMutableBytes { SecretBytes.wipe($0) }
        }

        private func seal(_ plaintext: [UInt8], final: Bool) throws {
            // Locked since the last chunk: stop here.
            _ = try files.client.storeKey(from: unlockedKey)
            let sealed = try plaintext.withUnsafeBytes {
                try AESGCM.seal(
                    $0, key: key, nonce: SecureFiles.nonce(prefix: prefix, index: index),
                    associatedData: SecureFiles.associatedData(
                        name: index == 0 ? [] : name, index: index, final: final))
            }
            let length = UInt32(sealed.count)
            try output((0..<4).map { UInt8(truncatingIfNeeded: length >> (24 - 8 * $0)) } + sealed)
            index += 1
        }

        private func output(_ bytes: [UInt8]) throws {
            try bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let count = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if count < 0 && errno == EINTR { continue }
                    guard count >= 0 else { throw Self.failure("cannot write", files.directory) }
                    offset += count
                }
            }
        }

        static func failure(_ what: String, _ subject: String) -> DCError {
            DCError(.ioError, "\(what) a secure file: \(String(cString: strerror(errno)))", subject: subject)
        }
    }

    func ensureDirectory() throws {
        try AtomicFileSet.ensureDirectory(directory)
        chmod(directory, 0o700)
    }

    func syncDirectory() throws {
        let dirfd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if dirfd >= 0 { close(dirfd) } }
        guard dirfd >= 0, fsync(dirfd) == 0 else {
            throw DCError(
                .ioError, "cannot sync the secure files' directory: \(String(cString: strerror(errno)))",
                subject: directory)
        }
    }

    // MARK: - Reading

    /// Reads the file `name`, handing `body` its content a chunk (at most 64 KiB) at a time; the
    /// buffer is valid only during the call. A damaged or altered file throws
    /// `DCError/Code/invalid`, possibly after `body` saw earlier chunks: discard what it got then.
    public func read(_ name: String, into body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try Self.validate(name: name)
        let storeKey = try client.secureServicesKey()
        let disk = diskName(name, storeKey: storeKey)
        try open(disk, storeKey: storeKey, expecting: Array(name.utf8)) { plaintext in
            try plaintext.withUnsafeBytes(body)
        }
    }

    /// The whole content of the file `name`.
    public func read(_ name: String) throws -> SecretBytes {
        var content: [UInt8] = []
        do {
            try read(name) { content += $0 }
        } catch {
            content.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            throw error
        }
        return SecretBytes(consuming: &content)
    }

    /// Opens the on-disk file `disk`, checks that it holds `expecting` (any name when nil) and
    /// hands each content chunk to `body`. Returns the logical name the file holds.
    @discardableResult
    func open(
        _ disk: String, storeKey: SecretBytes, expecting: [UInt8]?, body: (SecretBytes) throws -> Void = { _ in }
    ) throws -> String {
        let path = directory + "/" + disk
        let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT {
                throw DCError(.fileNotFound, "no such secure file", hint: "list the files there are")
            }
            throw DCError(
                .ioError, "cannot open a secure file: \(String(cString: strerror(errno)))", subject: directory)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { throw Self.damaged() }
        let size = Int(info.st_size)
        var offset = 0
        func take(_ count: Int) throws -> [UInt8] {
            guard count >= 0, offset + count <= size else { throw Self.damaged() }
            var bytes = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let got = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + done, count - done) }
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { throw Self.damaged() }
                done += got
            }
            offset += count
            return bytes
        }
        let header = try take(Self.headerSize)
        guard Array(header.prefix(4)) == Self.magic, header[4] == Self.version else { throw Self.damaged() }
        let key = Self.derive(storeKey, Self.fileContext + Array(header[5..<37]))
        let prefix = Array(header[37..<41])
        var name: [UInt8]?
        var index: UInt64 = 0
        let unlockedKey = try client.unlockedKey
        while offset < size || name == nil {
            _ = try client.storeKey(from: unlockedKey)
            let lengthBytes = try take(4)
            let length = lengthBytes.reduce(0) { $0 << 8 | Int($1) }
            guard length >= 16, length <= Self.chunkSize + 16 else { throw Self.damaged() }
            let sealed = try take(length)
            let final = offset == size
            let plaintext = try sealed.withUnsafeBytes { buffer in
                do {
                    return try AESGCM.open(
                        buffer, key: key, nonce: Self.nonce(prefix: prefix, index: index),
                        associatedData: Self.associatedData(name: name ?? [], index: index, final: final))
                } catch let error as DCError where error.code == .invalid {
                    throw Self.damaged()
                }
            }
            if name != nil {
                try body(plaintext)
            } else {
                let found = plaintext.withUnsafeBytes { Array($0) }
                // The name inside must be the one the file is stored under: swapped files fail here.
                guard let text = String(validating: found, as: UTF8.self), (try? Self.validate(name: text)) != nil,
                    expecting == nil || expecting == found, diskName(text, storeKey: storeKey) == disk
                else { throw Self.damaged() }
                name = found
            }
            index += 1
        }
        return String(decoding: name ?? [], as: UTF8.self)
    }

    static func damaged() -> DCError {
        DCError(
            .invalid, "a secure file is damaged or was altered",
            hint: "nothing of it can be trusted: remove it and write it again")
    }

    // MARK: - Managing

    /// The logical names of the files, sorted. Throws `DCError/Code/invalid` when a file is
    /// damaged or altered (``remove(_:)`` removes it by name).
    public func list() throws -> [String] {
        let storeKey = try client.secureServicesKey()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return try names.filter { !$0.hasPrefix(".") }.map { try open($0, storeKey: storeKey, expecting: nil) }.sorted()
    }

    /// Renames the file `name` to `newName`, which must not exist. The content is encrypted again
    /// (it is bound to its name); a crash before the end leaves the old name, or both.
    public func rename(_ name: String, to newName: String) throws {
        try Self.validate(name: newName)
        let storeKey = try client.secureServicesKey()
        guard access(directory + "/" + diskName(newName, storeKey: storeKey), F_OK) != 0 else {
            throw DCError(
                .outputExists, "a secure file of the new name exists", hint: "remove it first, or pick another name")
        }
        let writer = try Writer(files: self, name: newName)
        do {
            try read(name) { try writer.append($0) }
            try writer.commit()
        } catch {
            writer.abandon()
            throw error
        }
        try remove(name)
    }

    /// Removes the file `name`. Throws `DCError/Code/fileNotFound` when there is none.
    public func remove(_ name: String) throws {
        try Self.validate(name: name)
        let storeKey = try client.secureServicesKey()
        guard unlink(directory + "/" + diskName(name, storeKey: storeKey)) == 0 else {
            if errno == ENOENT {
                throw DCError(.fileNotFound, "no such secure file", hint: "list the files there are")
            }
            throw DCError(
                .ioError, "cannot remove a secure file: \(String(cString: strerror(errno)))", subject: directory)
        }
        try syncDirectory()
    }
}
