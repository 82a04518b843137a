import DerivedCredentials
import Foundation
import TestSupport
import Testing

@testable import SystemSupport

/// The kernel keyring tests need a session keyring of the process's own (scripts/test runs the
/// suite under `keyctl session -`); `TestSuiteRulesTests` fails when it is missing.
private let kernelKeyringUsable = KernelKeyring.sessionIsUserSession() == false

/// The runtime-file tests need a tmpfs (``MemoryDirectory``): the runtime file is written nowhere
/// else. A machine without one keeps its secrets in the kernel keyring only.
private let memoryUsable = MemoryDirectory.available

/// Whether the test's temporary directory is on persistent storage (it is in CI: `TMPDIR` is on
/// the root disk), as `stat -f` says: the tests of the refusal to write there need it.
private let temporaryDirectoryOnDisk =
    ["tmpfs", "ramfs", nil].contains(
        MemoryDirectory.fileSystemType(NSTemporaryDirectory())) == false

@Suite("Secrets with a bounded lifetime", .ownThreads, .timeLimit(.minutes(2)))
struct ExpiringSecretTests {
    /// A fresh name per test, so tests running side by side in the one session keyring never meet.
    static func uniqueName() -> String { "test-" + UUID().uuidString.lowercased() }

    /// A printable secret, so that a test can look for it in text.
    static let secret = SecretBytes(Array("correct-horse-battery-staple-0123".utf8))

    /// `keyctl search @s user DESCRIPTION`: the independent oracle for the kernel holder. The key's
    /// serial number, or nil when the kernel finds no live key.
    static func keyctlSearch(_ secret: ExpiringSecret) throws -> String? {
        let result = try run("keyctl", ["search", "@s", "user", secret.keyDescription])
        guard result.status == 0 else { return nil }
        return result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The deadline and secret in a payload, read here independently of the production parser.
    static func split(_ payload: [UInt8]) -> (deadline: Int64, secret: [UInt8]) {
        (payload.prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }, Array(payload.dropFirst(8)))
    }

