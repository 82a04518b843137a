import Foundation

/// One server process (dcverify, the table-verifier fixture, a test CA's OCSP responder) started
/// in a sandbox, its standard output and error in a log file, its port read from its port file.
public struct RunningService: Sendable {
    public let process: SpawnedProcess
    public let port: Int
    public let log: String

    /// Starts `executable` with `arguments` plus `--port-file`, and waits (at most 60 s) for the
    /// port file; throws with the log if the process ends or the file never appears.
    public static func start(
        _ executable: String, _ arguments: [String], in sandbox: Sandbox, name: String = "service"
    ) throws -> RunningService {
        let portFile = sandbox.file("\(name).port")
        let log = sandbox.file("\(name).log")
        let process = try SpawnedProcess(
            executable, arguments + ["--port-file", portFile], environment: sandbox.environment, output: log)
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8),
                let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return RunningService(process: process, port: port, log: log)
            }
            var status: Int32 = 0
            if waitpid(process.pid, &status, WNOHANG) == process.pid {
                throw StartFailure(description: "\(executable) ended (status \(status)): \(readLog(log))")
            }
            usleep(20_000)
        }
        process.kill()
        _ = process.wait(timeout: .seconds(10))
        throw StartFailure(description: "\(executable) wrote no port file in 60 s: \(readLog(log))")
    }

    public struct StartFailure: Error, CustomStringConvertible {
        public var description: String
    }

    /// What the process has logged so far.
    public var logText: String { Self.readLog(log) }

    public static func readLog(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    /// Sends SIGTERM and waits (bounded); returns the exit status, or nil if it had to be killed
    /// or was killed by a signal.
    @discardableResult
    public func stop(timeout: Duration = .seconds(30)) -> Int32? {
        process.kill(SIGTERM)
        guard let status = process.wait(timeout: timeout), !SpawnedProcess.wasSignaled(status) else { return nil }
        return (status >> 8) & 0xFF
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    public func url(_ path: String, scheme: String = "http") -> String { "\(scheme)://127.0.0.1:\(port)\(path)" }
}
