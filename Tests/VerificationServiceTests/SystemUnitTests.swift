import Foundation
import ServiceHarness
import TestSupport
import Testing

/// The hardened system unit `packaging/systemd/dcverify.service.in` ships. systemd is not PID 1 on
/// this machine, so the unit cannot be started here: systemd's own `systemd-analyze verify` and
/// `security` judge the file, and dcverify is run under what the unit imposes as far as the kernel
/// lets a test impose it without systemd — no capabilities, no_new_privs, another user (as root; a
/// user namespace's unprivileged root otherwise), the whole file system read-only — from the
/// unit's own ExecStart line and the example configuration `scripts/install` ships.
@Suite("The dcverify system unit", .ownThreads, .timeLimit(.minutes(2)))
struct SystemUnitTests {
    static let template = Repository.root + "/packaging/systemd/dcverify.service.in"

    @Test("systemd-analyze verify accepts the unit; security rates its exposure OK (at most 2.0 of 10)")
    func judgedBySystemd() throws {
        let sandbox = try Sandbox("unit-verify")
        defer { sandbox.remove() }
        let text = try String(contentsOfFile: Self.template, encoding: .utf8)
        let unit = try sandbox.write(
            "dcverify.service", text.replacingOccurrences(of: "@bindir@", with: Binaries.directory))
        let verified = try sandbox.run("/usr/bin/systemd-analyze", ["verify", "--man=no", unit], timeout: 60)
        #expect(verified.status == 0, "\(verified.stdoutText)\(verified.stderrText)")
        let security = try sandbox.run(
            "/usr/bin/systemd-analyze", ["security", "--offline=yes", "--threshold=20", unit], timeout: 60)
        #expect(security.status == 0, "\(security.stdoutText.split(separator: "\n").last ?? "")")
        for setting in [
            "DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes",
            "CapabilityBoundingSet=\n",
            "Restart=on-failure", "ExecReload=/bin/kill -HUP $MAINPID",
        ] {
            #expect(text.contains(setting), "\(setting)")
        }
        // A mistake is not accepted: the check can fail.
        let broken = try sandbox.write(
            "broken.service", text.replacingOccurrences(of: "@bindir@", with: "/nonexistent"))
        #expect(try sandbox.run("/usr/bin/systemd-analyze", ["verify", "--man=no", broken], timeout: 60).status != 0)
    }

    /// The system calls a group of systemd's names (`@system-service`), its nested groups expanded,
    /// as `systemd-analyze syscall-filter` lists them.
    static func syscalls(in group: String, sandbox: Sandbox) throws -> Set<String> {
        let listed = try sandbox.run("/usr/bin/systemd-analyze", ["syscall-filter", group], timeout: 60)
        var names: Set<String> = []
        for line in listed.stdoutText.split(separator: "\n").dropFirst() {
            let word = line.trimmingCharacters(in: .whitespaces)
            guard !word.isEmpty, !word.hasPrefix("#") else { continue }
            if word.hasPrefix("@") {
                names.formUnion(try syscalls(in: word, sandbox: sandbox))
            } else {
                names.insert(word)
            }
        }
        return names
    }

