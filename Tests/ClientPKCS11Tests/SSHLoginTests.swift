import Foundation
import TestSupport
import Testing

/// A throwaway OpenSSH server on a free port of 127.0.0.1 that trusts the derived authentication
/// key (the line `ssh-keygen -D` prints for `CKA_ID` 01), and the ssh and ssh-agent commands that
/// log in to it through the module. Everything is in the app's sandbox: the host key, the
/// configuration, `authorized_keys`, the pid file, the known hosts, the agent's socket.
///
/// sshd runs as the test's user and lets that user alone in. As root it separates privileges and
/// needs `/run/sshd`, which Debian's openssh-server makes at boot (systemd-tmpfiles) and a
/// container may lack: sshd gets a `/run` of its own, a directory of the sandbox bind-mounted in a
/// private mount namespace, so the machine's `/run` is neither needed nor touched. An ordinary
/// user's sshd runs unprivileged, but the suite's ordinary user has `/usr/sbin/nologin` for a
/// shell, which would refuse the command: that sshd runs in a user and mount namespace of its own
/// where `/etc/passwd` is the sandbox's copy giving the user `/bin/sh` and the sandbox's home.
struct LocalSSHD {
    let tokens: TwoAppTokens
    let directory: String
    let port: Int
    let user = String(cString: getpwuid(getuid()).pointee.pw_name)
    let daemon: SpawnedProcess
    /// The `ssh-keygen -D` line of the authentication key: what `authorized_keys` holds.
    let authenticationKey: String

    init(_ tokens: TwoAppTokens) async throws {
        self.tokens = tokens
        let sshd = "/usr/sbin/sshd"
        try #require(FileManager.default.isExecutableFile(atPath: sshd), "sshd is missing: install openssh-server")
        directory = tokens.sandbox.file("sshd")
        try FileManager.default.createDirectory(atPath: directory + "/run", withIntermediateDirectories: true)
        let hostKey = try tokens.sandbox.run(
            "/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", directory + "/host_key"])
        try #require(hostKey.status == 0, "\(hostKey.stderrText)")
        let listed = try tokens.sandbox.run("/usr/bin/ssh-keygen", ["-D", tokens.module])
        let line = listed.stdoutText.split(separator: "\n").first { $0.hasSuffix("PIV AUTH pubkey (authentication)") }
        authenticationKey = String(try #require(line, "ssh-keygen -D: \(listed.stdoutText)\(listed.stderrText)"))
        try tokens.sandbox.write("sshd/authorized_keys", authenticationKey + "\n")
        port = try freeLocalPort()
        let configuration = try tokens.sandbox.write(
            "sshd/sshd_config",
            """
            ListenAddress 127.0.0.1
            Port \(port)
            HostKey \(directory)/host_key
            PidFile \(directory)/sshd.pid
            AuthorizedKeysFile \(directory)/authorized_keys
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            PermitRootLogin prohibit-password

            """)
        let script: String
        var wrapper = ["--mount"]
        if getuid() == 0 {
            script = "mount --bind \"$1\" /run && mkdir -m 755 /run/sshd && exec \(sshd) -D -e -f \"$2\""
        } else {
            let passwd = try readText("/etc/passwd").split(separator: "\n").map { entry in
                var fields = entry.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
                if fields.count == 7 && fields[2] == String(getuid()) {
                    fields[5] = tokens.sandbox.home
                    fields[6] = "/bin/sh"
                }
                return fields.joined(separator: ":")
            }
            try tokens.sandbox.write("sshd/passwd", passwd.joined(separator: "\n") + "\n")
            wrapper += ["--user", "--map-user=\(getuid())", "--map-group=\(getgid())", "--keep-caps"]
            script = "mount --bind \"$1\" /etc/passwd && exec \(sshd) -D -e -f \"$2\""
        }
        let argument = getuid() == 0 ? directory + "/run" : directory + "/passwd"
        daemon = try SpawnedProcess(
            "/usr/bin/unshare", wrapper + ["/bin/sh", "-c", script, "sh", argument, configuration],
            environment: tokens.sandbox.environment, output: directory + "/log")
        for _ in 0..<200 where !log.contains("Server listening") {
            try await Task.sleep(for: .milliseconds(50))
        }
        if !log.contains("Server listening on 127.0.0.1 port \(port)") { stop() }
        try #require(log.contains("Server listening on 127.0.0.1 port \(port)"), "sshd did not start: \(log)")
    }

    /// What sshd wrote (`-e`: its log goes to standard error).
    var log: String { (try? readText(directory + "/log")) ?? "" }

