import CommandLineSupport
import DerivedCredentials
import Foundation
import Synchronization
import SystemSupport

/// Where the demo runs: its directory, the environment every step gets (every XDG base directory
/// inside the sandbox, so no step can reach the user's own), the three tools and the client's
/// passphrase file.
struct DemoSandbox: Sendable {
    let path: String
    let environment: [String: String]
    let dcprovision: String
    let dcclient: String
    let dcverify: String
    let passphrase: String

    /// Makes the runtime directory when it is inside the sandbox, checks that dcclient and
    /// dcverify are next to dcprovision, and writes a fresh passphrase for the client's store.
    init(path sandbox: String, runtime: String) throws {
        path = sandbox
        environment = [
            "HOME": sandbox + "/home", "XDG_CONFIG_HOME": sandbox + "/home/.config",
            "XDG_DATA_HOME": sandbox + "/home/.local/share",
            "XDG_STATE_HOME": sandbox + "/home/.local/state", "XDG_CACHE_HOME": sandbox + "/home/.cache",
            "XDG_RUNTIME_DIR": runtime, "XDG_CONFIG_DIRS": sandbox + "/etc/xdg",
            "XDG_DATA_DIRS": sandbox + "/usr/share",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        guard runtime != sandbox + "/run" || mkdir(runtime, 0o700) == 0 else {
            throw DCError(.cannotCreateOutput, "cannot create the sandbox's runtime directory")
        }
        dcprovision = Tool.executablePath
        dcclient = (dcprovision as NSString).deletingLastPathComponent + "/dcclient"
        dcverify = (dcprovision as NSString).deletingLastPathComponent + "/dcverify"
        for tool in [dcclient, dcverify] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw DCError(
                .fileNotFound, "\((tool as NSString).lastPathComponent) is not next to dcprovision", subject: tool,
                hint: "build them all (swift build), or run the demo with swift run dcprovision demo")
        }
        passphrase = sandbox + "/client-passphrase"
        try Data((UUID().uuidString + "\n").utf8).write(to: URL(fileURLWithPath: passphrase))
        chmod(passphrase, 0o600)
    }

    /// `text` as the demo prints it: the sandbox's path as `$SANDBOX`.
    func shown(_ text: String) -> String { text.replacingOccurrences(of: path, with: "$SANDBOX") }

    /// Runs one step's command in the sandbox, for a minute at most.
    func launch(_ command: DemoStep) async throws -> ChildProcess.Outcome {
        try await ChildProcess.run(
            command.executable, arguments: command.arguments, environment: environment,
            limits: .init(timeout: .seconds(60)))
    }
}

/// The demo's dcverify, running in the background from the step that started it until
/// ``stop()``.
struct DemoBackgroundService {
    /// The number of the step that started it.
    let step: Int
    /// The file it writes its port to once it listens.
    let portFile: String
    private let task: Task<ChildProcess.Outcome, any Error>
    private let ended: ServerEnd

    /// Starts `executable` with `arguments` in the sandbox, for two minutes at most.
    static func start(
        _ executable: String, _ arguments: [String], in box: DemoSandbox, step: Int, portFile: String
    ) -> DemoBackgroundService {
        let ended = ServerEnd()
        let task = Task {
            let result: Result<ChildProcess.Outcome, any Error>
            do {
                result = .success(
                    try await ChildProcess.run(
                        executable, arguments: arguments, environment: box.environment,
                        limits: .init(timeout: .seconds(120))))
            } catch {
                result = .failure(error)
            }
            ended.result.withLock { $0 = result }
            return try result.get()
        }
        return DemoBackgroundService(step: step, portFile: portFile, task: task, ended: ended)
    }

    /// The port it listens on, once it has written it (30 s at most); a server that ended
    /// instead says why at once.
    func waitForPort(sandbox: String) async throws -> Int {
        let listening = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < listening {
            if let port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap({
                Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }) {
                return port
            }
            switch ended.result.withLock({ $0 }) {
            case .success(let outcome):
                let message = String(decoding: outcome.stderr, as: UTF8.self)
                    .replacingOccurrences(of: sandbox, with: "$SANDBOX")
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                throw DCError(.notReady, "demo step \(step): dcverify ended (\(outcome.termination)): \(message)")
            case .failure(let error):
                throw DCError(.notReady, "demo step \(step): dcverify did not start: \(error)")
            case nil: break
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw DCError(.notReady, "demo step \(step): dcverify did not start listening")
    }

    /// Cancelling the task kills dcverify; waiting for it means no server outlives the demo.
    func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}

/// How the demo's background dcverify ended, if it did: set by the task that waits for it, read
/// while the demo waits for it to listen, so that a server that failed to start says why at once.
private final class ServerEnd: Sendable {
    let result = Mutex<Result<ChildProcess.Outcome, any Error>?>(nil)
}

/// What the application server needs to ask dcverify about the app's auth token.
struct DemoTokenCheck {
    let port: Int
    let token: String
    /// The step that started dcverify, for the printed request.
    let serverStep: Int

    /// One `GET /verifyGDAuthToken` with the token: the status and the header fields.
    func ask() throws -> (status: Int, fields: [(name: String, value: String)]) {
        try DemoHTTP.get(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
    }
}
