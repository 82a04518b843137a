import Foundation

/// Debian's nginx, run in the foreground from a configuration in a sandbox (unprivileged, or as
/// root), every file it writes under its prefix there: the one way the tests start nginx, whether
/// as a TLS server asking for client certificates or as a load balancer in front of dcverify.
public struct NginxServer: Sendable {
    /// The directory nginx runs in (`-p`): its configuration, pid file, logs and temporary files.
    public let prefix: String
    /// The nginx master process (its workers are in its process group).
    public let process: SpawnedProcess

    /// Writes `PREFIX/nginx.conf`, where `PREFIX` is the sandbox's `directory`: one worker (as root,
    /// its workers stay root with `servesFiles`, so they read files the sandbox keeps private), the
    /// pid file and error log (at `errorLogLevel`) under the prefix, and an `http` block with every
    /// temporary path under the prefix and `http` (access log, upstreams, servers) inside it. Then
    /// starts nginx and returns once it listens (its pid file exists: nginx writes it after it has
    /// opened its listening sockets). When nginx exits or does not start within `timeout`, it is
    /// stopped and the error says what it wrote.
    public init(
        in sandbox: Sandbox, directory: String = "nginx", errorLogLevel: String = "warn", servesFiles: Bool = false,
        http: String, timeout: Duration = .seconds(30)
    ) async throws {
        let prefix = sandbox.file(directory)
        try FileManager.default.createDirectory(atPath: prefix + "/logs", withIntermediateDirectories: true)
        try sandbox.write(
            directory + "/nginx.conf",
            (servesFiles && getuid() == 0 ? "user root;\n" : "") + """
                worker_processes 1;
                pid \(prefix)/nginx.pid;
                error_log \(prefix)/logs/error.log \(errorLogLevel);
                events { worker_connections 64; }
                http {
                  client_body_temp_path \(prefix)/client_body;
                  proxy_temp_path \(prefix)/proxy;
                  fastcgi_temp_path \(prefix)/fastcgi;
                  uwsgi_temp_path \(prefix)/uwsgi;
                  scgi_temp_path \(prefix)/scgi;
                \(http.split(separator: "\n", omittingEmptySubsequences: false).map { "  " + $0 }.joined(separator: "\n"))
                }

                """)
        let output = prefix + "/nginx.out"
        let process = try SpawnedProcess(
            try Self.path(),
            ["-p", prefix, "-e", prefix + "/logs/error.log", "-c", prefix + "/nginx.conf", "-g", "daemon off;"],
            environment: sandbox.environment, output: output)
        self.prefix = prefix
        self.process = process
        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while !FileManager.default.fileExists(atPath: prefix + "/nginx.pid") {
            let exited = waitpid(process.pid, &status, WNOHANG) == process.pid
            if exited || ContinuousClock.now >= deadline {
                if !exited { stop() }
                let said = [output, prefix + "/logs/error.log"].compactMap {
                    try? String(contentsOfFile: $0, encoding: .utf8)
                }
                throw NginxFailure(
                    description: "nginx did not start within \(timeout)" + (exited ? " (it exited)" : "") + ": "
                        + said.joined().suffix(2000))
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Stops nginx: gracefully (SIGQUIT), then by force after ten seconds.
    public func stop() {
        process.kill(SIGQUIT)
        if process.wait(timeout: .seconds(10)) == nil { process.kill() }
    }

    /// Where Debian puts nginx (/usr/sbin is not on every user's PATH), else the PATH's.
    public static func path() throws -> String {
        for path in ["/usr/sbin/nginx", "/usr/bin/nginx"] where access(path, X_OK) == 0 { return path }
        return try which("nginx")
    }
}

/// nginx did not start; the description carries the end of what it wrote.
public struct NginxFailure: Error, CustomStringConvertible {
    /// What happened, with nginx's own last words.
    public let description: String
}
