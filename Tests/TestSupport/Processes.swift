import DerivedCredentials
import Foundation

/// The result of running a process to completion.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: [UInt8]
    public var stderr: [UInt8]
    /// The child was killed because it ran past its deadline.
    public var timedOut: Bool = false
    /// How long the child lived, measured by the runner thread (not by the test's executor).
    public var lifetime: Duration = .zero
    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
}

public struct ProcessFailure: Error, CustomStringConvertible {
    public var command: [String]
    public var result: ProcessResult
    public init(command: [String], result: ProcessResult) {
        self.command = command
        self.result = result
    }
    public var description: String {
        "\(command.joined(separator: " ")) exited \(result.status)\(result.timedOut ? " (killed: timed out)" : ""): "
            + result.stderrText
    }
}

/// Runs `executable` with `arguments` (an argv array, never a shell) and waits at most `timeout`
/// seconds: then its whole process group is killed and the result says `timedOut` (status 137).
///
/// It runs through the product's own runner, `ChildProcess`: pipes close-on-exec from birth, the
/// child inherits no descriptor but 0, 1 and 2, it gets a process group of its own, and reading
/// stops shortly after the kill even if a grandchild escaped the group with a pipe end. A test
/// that starts a process therefore cannot wait longer than its timeout plus a few seconds.
///
/// Without an `environment`, the child gets the process-wide ``Sandbox/shared()`` environment,
/// never the test process's own: no program a test starts sees the real `HOME` or `XDG_*`.
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, environment: [String: String]? = nil,
    currentDirectory: String? = nil, timeout: TimeInterval = 60
) throws -> ProcessResult {
    let path = executable.hasPrefix("/") ? executable : try which(executable)
    let outcome = try ChildProcess.runSynchronously(
        path, arguments: arguments, stdin: SecretBytes(stdin ?? []),
        environment: try environment ?? Sandbox.shared().environment,
        currentDirectory: currentDirectory,
        limits: .init(timeout: .milliseconds(Int(timeout * 1000)), stdoutLimit: 256 << 20, stderrLimit: 16 << 20))
    let status: Int32
    switch outcome.termination {
    case .exited(let code): status = code
    case .signaled(let signal): status = 128 + signal
    }
    return ProcessResult(
        status: status, stdout: outcome.stdout, stderr: outcome.stderr, timedOut: outcome.timedOut,
        lifetime: outcome.lifetime)
}

/// Runs and throws unless the exit status is 0.
@discardableResult
public func runChecked(_ executable: String, _ arguments: [String], stdin: [UInt8]? = nil) throws -> ProcessResult {
    let result = try run(executable, arguments, stdin: stdin)
    guard result.status == 0 else { throw ProcessFailure(command: [executable] + arguments, result: result) }
    return result
}

public func which(_ name: String) throws -> String {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let path = "\(directory)/\(name)"
        if access(path, X_OK) == 0 { return path }
    }
    throw ProcessFailure(
        command: [name], result: ProcessResult(status: 127, stdout: [], stderr: Array("not found".utf8)))
}

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "dctest") throws {
        var template = Array("\(NSTemporaryDirectory())/\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        path = String(cString: made)
    }

    public func file(_ name: String) -> String { path + "/" + name }

    /// Writes a file with O_CLOEXEC. (Foundation's Data.write does not set it: a process another
    /// test forks meanwhile would keep the descriptor for its whole life, and a script written this
    /// way could not be executed — ETXTBSY — until that process ends.)
    public func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let target = file(name)
        let fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            guard count > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            offset += count
        }
        return target
    }

    public func write(_ name: String, _ text: String) throws -> String { try write(name, Array(text.utf8)) }

    public func read(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: file(name))))
    }

    public func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// The code of the DCError `body` throws, or nil if it throws nothing (or something else).
public func thrownCode(_ body: () async throws -> Void) async -> DCError.Code? {
    do {
        try await body()
        return nil
    } catch let error as DCError {
        return error.code
    } catch {
        return nil
    }
}
