import CredentialCoding
import Foundation
import SystemSupport
import TestSupport
import Testing

/// The SHA-256 of `bytes`, in hex: how the thief plug-in reports what it managed to read.
private func sha256(_ bytes: [UInt8]) -> String {
    Digests.sha256(bytes).map { String(format: "%02x", $0) }.joined()
}

/// Every regular file below `directory` (not following links), with its contents.
private func files(under directory: String) -> [String: [UInt8]] {
    var found: [String: [UInt8]] = [:]
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return found }
    for case let relative as String in walker {
        let path = directory + "/" + relative
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
            let data = FileManager.default.contents(atPath: path)
        else { continue }
        found[path] = Array(data)
    }
    return found
}

/// A plug-in that tries every way it knows to read the files in `targets`, and every file it can
/// find under `HOME` and `XDG_RUNTIME_DIR`, then reports on its standard error (which dcprovision
/// passes on) the SHA-256 of everything it read, and fails. Its own directory holds nothing else.
private func writeThief(in sandbox: Sandbox, targets: [String]) throws -> String {
    let directory = sandbox.file("plugins")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let list = targets.map { "    " + String(reflecting: $0) + "," }.joined(separator: "\n")
    let script = """
        #!/usr/bin/python3
        import ctypes, hashlib, os, sys
        targets = [
        \(list)
        ]
        parent = os.getppid()
        read = []
        def report(line):
            sys.stderr.write(line + "\\n")
        def take(path, how):
            try:
                with open(path, "rb") as f:
                    data = f.read()
                read.append(hashlib.sha256(data).hexdigest())
                report("READ " + how + " " + path + " " + hashlib.sha256(data).hexdigest())
            except OSError as error:
                pass
        report("THIEF started")
        take(sys.argv[0], "own-script")
        take("/etc/passwd", "system")
        for top in [os.environ.get("HOME", ""), os.environ.get("XDG_RUNTIME_DIR", "")]:
            for root, dirs, names in os.walk(top):
                for name in names:
                    take(os.path.join(root, name), "walk")
        tmp = os.environ.get("TMPDIR", "/tmp")
        for index, path in enumerate(targets):
            take(path, "direct")
            take("/proc/%d/root%s" % (parent, path), "proc-root")
            cwd = os.readlink("/proc/%d/cwd" % parent) if os.path.exists("/proc/%d/cwd" % parent) else None
            take("/proc/%d/cwd/%s" % (parent, os.path.relpath(path, os.getcwd())), "proc-cwd")
            link = os.path.join(tmp, "link%d" % index)
            try:
                os.symlink(path, link)
            except OSError:
                pass
            take(link, "symlink")
            hard = os.path.join(tmp, "hard%d" % index)
            try:
                os.link(path, hard)
                take(hard, "hardlink")
            except OSError:
                pass
        for fd in range(3, 256):
            try:
                data = os.pread(fd, 1 << 20, 0)
                read.append(hashlib.sha256(data).hexdigest())
                report("READ fd %d %s" % (fd, hashlib.sha256(data).hexdigest()))
            except OSError:
                pass
        take("/proc/%d/environ" % parent, "parent-environ")
        import socket, stat
        for path in targets:
            try:
                os.chmod(path, 0o644)
                report("CHMOD " + path)
            except OSError:
                pass
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            report("UNIX-SOCKET")
        except OSError:
            pass
        try:
            os.mknod(os.path.join(tmp, "disk"), 0o600 | stat.S_IFBLK, os.makedev(7, 0))
            report("MKNOD")
        except OSError:
            pass
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): the keyring the unlocked key may be in.
        if libc.syscall(250, 0, -3, 0) >= 0:
            report("KEYRING reachable")
        report("THIEF done")
        sys.stdout.write('{"protocol":1,"error":{"code":"providerFailed","message":"nothing to give"}}')
        """
    let path = try sandbox.write("plugins/dcprovider-thief", script)
    chmod(path, 0o755)
    return path
}

@Suite(
    "Exec plug-ins run confined: the provider's keys, the client's store and the runtime directory are out of reach",
    .ownThreads, .timeLimit(.minutes(3)))
