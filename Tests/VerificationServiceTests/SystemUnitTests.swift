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