    @Test(
        "Kernel keyring: a stored secret reads back; the key holds the deadline then the secret",
        .enabled(if: kernelKeyringUsable))
    func kernelRoundTrip() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: sandbox.runtimeDirectory)
        defer { held.remove() }
        let before = Int64(Date().timeIntervalSince1970)
        #expect(try held.store(Self.secret, lifetime: .seconds(60)) == .kernelKeyring)
        let after = Int64(Date().timeIntervalSince1970)
        #expect(try held.read() == Self.secret)

        let key = try #require(try Self.keyctlSearch(held), "keyctl does not find \(held.keyDescription)")
        let payload = Self.split(try run("keyctl", ["pipe", key]).stdout)
        #expect(payload.secret == Array("correct-horse-battery-staple-0123".utf8))
        // The store's clock read between these two (a loaded machine may pause between them).
        #expect((before + 60...after + 60).contains(payload.deadline), "\(before) \(after) \(payload.deadline)")
        let expiry = try #require(held.expiry())
        #expect(Int64(expiry.timeIntervalSince1970) == payload.deadline)

        // The key's description (what /proc/keys and keyctl show list) names it, and holds no secret.
        let description = try run("keyctl", ["rdescribe", key]).stdoutText
        #expect(description.hasPrefix("user;"))
        #expect(description.hasSuffix(";derived-credentials:\(held.name)\n"))
        #expect(!description.contains("correct-horse"))
        // The kernel's own timeout is set: the lifetime, less the seconds this test took since the
        // store (a loaded machine may take several).
        let timeout = try run("python3", ["-c", Self.procKeysTimeout, key]).stdoutText
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let elapsed = Int(Int64(Date().timeIntervalSince1970) - before)
        let seconds = timeout == "1m" ? 60 : timeout.hasSuffix("s") ? Int(timeout.dropLast()) : nil
        #expect(seconds.map { (59 - elapsed...60).contains($0) } == true, "\(timeout) after \(elapsed) s")
        // Nothing went to the fallback.
        #expect(!FileManager.default.fileExists(atPath: held.runtimeFile))
    }

    /// Prints the "expiry" column of /proc/keys for the key whose serial number is argv[1].
    static let procKeysTimeout = """
        import sys
        serial = "%08x" % int(sys.argv[1])
        for line in open("/proc/keys"):
            fields = line.split()
            if fields[0] == serial:
                print(fields[3])
        """

    @Test(
        "Kernel keyring: a 1 s lifetime ends in the kernel, with no process touching the key",
        .enabled(if: kernelKeyringUsable))
    func kernelExpiry() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: sandbox.runtimeDirectory)
        defer { held.remove() }
        #expect(try held.store(Self.secret, lifetime: .seconds(1)) == .kernelKeyring)
        #expect(try Self.keyctlSearch(held) != nil, "the key is there before its lifetime ends")
        try await Task.sleep(for: .milliseconds(2500))
        // The oracle asks first: the kernel ended the key by itself, before any reader of ours looked.
        #expect(try Self.keyctlSearch(held) == nil, "the kernel still has the key after its lifetime")
        #expect(try held.read() == nil)
        #expect(held.expiry() == nil)
    }

    @Test(
        "expiry(rememberingKernelKey:) answers as expiry() does across store, remove, store again and the end of the lifetime, reading the remembered key by its serial",
        .enabled(if: kernelKeyringUsable))
    func rememberedKernelKey() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: sandbox.runtimeDirectory)
        defer { held.remove() }
        var key: Int32?
        #expect(held.expiry(rememberingKernelKey: &key) == nil && key == nil)
        try held.store(Self.secret, lifetime: .seconds(60))
        let first = held.expiry(rememberingKernelKey: &key)
        #expect(first != nil && first == held.expiry())
        // The serial remembered is the key keyctl finds (the oracle).
        let serial = try #require(try Self.keyctlSearch(held))
        #expect(key.map(String.init) == serial)
        #expect(held.expiry(rememberingKernelKey: &key) == first)
        held.remove()
        #expect(held.expiry(rememberingKernelKey: &key) == nil && key == nil)
        try held.store(Self.secret, lifetime: .seconds(1))
        #expect(held.expiry(rememberingKernelKey: &key) != nil && key != nil)
        try await Task.sleep(for: .milliseconds(2500))
        #expect(held.expiry(rememberingKernelKey: &key) == nil && key == nil)
    }

    @Test(
        "Runtime file: a stored secret reads back from a 0600 file holding the deadline then the secret",
        .enabled(if: memoryUsable))
    func fileRoundTrip() throws {
        let memory = try MemoryDirectory("file-round-trip")
        defer { memory.remove() }
        let directory = memory.path + "/dcclient"
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: directory, holders: [.runtimeFile])
        let before = Int64(Date().timeIntervalSince1970)
        #expect(try held.store(Self.secret, lifetime: .milliseconds(90_500)) == .runtimeFile)
        #expect(try held.read() == Self.secret)
        #expect(held.runtimeFile == directory + "/" + held.name + ".key")

        let attributes = try FileManager.default.attributesOfItem(atPath: held.runtimeFile)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        let directoryAttributes = try FileManager.default.attributesOfItem(atPath: directory)
        #expect(directoryAttributes[.posixPermissions] as? Int == 0o700)
        let payload = Self.split(Array(try Data(contentsOf: URL(fileURLWithPath: held.runtimeFile))))
        #expect(payload.secret == Array("correct-horse-battery-staple-0123".utf8))
        // 90.5 s rounds up to 91 whole seconds.
        #expect((before + 91...before + 92).contains(payload.deadline))
        #expect(held.expiry().map { Int64($0.timeIntervalSince1970) } == payload.deadline)
        #expect(try Self.keyctlSearch(held) == nil, "a runtime-file-only secret never reaches the kernel")
    }

    @Test(
        "Runtime file: past its deadline the secret is not read, and the file is removed on sight",
        .enabled(if: memoryUsable))
    func fileExpiry() throws {
        let memory = try MemoryDirectory("file-expiry")
        defer { memory.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.runtimeFile])
        try held.store(Self.secret, lifetime: .seconds(60))
        // The same file with its deadline a second in the past, as if a minute had gone by.
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: held.runtimeFile)))
        let past = Int64(Date().timeIntervalSince1970) - 1
        for index in 0..<8 { bytes[index] = UInt8(truncatingIfNeeded: past >> (56 - 8 * index)) }
        try Data(bytes).write(to: URL(fileURLWithPath: held.runtimeFile))
        #expect(FileManager.default.fileExists(atPath: held.runtimeFile))

        #expect(held.expiry() == nil)
        #expect(try held.read() == nil)
        #expect(!FileManager.default.fileExists(atPath: held.runtimeFile), "the expired file is still there")
    }

    @Test(
        "remove() takes the secret out of every holder, and may be called again",
        .enabled(if: kernelKeyringUsable && memoryUsable))
    func removeEverywhere() throws {
        let memory = try MemoryDirectory("remove-everywhere")
        defer { memory.remove() }
        let name = Self.uniqueName()
        let both = ExpiringSecret(name: name, runtimeDirectory: memory.path)
        // One copy in each holder (store alone never leaves two): each holder is filled on its own.
        try ExpiringSecret(name: name, runtimeDirectory: memory.path, holders: [.runtimeFile])
            .store(Self.secret, lifetime: .seconds(60))
        try ExpiringSecret(name: name, runtimeDirectory: memory.path, holders: [.kernelKeyring])
            .store(Self.secret, lifetime: .seconds(60))
        #expect(try Self.keyctlSearch(both) != nil)
        #expect(FileManager.default.fileExists(atPath: both.runtimeFile))

        both.remove()
        #expect(try Self.keyctlSearch(both) == nil, "the kernel key survived remove()")
        #expect(!FileManager.default.fileExists(atPath: both.runtimeFile), "the runtime file survived remove()")
        #expect(try both.read() == nil)
        #expect(both.expiry() == nil)
        both.remove()
    }

    @Test(
        "Storing again replaces: one key, the new secret, and no stale copy in the other holder",
        .enabled(if: kernelKeyringUsable && memoryUsable))
    func replacing() throws {
        let memory = try MemoryDirectory("replacing")
        defer { memory.remove() }
        let name = Self.uniqueName()
        let held = ExpiringSecret(name: name, runtimeDirectory: memory.path)
        defer { held.remove() }
        // A copy in the fallback first, then the kernel takes the secret: the file must go.
        try ExpiringSecret(name: name, runtimeDirectory: memory.path, holders: [.runtimeFile])
            .store(SecretBytes([1, 2, 3]), lifetime: .seconds(60))
        #expect(try held.store(SecretBytes([4, 5, 6]), lifetime: .seconds(60)) == .kernelKeyring)
        #expect(!FileManager.default.fileExists(atPath: held.runtimeFile), "a stale copy is left in the runtime file")
        let newSecret = Self.secret
        #expect(try held.store(newSecret, lifetime: .seconds(60)) == .kernelKeyring)
        #expect(try held.read() == newSecret)

        let listing = try run("keyctl", ["show", "@s"]).stdoutText
        let copies = listing.split(separator: "\n").filter { $0.hasSuffix("user: " + held.keyDescription) }
        #expect(copies.count == 1, "\(listing)")

        // And back: when the kernel refuses, the file takes the secret and the kernel copy goes.
        let refused = ExpiringSecret(
            name: name, runtimeDirectory: memory.path, holders: [.kernelKeyring, .runtimeFile],
            simulatedKernelRefusal: EDQUOT)
        #expect(try refused.store(SecretBytes([7]), lifetime: .seconds(60)) == .runtimeFile)
        #expect(try Self.keyctlSearch(held) == nil, "a stale copy is left in the kernel keyring")
        #expect(try held.read() == SecretBytes([7]))
    }

    @Test(
        "When the kernel refuses (quota, seccomp, no keyrings), the runtime file in memory takes the secret",
        .enabled(if: memoryUsable))
    func fallback() async throws {
        let memory = try MemoryDirectory("fallback")
        defer { memory.remove() }
        for refusal in [EDQUOT, EPERM, EACCES, ENOSYS] {
            let held = ExpiringSecret(
                name: Self.uniqueName(), runtimeDirectory: memory.path,
                holders: [.kernelKeyring, .runtimeFile], simulatedKernelRefusal: refusal)
            #expect(try held.store(Self.secret, lifetime: .seconds(60)) == .runtimeFile)
            #expect(try held.read() == Self.secret)
            #expect(FileManager.default.fileExists(atPath: held.runtimeFile))
            #expect(try Self.keyctlSearch(held) == nil)
            held.remove()
            #expect(!FileManager.default.fileExists(atPath: held.runtimeFile))

            // With no fallback listed, the refusal is the error, and it says what the kernel said.
            let kernelOnly = ExpiringSecret(
                name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.kernelKeyring],
                simulatedKernelRefusal: refusal)
            let error = try #require(await thrownError { try kernelOnly.store(Self.secret, lifetime: .seconds(60)) })
            #expect(error.code == .serviceUnavailable)
            #expect(error.message.contains(String(cString: strerror(refusal))))
            #expect(!FileManager.default.fileExists(atPath: kernelOnly.runtimeFile))
        }
    }

    @Test("A runtime-file-only secret never touches the kernel keyring", .enabled(if: memoryUsable))
    func fileOnly() throws {
        let memory = try MemoryDirectory("file-only")
        defer { memory.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.runtimeFile])
        #expect(try held.store(Self.secret, lifetime: .seconds(5)) == .runtimeFile)
        #expect(try Self.keyctlSearch(held) == nil)
        held.remove()
        #expect(try held.read() == nil)
    }

    @Test("A lifetime must be positive")
    func lifetimeMustBePositive() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: sandbox.runtimeDirectory)
        #expect(await thrownCode { try held.store(Self.secret, lifetime: .zero) } == .usage)
        #expect(await thrownCode { try held.store(Self.secret, lifetime: .seconds(-5)) } == .usage)
        #expect(try held.read() == nil)
    }

    // MARK: - The runtime file only in memory, and gone at its deadline

    /// The deadline and secret of the file at `path`, or nil when it is not there.
    static func fileDeadline(_ path: String) -> Int64? {
        (try? Data(contentsOf: URL(fileURLWithPath: path))).map { split(Array($0)).deadline }
    }

    /// The processes whose command line names `path`, with their argv and environment as /proc shows them.
    static func processes(naming path: String) -> [(pid: String, cmdline: [UInt8], environ: [UInt8])] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { $0.allSatisfy(\.isNumber) }
        return (pids ?? []).compactMap { pid in
            guard let cmdline = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline").map(Array.init),
                String(decoding: cmdline, as: UTF8.self).contains(path)
            else { return nil }
            let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ").map(Array.init) ?? []
            return (pid, cmdline, environ)
        }
    }

    @Test(
        "Attack: a runtime directory on persistent storage (stat -f: not a tmpfs) gets no key file; with the kernel refusing too, nothing is stored and the error names both refusals",
        .enabled(if: temporaryDirectoryOnDisk))
    func noFileOnDisk() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let directory = sandbox.runtimeDirectory + "/dcclient"
        let type = MemoryDirectory.fileSystemType(sandbox.runtimeDirectory)
        try #require(type != nil && type != "tmpfs" && type != "ramfs", "the sandbox is on \(type ?? "?")")
        for holders in [[ExpiringSecret.Holder.kernelKeyring, .runtimeFile], [.runtimeFile]] {
            let held = ExpiringSecret(
                name: Self.uniqueName(), runtimeDirectory: directory, holders: holders, simulatedKernelRefusal: EDQUOT)
            let error = try #require(await thrownError { try held.store(Self.secret, lifetime: .seconds(60)) })
            #expect(error.code == .serviceUnavailable)
            #expect(error.message.contains("not on a tmpfs or ramfs"), "\(error)")
            if holders.count == 2 {
                #expect(
                    "\(error)".contains(String(cString: strerror(EDQUOT))), "the kernel's refusal is lost: \(error)")
            }
            // `ls -A` as the oracle: the directory holds nothing, not even a staging file.
            let listing = try run("ls", ["-A", directory])
            #expect(listing.status == 0 && listing.stdoutText.isEmpty, "\(listing.stdoutText)")
            #expect(try Self.keyctlSearch(held) == nil)
            #expect(try held.read() == nil)
        }
    }

    @Test(
        "Attack: a key file found on persistent storage (left by an older version, or planted) is never read as the secret, and is removed",
        .enabled(if: temporaryDirectoryOnDisk))
    func fileOnDiskIgnored() throws {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let held = ExpiringSecret(
            name: Self.uniqueName(), runtimeDirectory: sandbox.runtimeDirectory, holders: [.runtimeFile])
        // The payload this type writes, an hour to go, written where it must never be.
        let deadline = Int64(Date().timeIntervalSince1970) + 3600
        var bytes = (0..<8).map { UInt8(truncatingIfNeeded: deadline >> (56 - 8 * $0)) }
        bytes += Array("correct-horse-battery-staple-0123".utf8)
        try Data(bytes).write(to: URL(fileURLWithPath: held.runtimeFile))
        chmod(held.runtimeFile, 0o600)
        #expect(try held.read() == nil)
        #expect(held.expiry() == nil)
        #expect(try run("test", ["-e", held.runtimeFile]).status != 0, "the key file on disk is still there")
    }

    @Test(
        "Attack: at its deadline the runtime file is gone with no process of ours touching it (test -e as the oracle); the process that removes it never carries the secret",
        .enabled(if: memoryUsable))
    func fileRemovedAtDeadline() async throws {
        let memory = try MemoryDirectory("removed-at-deadline")
        defer { memory.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.runtimeFile])
        #expect(try held.store(Self.secret, lifetime: .seconds(2)) == .runtimeFile)
        let deadline = try #require(Self.fileDeadline(held.runtimeFile))
        // What removes it: a process naming the file, whose argv and environment hold no secret.
        let removers = Self.processes(naming: held.runtimeFile)
        #expect(!removers.isEmpty, "no process watches the file")
        for remover in removers {
            let secret = Array("correct-horse-battery-staple-0123".utf8)
            #expect(
                SecretEncodings.found(secret, in: remover.cmdline).isEmpty, "the secret is on \(remover.pid)'s argv")
            #expect(SecretEncodings.found(secret, in: remover.environ).isEmpty, "the secret is in its environment")
        }
        #expect(try run("test", ["-e", held.runtimeFile]).status == 0)
        // Nothing of ours runs until a second and a half after the deadline.
        try await Task.sleep(for: .seconds(max(0, Double(deadline) - Date().timeIntervalSince1970 + 1.5)))
        #expect(try run("test", ["-e", held.runtimeFile]).status != 0, "the key file outlived its deadline")
        try await eventually(timeout: .seconds(10)) { Self.processes(naming: held.runtimeFile).isEmpty }
    }

    @Test(
        "The remover of a file that was replaced leaves the new one alone (it is the new one's remover's), and ends",
        .enabled(if: memoryUsable))
    func replacedFileKept() async throws {
        let memory = try MemoryDirectory("replaced-file")
        defer { memory.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.runtimeFile])
        defer { held.remove() }
        try held.store(SecretBytes([1, 2, 3]), lifetime: .seconds(2))
        let first = try #require(Self.fileDeadline(held.runtimeFile))
        try held.store(Self.secret, lifetime: .seconds(60))
        try await Task.sleep(for: .seconds(max(0, Double(first) - Date().timeIntervalSince1970 + 1.5)))
        #expect(try held.read() == Self.secret, "the first remover took the file that replaced its own")
        held.remove()
        #expect(try run("test", ["-e", held.runtimeFile]).status != 0)
    }

    @Test(
        "Attack: a FIFO planted at the runtime file's path is refused at once, not waited on",
        .enabled(if: memoryUsable))
    func plantedFIFO() async throws {
        let memory = try MemoryDirectory("planted-fifo")
        defer { memory.remove() }
        let held = ExpiringSecret(name: Self.uniqueName(), runtimeDirectory: memory.path, holders: [.runtimeFile])
        try #require(mkfifo(held.runtimeFile, 0o600) == 0)
        // Should the reader wait, a writer that comes after three seconds lets it go (no hung test).
        let path = held.runtimeFile
        let rescue = Thread {
            Thread.sleep(forTimeInterval: 3)
            let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if fd >= 0 { close(fd) }
        }
        rescue.start()
        let started = ContinuousClock.now
        #expect(await thrownCode { _ = try held.read() } == .malformedInput)
        #expect(ContinuousClock.now - started < .seconds(2), "the reader waited on the FIFO")
    }
}