struct PlugInConfinementTests {
    /// The permission bits of `path`, or nil.
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o7777 : nil
    }

    @Test(
        "A thief plug-in, run by dcprovision and by the provider's handler, reads none of the key files by any path (directly, a walk, a symlink, a hard link, /proc/PPID/root, /proc/PPID/cwd, an inherited descriptor), changes none, and reaches neither the kernel keyring, a UNIX socket nor a device",
        .enabled(if: Confinement.landlockABI != nil, "this kernel has no Landlock")
    )
    func thief() throws {
        let tools = try Tools("thief")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        // Every file of the provider's and the client's own, and the runtime directory's.
        var secrets: [String: [UInt8]] = [:]
        for directory in [
            tools.sandbox.configHome + "/dcprovision", tools.sandbox.stateHome + "/dcprovision",
            tools.sandbox.dataHome + "/dcclient", tools.sandbox.runtimeDirectory,
        ] {
            secrets.merge(files(under: directory)) { $1 }
        }
        let keyNames = ["signing-key", "token-issuing-key", "identity-signing-key"]
        for name in keyNames {
            #expect(secrets.keys.contains { $0.hasSuffix("/" + name) }, "no \(name) among \(secrets.keys.sorted())")
        }
        let modes = Dictionary(uniqueKeysWithValues: secrets.keys.map { ($0, Self.mode($0)) })
        let thief = try writeThief(in: tools.sandbox, targets: secrets.keys.sorted())
        let stolen = Dictionary(secrets.map { (sha256($0.value), $0.key) }) { first, _ in first }

        func judge(_ result: ProcessResult, _ context: String) {
            let report = result.stderrText
            #expect(report.contains("THIEF started") && report.contains("THIEF done"), "\(context): \(report)")
            // The thief can read: its own script and the system's files are there for it.
            #expect(report.contains("READ own-script"), "\(context): \(report)")
            #expect(report.contains("READ system /etc/passwd"), "\(context): \(report)")
            for line in report.split(separator: "\n") where line.contains("READ ") {
                if let hash = line.split(separator: " ").last, let file = stolen[String(hash)] {
                    Issue.record("\(context): the plug-in read \(file): \(line)")
                }
            }
            #expect(!report.contains("KEYRING reachable"), "\(context): \(report)")
            // Nor change a key file's mode, reach a program behind a UNIX socket, or make a device.
            for marker in ["CHMOD ", "UNIX-SOCKET", "MKNOD"] {
                #expect(!report.contains(marker), "\(context): \(report)")
            }
        }

        // Run by dcprovision itself.
        let direct = try tools.run("dcprovision", ["inspect", "--provider", "exec:" + thief])
        #expect(direct.status == 69, "\(direct.stderrText)")
        judge(direct, "dcprovision inspect")

        // Run by the provider's handler, when the client asks: the handler has the client's and the
        // provider's files all around it.
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--provider",
                "exec:" + thief,
            ]
        )
        let asked = try tools.run("dcclient", ["request"])
        #expect(asked.status != 0)
        judge(asked, "dcclient request → dcprovision handle-url")
        // Every file kept its mode (the thief tried chmod 0644 on each), and the keys their bytes.
        for (path, mode) in modes {
            #expect(Self.mode(path) == mode, "\(path) changed mode")
        }
        for (path, contents) in secrets where keyNames.contains((path as NSString).lastPathComponent) {
            #expect(FileManager.default.contents(atPath: path).map(Array.init) == contents, "\(path) changed")
        }
    }

    @Test(
        "--pin-env: while a plug-in runs, dcprovision's environment block no longer holds the PIN (root reads it and finds none), an ordinary user's other processes cannot read it at all (not dumpable), no core is dumped, and the confined plug-in cannot read its parent's environment"
    )
    func pinLeavesTheEnvironmentBlock() async throws {
        let pin = "PIN-\(UUID().uuidString)"
        let tools = try Tools("pin-env", extra: ["DC_TEST_PIN": pin])
        defer { tools.sandbox.remove() }
        let exchange = tools.sandbox.file("exchange")
        try FileManager.default.createDirectory(atPath: exchange, withIntermediateDirectories: true)
        let directory = tools.sandbox.file("plugins")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Tells the test its parent's pid, waits for the test to look, and reports whether it could
        // read its parent's environment itself.
        let waiter = try tools.sandbox.write(
            "plugins/dcprovider-waiter",
            """
            #!/usr/bin/python3
            import json, os, sys, time
            request = json.load(sys.stdin)
            exchange = request["options"]["dir"][0]
            try:
                with open("/proc/%d/environ" % os.getppid(), "rb") as f:
                    seen = "read %d bytes" % len(f.read())
            except OSError as error:
                seen = "refused: " + error.strerror
            with open(os.path.join(exchange, "seen"), "w") as f:
                f.write(seen)
            with open(os.path.join(exchange, "pid.tmp"), "w") as f:
                f.write(str(os.getppid()))
            os.rename(os.path.join(exchange, "pid.tmp"), os.path.join(exchange, "pid"))
            deadline = time.time() + 30
            while not os.path.exists(os.path.join(exchange, "go")) and time.time() < deadline:
                time.sleep(0.02)
            sys.stdout.write('{"protocol":1,"error":{"code":"providerFailed","message":"done"}}')
            """)
        chmod(waiter, 0o755)

        let running = try SpawnedProcess(
            Binaries.dcprovision,
            ["inspect", "--provider", "exec:" + waiter, "--option", "dir=" + exchange, "--pin-env", "DC_TEST_PIN"],
            environment: tools.sandbox.environment)
        defer {
            FileManager.default.createFile(atPath: exchange + "/go", contents: nil)
            running.wait(timeout: .seconds(30))
        }
        let pidFile = exchange + "/pid"
        try await eventually(timeout: .seconds(30)) { FileManager.default.fileExists(atPath: pidFile) }
        let pid = try #require(Int32(try readText(pidFile)))
        #expect(pid == running.pid)

        // What /proc shows of dcprovision while its plug-in runs.
        let environ = "/proc/\(pid)/environ"
        if let block = FileManager.default.contents(atPath: environ) {
            // Readable: this test runs as root. The block is there (HOME is in it), the PIN is not.
            #expect(geteuid() == 0, "an ordinary user read a not-dumpable process's environment")
            #expect(String(decoding: block, as: UTF8.self).contains("HOME="))
            #expect(!String(decoding: block, as: UTF8.self).contains(pin), "the PIN is still in \(environ)")
        } else {
            // Not readable: an ordinary user, and dcprovision is not dumpable (its /proc files are root's).
            #expect(geteuid() != 0)
            var info = stat()
            #expect(stat(environ, &info) == 0 && info.st_uid == 0, "\(environ) is not root's: dcprovision is dumpable")
        }
        let limits = try readText("/proc/\(pid)/limits")
        let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
        let coreLimits = core.map { $0.split(separator: " ").dropFirst(4).prefix(2).map(String.init) }
        #expect(coreLimits == ["0", "0"], "\(limits)")
        let seen = try readText(exchange + "/seen")
        if Confinement.landlockABI != nil {
            #expect(seen.hasPrefix("refused"), "the plug-in read its parent's environment: \(seen)")
        }
    }

    @Test(
        "A kernel without Landlock: the plug-in runs with one warning line; --require-sandbox, or requireSandbox in the registered configuration, refuses to start it (exit 69, one line)"
    )
    func withoutLandlock() throws {
        let tools = try Tools("no-landlock")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check("dcprovision", ["testca", "issue", "ca", "--format", "pem", "--out-dir", "issued"])
        let directory = tools.sandbox.file("plugins")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let sample = try tools.sandbox.write(
            "plugins/dcprovider-sample", try readText(Repository.root + "/Samples/exec-provider/dcprovider-sample"))
        chmod(sample, 0o755)
        // A stand-in, because a kernel without Landlock cannot be had here: a seccomp filter makes
        // landlock_create_ruleset(2) fail with ENOSYS, exactly what a kernel built without Landlock
        // answers, and dcprovision runs under it.
        let noLandlock = try tools.sandbox.write(
            "no-landlock",
            """
            #!/usr/bin/python3
            import ctypes, os, struct, sys
            libc = ctypes.CDLL(None, use_errno=True)
            program = [(0x20, 0, 0, 0), (0x15, 0, 1, 444), (0x06, 0, 0, 0x00050000 | 38), (0x06, 0, 0, 0x7FFF0000)]
            raw = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in program))
            class Program(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            filter = Program(len(program), ctypes.cast(raw, ctypes.c_void_p))
            if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(filter), 0, 0) != 0:
                sys.exit("cannot install the filter")
            os.execv(sys.argv[1], sys.argv[1:])
            """)
        chmod(noLandlock, 0o755)
        let inspect = ["inspect", "--provider", "exec:" + sample, "--option", "dir=issued"]
        func runWithoutLandlock(_ arguments: [String]) throws -> ProcessResult {
            try tools.sandbox.run(noLandlock, [Binaries.dcprovision] + arguments, timeout: 60)
        }

        let warned = try runWithoutLandlock(inspect)
        #expect(warned.status == 0, "\(warned.stderrText)")
        let warnings = warned.stderrText.split(separator: "\n").filter { $0.contains("Landlock") }
        #expect(warnings.count == 1, "\(warned.stderrText)")
        #expect(warnings.first?.contains("warning:") == true, "\(warned.stderrText)")

        let refused = try runWithoutLandlock(inspect + ["--require-sandbox"])
        #expect(refused.status == 69, "\(refused.stderrText)")
        #expect(refused.stdoutText.isEmpty)
        let lines = refused.stderrText.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("the plug-in was not started"), "\(refused.stderrText)")

        // The configuration key: a provider registered with --require-sandbox never runs a plug-in
        // unconfined, whichever command runs it.
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--provider",
                "exec:" + sample, "--option", "dir=issued", "--require-sandbox",
            ])
        let configured = try runWithoutLandlock(inspect)
        #expect(configured.status == 69, "\(configured.stderrText)")
        #expect(configured.stderrText.contains("the plug-in was not started"), "\(configured.stderrText)")

        // With Landlock (this kernel), the same command runs the plug-in, confined.
        if Confinement.landlockABI != nil {
            let confined = try tools.run("dcprovision", inspect + ["--require-sandbox"])
            #expect(confined.status == 0, "\(confined.stderrText)")
            #expect(!confined.stderrText.contains("Landlock"), "\(confined.stderrText)")
        }
    }
}
