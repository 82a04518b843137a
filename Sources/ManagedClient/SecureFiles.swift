internal import CSystemShims
import CredentialCoding
import DerivedCredentials
import Dispatch
import FoundationEssentials
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
/// then the directory is synced: a crash or a failure leaves the old file or the new one (the one
/// `fsync` is at the end; the disk's writeback starts as the write goes). Secure services are
/// checked before every chunk (the unlocked key read again from where it expires, the policy read
/// again whenever its file changed), so locking, auto-lock or a policy that takes authorization
/// away stops a read or a write at the next chunk (`DCError/Code/serviceUnavailable`, or
/// `notAuthorized`); a failed write leaves the old file and no staging file.
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
    /// The buffer a stream reads or writes the file through: 16 sealed chunks and room for two more.
    static let batchSize = 18 * sealedChunkSize + headerSize
    /// The most bytes a chunk takes on disk: length, content, tag.
    static let sealedChunkSize = 4 + chunkSize + 16
    /// The bytes a write lets pile up in the page cache before it starts their writeback.
    static let writebackWindow = 8 << 20
    static let nameContext = Array("dcclient secure-files name key v1".utf8)
    static let fileContext = Array("dcclient secure-files file key v1".utf8)

    /// `store/files`, where the encrypted files are kept.
    public var directory: String { client.base + "/store/files" }

    // MARK: - Names

    /// Checks that `name` can name a secure file: 1 to 255 bytes of UTF-8, no `/`, not starting
    /// with `.`, no control character. Throws `DCError/Code/usage` otherwise. The bytes are
    /// checked, not the characters: a `/` followed by a combining mark is one character to Swift
    /// but a separator to the kernel.
    public static func validate(name: String) throws {
        let bytes = name.utf8.count
        guard (1...255).contains(bytes), !name.utf8.contains(UInt8(ascii: "/")), name.utf8.first != UInt8(ascii: "."),
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

    /// Sets `data` to the associated data of a chunk, `version ‖ name ‖ index(8) ‖ final(1)`,
    /// reusing its storage.
    static func associatedData(_ data: inout [UInt8], name: [UInt8], index: UInt64, final: Bool) {
        data.removeAll(keepingCapacity: true)
        data.append(version)
        data += name
        for byte in 0..<8 { data.append(UInt8(truncatingIfNeeded: index >> (56 - 8 * byte))) }
        data.append(final ? 1 : 0)
    }

    /// Writes `index` big-endian into the last 8 bytes of the 12-byte `nonce`.
    static func setIndex(_ nonce: inout [UInt8], _ index: UInt64) {
        for byte in 0..<8 { nonce[4 + byte] = UInt8(truncatingIfNeeded: index >> (56 - 8 * byte)) }
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
    /// stays open), as ``write(to:from:)-(_,()->[UInt8]?)`` does. `progress`, when given, is told
    /// how many bytes were read so far after each read.
    public func write(to name: String, fromDescriptor fd: Int32, progress: ((Int) -> Void)? = nil) throws {
        let writer = try Writer(files: self, name: name)
        do {
            try writer.append(readingFrom: fd, progress: progress)
            try writer.commit()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// One write in progress: a staging file that becomes the file on ``commit()``.
    ///
    /// Content is read (from a descriptor) or copied into the chunk being formed, inside a batch
    /// buffer of sealed chunks; a chunk is sealed in place (one cipher context for the whole
    /// stream) once it is known whether it is the final one, and the batch goes out in one
    /// `write(2)` of about 1 MiB.
    final class Writer {
        let files: SecureFiles
        let name: [UInt8]
        let target: String
        let staging: String
        let fd: Int32
        var lock: LockCheck
        let cipher: AESGCM.Stream
        /// `prefix ‖ index(8)`, the index rewritten for every chunk.
        var nonce: [UInt8]
        /// The associated data of the chunk being sealed, rebuilt in place for each.
        var associatedData: [UInt8] = []
        /// Sealed chunks not yet written, then the chunk being formed (its plaintext in place).
        let batch: UnsafeMutableRawBufferPointer
        /// The first byte of `batch`.
        let base: UnsafeMutableRawPointer
        /// The bytes of `batch` before the chunk being formed.
        var used = 0
        /// The plaintext bytes in the chunk being formed: chunk 0 holds the name, the others content.
        var fill = 0
        var index: UInt64 = 0
        /// The bytes of the file written so far, and of those the ones whose writeback was started.
        var written = 0
        var flushed = 0
        var done = false

        init(files: SecureFiles, name: String) throws {
            try SecureFiles.validate(name: name)
            try files.client.requireSecureServices()
            let unlockedKey = try files.client.unlockedKey
            let storeKey = try files.client.storeKey(from: unlockedKey)
            try files.ensureDirectory()
            AtomicFileSet.removeStaleStagingFiles(in: files.directory)
            self.files = files
            self.name = Array(name.utf8)
            lock = LockCheck(client: files.client, unlockedKey: unlockedKey)
            let disk = files.diskName(name, storeKey: storeKey)
            target = files.directory + "/" + disk
            staging =
                files.directory + "/." + disk + AtomicFileSet.stagingMarker + "\(getpid())-"
                + Digests.hex(try Digests.random(8).withUnsafeBytes { Array($0) })
            let salt = try Digests.random(32).withUnsafeBytes { Array($0) }
            let prefix = try Digests.random(4).withUnsafeBytes { Array($0) }
            nonce = prefix + [UInt8](repeating: 0, count: 8)
            associatedData.reserveCapacity(1 + 255 + 8 + 1)
            cipher = try AESGCM.Stream(key: SecureFiles.derive(storeKey, SecureFiles.fileContext + salt), sealing: true)
            base = .allocate(byteCount: SecureFiles.batchSize, alignment: 64)
            batch = UnsafeMutableRawBufferPointer(start: base, count: SecureFiles.batchSize)
            let header = SecureFiles.magic + [SecureFiles.version] + salt + prefix
            batch.copyBytes(from: header)
            used = header.count
            UnsafeMutableRawBufferPointer(rebasing: batch[(used + 4)...]).copyBytes(from: self.name)
            fill = self.name.count
            fd = Glibc.open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw DCError(
                    .cannotCreateOutput, "cannot create a secure file: \(String(cString: strerror(errno)))",
                    subject: files.directory)
            }
            guard fchmod(fd, 0o600) == 0 else {
                let error = Self.failure("cannot set the mode", files.directory)
                abandon()
                throw error
            }
        }

        deinit {
            abandon()
            SecretBytes.wipe(batch)
            batch.deallocate()
        }

        func append(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try append($0) } }

        /// Reads the content from `fd` to its end straight into the chunks being formed: the bytes
        /// are not copied before they are sealed in place. A chunk that is complete stays unsealed
        /// until the next read brings more (it may be the final one); that read goes where the next
        /// chunk will start, which the complete chunk's size fixes.
        func append(readingFrom fd: Int32, progress: ((Int) -> Void)?) throws {
            var total = 0
            while true {
                let complete = index == 0 || fill == SecureFiles.chunkSize
                let start = complete ? used + 4 + fill + 16 + 4 : used + 4 + fill
                let room = complete ? SecureFiles.chunkSize : SecureFiles.chunkSize - fill
                let count = Glibc.read(fd, base + start, room)
                if count < 0 && errno == EINTR { continue }
                guard count >= 0 else {
                    throw DCError(.ioError, "cannot read the input: \(String(cString: strerror(errno)))")
                }
                if count == 0 { return }
                if complete { try seal(final: false, carrying: count) }
                fill += count
                total += count
                progress?(total)
            }
        }

        /// Adds `bytes` to the content, sealing each chunk as soon as the next one starts.
        func append(_ bytes: UnsafeRawBufferPointer) throws {
            var rest = bytes[...]
            while !rest.isEmpty {
                // The name chunk, or a full one: more content follows, so it is not the final one.
                if index == 0 || fill == SecureFiles.chunkSize { try seal(final: false) }
                let take = min(SecureFiles.chunkSize - fill, rest.count)
                UnsafeMutableRawBufferPointer(rebasing: batch[(used + 4 + fill)...])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
                fill += take
                rest = rest.dropFirst(take)
            }
        }

        func commit() throws {
            try seal(final: true)
            try flush()
            // The full check once more: the file is published only while the client is unlocked.
            try files.client.requireSecureServices()
            _ = try files.client.storeKey(from: lock.unlockedKey)
            guard fsync(fd) == 0 else { throw Self.failure("cannot sync", files.directory) }
            guard Glibc.rename(staging, target) == 0 else { throw Self.failure("cannot publish", files.directory) }
            done = true
            close(fd)
            SecretBytes.wipe(batch)
            try files.syncDirectory()
        }

        /// Removes the staging file; the old file, if any, is untouched.
        func abandon() {
            guard !done else { return }
            done = true
            close(fd)
            unlink(staging)
            SecretBytes.wipe(batch)
        }

        /// Seals the chunk being formed in place and starts the next one after it, writing the
        /// batch out when two more full chunks would not fit. `carrying` bytes of the next chunk's
        /// content are in place already; they move to the front with it.
        private func seal(final: Bool, carrying: Int = 0) throws {
            // Locked since the last chunk: stop here.
            try lock.check()
            SecureFiles.associatedData(
                &associatedData, name: index == 0 ? [] : name, index: index, final: final)
            SecureFiles.setIndex(&nonce, index)
            let chunk = base + used
            try cipher.seal(
                UnsafeMutableRawBufferPointer(start: chunk + 4, count: fill), tag: chunk + 4 + fill, nonce: nonce,
                associatedData: associatedData)
            let length = UInt32(fill + 16)
            for byte in 0..<4 {
                chunk.storeBytes(
                    of: UInt8(truncatingIfNeeded: length >> (24 - 8 * byte)), toByteOffset: byte, as: UInt8.self)
            }
            used += 4 + fill + 16
            fill = 0
            index += 1
            if batch.count - used < 2 * SecureFiles.sealedChunkSize {
                let next = used
                try flush()
                base.copyMemory(from: base + next, byteCount: 4 + carrying)
            }
        }

        /// Writes the sealed chunks out, and starts the disk's writeback of what the batches before
        /// wrote, so that the final `fsync` has little left to wait for.
        private func flush() throws {
            var offset = 0
            while offset < used {
                let count = Glibc.write(fd, base + offset, used - offset)
                if count < 0 && errno == EINTR { continue }
                guard count >= 0 else { throw Self.failure("cannot write", files.directory) }
                offset += count
            }
            written += used
            used = 0
            if written - flushed >= SecureFiles.writebackWindow {
                // Only a hint: the final fsync makes the file durable whether this worked or not.
                _ = dc_start_writeback(fd, Int64(flushed), Int64(written - flushed))
                flushed = written
            }
        }

        static func failure(_ what: String, _ subject: String) -> DCError {
            DCError(.ioError, "\(what) a secure file: \(String(cString: strerror(errno)))", subject: subject)
        }
    }

    /// The lock checked before every chunk of a stream, cheaply: a `stat` of the unlocked key's
    /// file (locking removes it), and every ``fullCheckInterval`` chunks (and whenever the `stat`
    /// fails) the key itself read through the client, so that whatever else the client checks
    /// stops a stream within that many chunks.
    /// The check before every chunk that secure services are still available: the unlocked key
    /// is still there (locking, auto-lock, retire remove it) and the policy file is unchanged
    /// (when it changed, the whole rule is checked again: an unauthorized app stops at once).
    struct LockCheck {
        let client: ManagedClient
        /// The unlocked store key, resolved once per stream.
        let unlockedKey: ExpiringSecret
        /// The policy file's change time when the stream started.
        let policyChanged: timespec?

        init(client: ManagedClient, unlockedKey: ExpiringSecret) {
            self.client = client
            self.unlockedKey = unlockedKey
            policyChanged = Self.changeTime(client.policyFile)
        }

        static func changeTime(_ path: String) -> timespec? {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_ctim : nil
        }

        /// Throws `DCError/Code/serviceUnavailable` when the client is locked, and what
        /// ``ManagedClient/requireSecureServices()`` throws when the policy changed.
        mutating func check() throws {
            let now = Self.changeTime(client.policyFile)
            if now?.tv_sec != policyChanged?.tv_sec || now?.tv_nsec != policyChanged?.tv_nsec {
                try client.requireSecureServices()
            }
            _ = try client.storeKey(from: unlockedKey)
        }
    }

    func ensureDirectory() throws {
        try AtomicFileSet.ensureDirectory(directory)
        chmod(directory, 0o700)
    }

    func syncDirectory() throws {
        try AtomicFileSet.syncDirectory(directory, what: "the secure files' directory")
    }

    // MARK: - Reading

    /// Reads the file `name`, handing `body` its content a chunk (at most 64 KiB) at a time; the
    /// buffer is valid only during the call. A damaged or altered file throws
    /// `DCError/Code/invalid`, possibly after `body` saw earlier chunks: discard what it got then.
    public func read(_ name: String, into body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try Self.validate(name: name)
        let storeKey = try client.secureServicesKey()
        let disk = diskName(name, storeKey: storeKey)
        try open(disk, storeKey: storeKey, expecting: Array(name.utf8), body: body)
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
    ///
    /// The file is read about 1 MiB at a time, each chunk opened in place (one cipher context for
    /// the whole file), and `body` gets the plaintext where it lies. While `body` takes one batch,
    /// the next is read and opened on another thread, into the other of two buffers; the lock is
    /// still checked before every chunk handed out.
    @discardableResult
    func open(
        _ disk: String, storeKey: SecretBytes, expecting: [UInt8]?,
        body: (UnsafeRawBufferPointer) throws -> Void = { _ in }
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
        let reader = try ChunkReader(fd: fd, storeKey: storeKey)
        var lock = LockCheck(client: client, unlockedKey: try client.unlockedKey)
        let ahead = DispatchQueue(label: "secure-file read-ahead")
        let next = ChunkReader.Pending()
        var buffer = 0
        var batch = try reader.batch(into: buffer)
        var name: [UInt8]?
        while true {
            let group = DispatchGroup()
            if !batch.last {
                ahead.async(group: group) { [buffer] in next.result = Result { try reader.batch(into: 1 - buffer) } }
            }
            // The other thread is done with the reader before anything here returns or throws.
            defer { group.wait() }
            for chunk in batch.chunks {
                try lock.check()
                let plaintext = UnsafeRawBufferPointer(rebasing: reader.buffers[buffer][chunk])
                if name != nil {
                    try body(plaintext)
                } else {
                    let found = Array(plaintext)
                    // The name inside must be the one the file is stored under: swapped files fail here.
                    guard let text = String(validating: found, as: UTF8.self),
                        (try? Self.validate(name: text)) != nil,
                        expecting == nil || expecting == found, diskName(text, storeKey: storeKey) == disk
                    else { throw Self.damaged() }
                    name = found
                }
            }
            if batch.last { break }
            group.wait()
            batch = try next.take()
            buffer = 1 - buffer
        }
        return String(decoding: name ?? [], as: UTF8.self)
    }

    /// A secure file's chunks read a batch at a time into one of two buffers and opened in place.
    ///
    /// `@unchecked Sendable`: one thread at a time uses it, the caller of ``open(_:storeKey:expecting:body:)``
    /// or, between the dispatch of the next batch and the caller's wait for it, the read-ahead
    /// thread; the dispatch group's wait orders the two. The read-ahead thread writes only the
    /// buffer the caller is not handing out.
    final class ChunkReader: @unchecked Sendable {
        let fd: Int32
        let size: Int
        let buffers: [UnsafeMutableRawBufferPointer]
        /// How far each buffer was ever filled: what is wiped at the end.
        var filled = [0, 0]
        /// The bytes read but not yet parsed: `buffers[rest.buffer][rest.start..<rest.end]`.
        var rest = (buffer: 0, start: 0, end: 0)
        /// The file offset of the first byte not yet parsed.
        var offset = headerSize
        let cipher: AESGCM.Stream
        var nonce: [UInt8]
        var associatedData: [UInt8] = []
        /// The name chunk's plaintext once it is opened: the other chunks' associated data.
        var name: [UInt8]?
        var index: UInt64 = 0

        /// The opened chunks of one batch, as ranges of its buffer; `last` when the file ends there.
        struct Batch: Sendable {
            var chunks: [Range<Int>] = []
            var last = false
        }

        /// The read-ahead thread's batch, or its error, for the caller.
        final class Pending: @unchecked Sendable {
            // @unchecked: written by the read-ahead thread before the group's wait returns, read
            // by the caller only after it.
            var result: Result<Batch, any Error>?

            func take() throws -> Batch {
                defer { result = nil }
                // cannot fail: the read-ahead block sets it before the group's wait returns
                return try result!.get()
            }
        }

        init(fd: Int32, storeKey: SecretBytes) throws {
            var info = stat()
            guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { throw SecureFiles.damaged() }
            self.fd = fd
            size = Int(info.st_size)
            var header = [UInt8](repeating: 0, count: headerSize)
            var done = 0
            while done < headerSize {
                let got = header.withUnsafeMutableBytes {
                    Glibc.read(fd, $0.baseAddress?.advanced(by: done), headerSize - done)
                }
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { throw SecureFiles.damaged() }
                done += got
            }
            guard Array(header.prefix(4)) == magic, header[4] == version else { throw SecureFiles.damaged() }
            cipher = try AESGCM.Stream(key: derive(storeKey, fileContext + Array(header[5..<37])), sealing: false)
            nonce = Array(header[37..<41]) + [UInt8](repeating: 0, count: 8)
            associatedData.reserveCapacity(1 + 255 + 8 + 1)
            buffers = (0..<2).map { _ in .allocate(byteCount: batchSize, alignment: 64) }
        }

        deinit {
            for (buffer, filled) in zip(buffers, filled) {
                // Plaintext stays where it was opened until read over; all of it is wiped here.
                SecretBytes.wipe(UnsafeMutableRawBufferPointer(rebasing: buffer[..<filled]))
                buffer.deallocate()
            }
        }

        /// Moves the unparsed bytes to the front of buffer `target`, fills it from the file (no
        /// further than the size found at the start) and opens every whole chunk in it.
        func batch(into target: Int) throws -> Batch {
            let buffer = buffers[target]
            let carried = rest.end - rest.start
            if carried > 0 {
                UnsafeMutableRawBufferPointer(rebasing: buffer[..<carried])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: buffers[rest.buffer][rest.start..<rest.end]))
            }
            var start = 0
            var end = carried
            let limit = min(buffer.count, carried + size - (offset + carried))
            while end < limit {
                let got = Glibc.read(fd, buffer.baseAddress?.advanced(by: end), limit - end)
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { throw SecureFiles.damaged() }
                end += got
            }
            filled[target] = max(filled[target], end)
            var batch = Batch()
            while !(offset == size && name != nil) {
                // The file ends inside a chunk (or before the name chunk): damaged.
                let atEnd = offset + (end - start) == size
                guard end - start >= 4 else {
                    if atEnd { throw SecureFiles.damaged() }
                    break
                }
                let length = (0..<4).reduce(0) { $0 << 8 | Int(buffer[start + $1]) }
                guard length >= 16, length <= chunkSize + 16 else { throw SecureFiles.damaged() }
                guard end - start >= 4 + length else {
                    if atEnd { throw SecureFiles.damaged() }
                    break
                }
                let content = start + 4..<start + 4 + length - 16
                offset += 4 + length
                SecureFiles.associatedData(&associatedData, name: name ?? [], index: index, final: offset == size)
                setIndex(&nonce, index)
                do {
                    try cipher.open(
                        UnsafeMutableRawBufferPointer(rebasing: buffer[content]),
                        // cannot fail: the buffer is allocated with a batch's size
                        tag: buffer.baseAddress! + content.upperBound, nonce: nonce, associatedData: associatedData)
                } catch let error as DCError where error.code == .invalid {
                    throw SecureFiles.damaged()
                }
                if name == nil { name = Array(buffer[content]) }
                batch.chunks.append(content)
                start += 4 + length
                index += 1
            }
            batch.last = offset == size && name != nil
            rest = (target, start, end)
            return batch
        }
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
