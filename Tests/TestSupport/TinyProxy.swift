import Foundation

/// Debian's tinyproxy, an HTTP proxy that opens `CONNECT` tunnels, run in the foreground from a
/// configuration in a sandbox on `127.0.0.1:PORT`, its log there: the proxy a client behind a
/// corporate firewall is told of in `https_proxy`.
public struct TinyProxy: Sendable {
    /// The proxy process.
    public let process: SpawnedProcess
    /// Its log: one line per connection and tunnel (`CONNECT host:port`…).
    public let log: String

    /// Writes the configuration (only 127.0.0.1 may connect; every port may be tunnelled to) and
    /// starts tinyproxy; returns once it accepts connections on `port`, or throws with its log
    /// when it ends or does not within 30 s.
    public init(in sandbox: Sandbox, port: Int) throws {
        let directory = sandbox.file("tinyproxy")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        log = directory + "/tinyproxy.log"
        // As root tinyproxy would change to the user its configuration names: it stays root here.
        let configuration = try sandbox.write(
            "tinyproxy/tinyproxy.conf",
            """
            Port \(port)
            Listen 127.0.0.1
            Timeout 30
            LogFile "\(log)"
            LogLevel Info
            MaxClients 16
            Allow 127.0.0.1

            """ + (getuid() == 0 ? "User root\nGroup root\n" : ""))
        process = try SpawnedProcess(
            try which("tinyproxy"), ["-d", "-c", configuration], environment: sandbox.environment,
            output: directory + "/tinyproxy.out")
        let deadline = ContinuousClock.now + .seconds(30)
        while !localPortAccepts(port) {
            var status: Int32 = 0
            let exited = waitpid(process.pid, &status, WNOHANG) == process.pid
            if exited || ContinuousClock.now >= deadline {
                if !exited { stop() }
                throw RunningService.StartFailure(
                    description: "tinyproxy did not start: "
                        + RunningService.readLog(directory + "/tinyproxy.out") + RunningService.readLog(log))
            }
            usleep(20_000)
        }
    }

    /// What the proxy has logged so far.
    public var logText: String { RunningService.readLog(log) }

    /// Stops tinyproxy (SIGTERM, then by force).
    public func stop() {
        process.kill(SIGTERM)
        if process.wait(timeout: .seconds(10)) == nil { process.kill() }
    }
}
