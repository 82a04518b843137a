import AuthTokens
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
    /// The verification service, when it is built next to dcprovision; without it the demo
    /// verifies auth tokens in its own process.
    let dcverify: String?
    let passphrase: String

    /// Makes the runtime directory when it is inside the sandbox, checks that dcclient is next to
    /// dcprovision, looks for dcverify there, and writes a fresh passphrase for the client's store.
    init(path sandbox: String, runtime: String) throws {
        path = sandbox
        var environment = [
            "HOME": sandbox + "/home", "XDG_CONFIG_HOME": sandbox + "/home/.config",
            "XDG_DATA_HOME": sandbox + "/home/.local/share",
            "XDG_STATE_HOME": sandbox + "/home/.local/state", "XDG_CACHE_HOME": sandbox + "/home/.cache",
            "XDG_RUNTIME_DIR": runtime, "XDG_CONFIG_DIRS": sandbox + "/etc/xdg",
            "XDG_DATA_DIRS": sandbox + "/usr/share",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ]
        // The pcscd the card steps reach, when the caller names one (a virtual card's own pcscd).
        if let socket = ProcessInfo.processInfo.environment["PCSCLITE_CSOCK_NAME"] {
            environment["PCSCLITE_CSOCK_NAME"] = socket
        }
        self.environment = environment
        guard runtime != sandbox + "/run" || mkdir(runtime, 0o700) == 0 else {
            throw DCError(.cannotCreateOutput, "cannot create the sandbox's runtime directory")
        }
        dcprovision = Tool.executablePath
        dcclient = (dcprovision as NSString).deletingLastPathComponent + "/dcclient"
        guard FileManager.default.isExecutableFile(atPath: dcclient) else {
            throw DCError(
                .fileNotFound, "dcclient is not next to dcprovision", subject: dcclient,
                hint: "build them all (swift build), or run the demo with swift run dcprovision demo")
        }
        let verificationService = (dcprovision as NSString).deletingLastPathComponent + "/dcverify"
        dcverify = FileManager.default.isExecutableFile(atPath: verificationService) ? verificationService : nil
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

/// The verification service the demo's application server asks: dcverify in the background, or
/// the same verifier in the demo's own process when dcverify is not built.
enum DemoVerificationService {
    /// dcverify, started in the background.
    case background(DemoBackgroundService)
    /// The verifier in the demo's process, when no dcverify is built.
    case inProcess(DemoInProcessVerifier)

    /// Where the application server sends its questions, once the service is ready.
    func verifier(sandbox: String) async throws -> DemoTokenVerifier {
        switch self {
        case .background(let server): .service(port: try await server.waitForPort(sandbox: sandbox), step: server.step)
        case .inProcess(let verifier): .inProcess(verifier)
        }
    }

    /// Stops the background dcverify, if there is one.
    func stop() async {
        if case .background(let server) = self { await server.stop() }
    }
}

/// Where one question about a token goes.
enum DemoTokenVerifier {
    /// dcverify, listening on `port`, started at step `step`.
    case service(port: Int, step: Int)
    /// The verifier in the demo's process.
    case inProcess(DemoInProcessVerifier)

    /// Who answers, as the step titles name it.
    var name: String {
        switch self {
        case .service: "dcverify"
        case .inProcess: "the verifier"
        }
    }

    /// What its answer is called in the step title.
    var answer: String {
        switch self {
        case .service: "the answer's headers"
        case .inProcess: "its verdict"
        }
    }

    /// The question, as the demo prints it.
    var request: String {
        switch self {
        case .service(let port, let step):
            "GET http://127.0.0.1:\(port)/verifyGDAuthToken with X-Good-GD-AuthToken: <the token> (dcverify, started at step \(step))"
        case .inProcess:
            "AuthTokenVerifier.verify(<the token>), trusting the provider's issuers.jwks and revocations.json (read now)"
        }
    }
}

/// dcverify's verifier, in the demo's process: the provider's trusted issuing keys and revocation
/// list, read again for every question.
struct DemoInProcessVerifier {
    let issuers: String
    let revocations: String

    /// The verdict on `token` now, in the lines the demo prints.
    func answer(_ token: String) throws -> [String] {
        let verifier = AuthTokenVerifier(
            issuers: try TrustedIssuers.load(from: issuers), revocations: try RevocationList.load(from: revocations))
        let verdict = verifier.verify(token, now: Date())
        var lines = ["response code: \(verdict.responseCode)"]
        if let identity = verdict.identity {
            lines += [
                "user: \(identity.userID)", "app: \(identity.appID)", "container: \(identity.containerID)",
                "server: \(identity.serverName)", "challenge: \(identity.challenge)",
            ]
        }
        return lines
    }
}

/// The application server's question about the app's auth token, and where it goes.
struct DemoTokenCheck {
    let verifier: DemoTokenVerifier
    let token: String

    /// The answer, in the lines the demo prints: for dcverify, the status line and the
    /// `X-Good-GD-` headers of one `GET /verifyGDAuthToken` with the token.
    func ask() throws -> [String] {
        switch verifier {
        case .service(let port, _):
            let answer = try DemoHTTP.get(port: port, "/verifyGDAuthToken", headers: [("X-Good-GD-AuthToken", token)])
            return ["HTTP \(answer.status)"]
                + answer.fields.filter { $0.name.hasPrefix("X-Good-GD-") }.map { "\($0.name): \($0.value)" }
        case .inProcess(let local):
            return try local.answer(token)
        }
    }
}