    /// Stops sshd and the sessions it forked, or `process` (ssh-agent) and its PKCS#11 helper:
    /// the process group.
    func stop(_ process: SpawnedProcess? = nil) {
        let process = process ?? daemon
        kill(-process.pid, SIGTERM)
        process.wait(timeout: .seconds(10))
    }

    /// `ssh -F /dev/null … user@127.0.0.1 echo logged-in` with `options`: the server's key is
    /// learned into the sandbox's known hosts, and the only key offered is the authentication key
    /// (`IdentitiesOnly`), so no key of the account's own `~/.ssh` is read.
    func login(_ options: [String], environment: [String: String] = [:]) throws -> ProcessResult {
        try tokens.sandbox.run(
            "/usr/bin/ssh",
            [
                "-F", "/dev/null", "-o", "UserKnownHostsFile=\(directory)/known_hosts", "-o",
                "StrictHostKeyChecking=accept-new", "-o", "IdentitiesOnly=yes", "-o",
                "IdentityFile=\(directory)/authorized_keys", "-o", "ConnectTimeout=20", "-p", String(port),
            ] + options + ["\(user)@127.0.0.1", "echo", "logged-in"], environment: environment, timeout: 60)
    }

    /// The environment that makes ssh and ssh-add ask the PIN through an askpass program with
    /// no terminal: the program prints the first line of `pass.txt`, so the passphrase is in
    /// neither an argv nor an environment.
    func askpass() throws -> [String: String] {
        let program = try tokens.sandbox.write(
            "sshd/askpass", "#!/bin/sh\nexec head -n 1 '\(tokens.sandbox.file("pass.txt"))'\n")
        chmod(program, 0o700)
        return ["SSH_ASKPASS": program, "SSH_ASKPASS_REQUIRE": "force"]
    }

    /// Starts `ssh-agent -D` with its socket in the sandbox, allowed to load the module (by its
    /// real path: the agent matches `-P` against it, and refuses any provider outside
    /// `/usr/lib*/` otherwise).
    func agent() async throws -> (process: SpawnedProcess, socket: String) {
        let socket = directory + "/agent.sock"
        let module = URL(fileURLWithPath: tokens.module).resolvingSymlinksInPath().path
        let process = try SpawnedProcess(
            "/usr/bin/ssh-agent", ["-D", "-a", socket, "-P", module], environment: tokens.sandbox.environment,
            output: directory + "/agent.log")
        // The socket's file appears at bind(2), a moment before the agent listens: wait until it
        // answers (`ssh-add -l` exits 2 only when it cannot reach the agent).
        func answers() throws -> Bool {
            guard FileManager.default.fileExists(atPath: socket) else { return false }
            return try sshAdd(["-l"], socket: socket).status != 2
        }
        for _ in 0..<200 where !(try answers()) {
            try await Task.sleep(for: .milliseconds(50))
        }
        let started = try answers()
        if !started { stop(process) }
        try #require(started, "ssh-agent did not start")
        return (process, socket)
    }

    /// Runs `ssh-add ARGUMENTS` against the agent at `socket`.
    func sshAdd(_ arguments: [String], socket: String, environment: [String: String] = [:]) throws -> ProcessResult {
        try tokens.sandbox.run(
            "/usr/bin/ssh-add", arguments, environment: environment.merging(["SSH_AUTH_SOCK": socket]) { $1 },
            timeout: 60)
    }

    /// Whether `result` is a login that ran the command.
    func loggedIn(_ result: ProcessResult) -> Bool { result.status == 0 && result.stdoutText == "logged-in\n" }

    /// Whether `result` is a login sshd refused.
    func refused(_ result: ProcessResult) -> Bool {
        result.status == 255 && result.stderrText.contains("Permission denied (publickey)")
            && !result.stdoutText.contains("logged-in")
    }
}

@Suite("ssh and ssh-agent log in with the derived authentication key", .ownThreads, .timeLimit(.minutes(5)))
struct SSHLoginTests {
    @Test(
        "ssh -I and ssh-add -s take the store passphrase as the PIN through SSH_ASKPASS and log in to sshd with the key ssh-keygen -D printed; after dcclient lock the agent's key is refused until the card is added again with the passphrase"
    )
    func passphraseLogin() async throws {
        let tokens = try TwoAppTokens("ssh-login", apps: ["mail"])
        defer { tokens.sandbox.remove() }
        let server = try await LocalSSHD(tokens)
        defer { server.stop() }
        let askpass = try server.askpass()

        let direct = try server.login(["-I", tokens.module], environment: askpass)
        #expect(server.loggedIn(direct), "\(direct.stdoutText)\(direct.stderrText)\n\(server.log)")
        let fingerprint = try tokens.sandbox.run(
            "/usr/bin/ssh-keygen", ["-l", "-f", server.directory + "/authorized_keys"]
        ).stdoutText.split(separator: " ").dropFirst().first.map(String.init)
        #expect(
            server.log.contains("Accepted publickey for \(server.user) from 127.0.0.1")
                && server.log.contains("ECDSA \(fingerprint ?? "?")"), "\(server.log)")