    @Test(
        "Every system call dcverify makes serving (strace -f) is one the unit's filter allows, and none it denies: the filter cannot kill it"
    )
    func systemCallsAllowed() throws {
        let sandbox = try Sandbox("unit-syscalls")
        defer { sandbox.remove() }
        let unit = try String(contentsOfFile: Self.template, encoding: .utf8)
        let filters = unit.split(separator: "\n").filter { $0.hasPrefix("SystemCallFilter=") }
            .map { $0.dropFirst("SystemCallFilter=".count) }
        let allowed = try filters.filter { !$0.hasPrefix("~") }.flatMap { $0.split(separator: " ") }
            .reduce(into: Set<String>()) { $0.formUnion(try Self.syscalls(in: String($1), sandbox: sandbox)) }
        let denied = try filters.filter { $0.hasPrefix("~") }.flatMap { $0.dropFirst().split(separator: " ") }
            .reduce(into: Set<String>()) { $0.formUnion(try Self.syscalls(in: String($1), sandbox: sandbox)) }
        #expect(allowed.contains("read") && denied.contains("setuid"), "\(allowed.count) \(denied.count)")
        // dcverify as the example configuration runs it (JSON log, metrics), under strace, serving a
        // verification, the probes and a scrape, then stopped with SIGTERM as systemd stops it.
        let trace = sandbox.file("strace.out")
        let port = try freeLocalPort()
        let metrics = try freeLocalPort()
        let service = try RunningService.start(
            "/usr/bin/strace",
            [
                "-f", "-qq", "-o", trace, Binaries.dcverify, "serve", "--listen", "127.0.0.1:\(port)",
                "--metrics-listen",
                "127.0.0.1:\(metrics)", "--log-format", "json",
            ] + (try Tokens.files(in: sandbox)), in: sandbox)
        _ = try rawRequest(port: service.port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])
        _ = try rawRequest(port: service.port, "/ready", method: "HEAD")
        _ = try curl(["http://127.0.0.1:\(metrics)/metrics"], sandbox: sandbox)
        // The signals go to dcverify, strace's child; strace ends with it, with its status.
        let child = try run("/usr/bin/pgrep", ["-P", String(service.process.pid)]).stdoutText
        let pid = try #require(pid_t(child.trimmingCharacters(in: .whitespacesAndNewlines)), "\(child)")
        kill(pid, SIGHUP)
        usleep(300_000)
        kill(pid, SIGTERM)
        let status = service.process.wait(timeout: .seconds(30))
        #expect(status.map { ($0 >> 8) & 0xFF } == 0, "\(String(describing: status)) \(service.logText)")
        let text = try String(contentsOfFile: trace, encoding: .utf8)
        // "PID name(args…) = result", "PID <... name resumed> …": the call's name.
        var used: Set<String> = []
        for line in text.split(separator: "\n") {
            let rest = line.drop { $0 != " " }.drop { $0 == " " }
            if rest.hasPrefix("<... ") {
                used.insert(String(rest.dropFirst(5).prefix { $0 != " " }))
            } else if let open = rest.firstIndex(of: "("),
                rest[..<open].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" })
            {
                used.insert(String(rest[..<open]))
            }
        }
        #expect(used.count > 20, "\(used.sorted())")
        // The program's own start before main (execve) is made by strace's child, not the service.
        used.remove("execve")
        #expect(used.subtracting(allowed).isEmpty, "outside @system-service: \(used.subtracting(allowed).sorted())")
        #expect(used.intersection(denied).isEmpty, "denied by the unit: \(used.intersection(denied).sorted())")
    }

    @Test(
        "The unit's ExecStart, with the example configuration, serves under no capabilities, no_new_privs, another user and a read-only file system"
    )
    func servesConfined() throws {
        let sandbox = try Sandbox("unit-confined")
        defer { sandbox.remove() }
        // What the service reads, readable by any user (it runs as another one); the port file's
        // directory is the one place left writable (the unit writes nowhere; the test needs the port).
        let etc = sandbox.file("service")
        try FileManager.default.createDirectory(atPath: etc + "/run", withIntermediateDirectories: true)
        let files = try Tokens.files(in: sandbox)
        let port = try freeLocalPort()
        let example = try String(
            contentsOfFile: Repository.root + "/packaging/dcverify/config.example.json", encoding: .utf8)
        var configuration = try #require(
            try JSONSerialization.jsonObject(with: Data(example.utf8)) as? [String: Any])
        #expect(configuration["metrics-listen"] as? String == "127.0.0.1:9464")
        configuration["issuers"] = files[1]
        configuration["revocations"] = files[3]
        configuration["listen"] = "127.0.0.1:\(port)"
        configuration["metrics-listen"] = "127.0.0.1:\(try freeLocalPort())"
        configuration["port-file"] = etc + "/run/port"
        let config = etc + "/config.json"
        try JSONSerialization.data(withJSONObject: configuration).write(to: URL(fileURLWithPath: config))
        for path in [sandbox.directory.path, etc, etc + "/run", config, files[1], files[3]] {
            chmod(
                path,
                path == etc + "/run" ? 0o777 : (path.hasSuffix(".json") || path.hasSuffix(".jwks") ? 0o644 : 0o755))
        }
        // The unit's command line, with its configuration path pointed at ours.
        let unit = try String(contentsOfFile: Self.template, encoding: .utf8)
        let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        let command =
            execStart.dropFirst("ExecStart=".count).replacingOccurrences(of: "@bindir@", with: Binaries.directory)
            .replacingOccurrences(of: "/etc/dcverify/config.json", with: config)
        #expect(command.hasSuffix("dcverify serve --config \(config)"))
        let root = geteuid() == 0
        let namespace = root ? ["--mount"] : ["--user", "--map-root-user", "--mount"]
        let user = root ? ["--reuid", "61234", "--regid", "61234", "--clear-groups"] : []
        let script = """
            set -e
            mount -o remount,bind,ro /
            mount --bind "$1" "$1" && mount -o remount,bind,rw "$1"
            shift
            exec setpriv \(user.joined(separator: " ")) --no-new-privs --inh-caps=-all --bounding-set=-all "$@"
            """
        let log = sandbox.file("confined.log")
        let child = try SpawnedProcess(
            "/usr/bin/unshare",
            namespace + ["--propagation", "private", "/bin/bash", "-c", script, "_", etc + "/run"]
                + command.split(separator: " ").map(String.init),
            environment: sandbox.environment, output: log)
        defer {
            child.kill(SIGTERM)
            _ = child.wait(timeout: .seconds(20))
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !FileManager.default.fileExists(atPath: etc + "/run/port"), ContinuousClock.now < deadline {
            usleep(50_000)
        }
        let ready = try rawRequest(port: port, "/ready")
        #expect(ready?.status == 200, "\(RunningService.readLog(log))")
        let valid = try rawRequest(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", Tokens.valid)])
        #expect(valid?.values("X-Good-GD-AuthResponseCode") == ["100 OK"], "\(RunningService.readLog(log))")
        // It could write nothing: not even a file beside its configuration.
        let written = try FileManager.default.contentsOfDirectory(atPath: etc).sorted()
        #expect(written == ["config.json", "run"], "\(written)")
        // The example configuration's JSON log.
        let first = RunningService.readLog(log).split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.hasPrefix("{\"time\":"), "\(first)")
    }
}