        let (agent, socket) = try await server.agent()
        defer { server.stop(agent) }
        let added = try server.sshAdd(["-s", tokens.module], socket: socket, environment: askpass)
        #expect(added.status == 0, "\(added.stderrText)")
        let listed = try server.sshAdd(["-L"], socket: socket).stdoutText
        #expect(listed.contains(server.authenticationKey), "\(listed)")
        let throughAgent = try server.login(["-o", "BatchMode=yes", "-o", "IdentityAgent=\(socket)"])
        #expect(server.loggedIn(throughAgent), "\(throughAgent.stderrText)")

        // Locked: the module logged the agent's session out; the agent still lists the key, and
        // its signature is refused (CKR_USER_NOT_LOGGED_IN; ssh-agent does not log in again).
        try tokens.check("dcclient", ["lock", "--app", "mail"])
        #expect(try server.sshAdd(["-L"], socket: socket).stdoutText.contains(server.authenticationKey))
        let agentLocked = try server.login(["-o", "BatchMode=yes", "-o", "IdentityAgent=\(socket)"])
        #expect(server.refused(agentLocked), "\(agentLocked.stderrText)")
        #expect(agentLocked.stderrText.contains("agent refused operation"), "\(agentLocked.stderrText)")

        // Giving the passphrase again is unlocking (C_Login unlocks the client): the card added
        // again logs in through the agent.
        #expect(try server.sshAdd(["-e", tokens.module], socket: socket).status == 0)
        #expect(try server.sshAdd(["-s", tokens.module], socket: socket, environment: askpass).status == 0)
        let again = try server.login(["-o", "BatchMode=yes", "-o", "IdentityAgent=\(socket)"])
        #expect(server.loggedIn(again), "\(again.stderrText)")
    }

    @Test(
        "With --token-login secure-services, ssh -I and ssh-agent log in with no PIN while the client is unlocked; after dcclient lock neither logs in; after dcclient unlock both do again, the agent without adding the card again"
    )
    func loginFollowsTheLock() async throws {
        let tokens = try TwoAppTokens("ssh-lock", apps: ["mail"])
        defer { tokens.sandbox.remove() }
        try tokens.check(
            "dcprovision", ["policy", "--client-scheme", "org.example.mail", "--token-login", "secure-services"])
        let server = try await LocalSSHD(tokens)
        defer { server.stop() }
        let (agent, socket) = try await server.agent()
        defer { server.stop(agent) }
        // No askpass and no terminal: nothing could give a PIN.
        let added = try server.sshAdd(["-s", tokens.module], socket: socket)
        #expect(added.status == 0, "\(added.stderrText)")
        func direct() throws -> ProcessResult { try server.login(["-o", "BatchMode=yes", "-I", tokens.module]) }
        func throughAgent() throws -> ProcessResult {
            try server.login(["-o", "BatchMode=yes", "-o", "IdentityAgent=\(socket)"])
        }
        for (name, login) in [("ssh -I", direct), ("ssh-agent", throughAgent)] {
            let unlocked = try login()
            #expect(server.loggedIn(unlocked), "\(name): \(unlocked.stderrText)\n\(server.log)")
        }

        try tokens.check("dcclient", ["lock", "--app", "mail"])
        for (name, login) in [("ssh -I", direct), ("ssh-agent", throughAgent)] {
            let locked = try login()
            #expect(server.refused(locked), "\(name): \(locked.stdoutText)\(locked.stderrText)")
        }

        try tokens.check("dcclient", ["unlock", "--app", "mail", "--passphrase-file", "pass.txt"])
        for (name, login) in [("ssh -I", direct), ("ssh-agent", throughAgent)] {
            let unlocked = try login()
            #expect(server.loggedIn(unlocked), "\(name): \(unlocked.stderrText)")
        }
        let accepted = server.log.components(separatedBy: "Accepted publickey for \(server.user) ").count - 1
        #expect(accepted == 4, "\(server.log)")
    }
}
