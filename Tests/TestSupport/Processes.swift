import DerivedCredentials
import Foundation

/// The result of running a process to completion.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: [UInt8]
    public var stderr: [UInt8]
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
        "\(command.joined(separator: " ")) exited \(result.status): \(result.stderrText)"
    }
}

/// Runs `executable` with `arguments` (an argv array, never a shell) and waits, killing it after
/// `timeout` seconds.
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, environment: [String: String]? = nil,
    currentDirectory: String? = nil, timeout: TimeInterval = 60
) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : try which(executable))
    process.arguments = arguments
    if let environment { process.environment = environment }
    if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
    let outPipe = Pipe()
    let errPipe = Pipe()
    let inPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    process.standardInput = inPipe
    try process.run()
    // Written from a thread that blocks SIGPIPE, so a child that exits without reading cannot kill
    // the test process. (Ignoring SIGPIPE process-wide would be inherited by every child we start
    // and hide their own SIGPIPE bugs.)
    let writer = Thread {
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
        if let stdin {
            stdin.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let count = write(
                        inPipe.fileHandleForWriting.fileDescriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if count <= 0 { break }
                    offset += count
                }
            }
        }
        try? inPipe.fileHandleForWriting.close()
    }
    writer.start()
    // Read both pipes concurrently so neither fills up.
    nonisolated(unsafe) var out = Data()
    nonisolated(unsafe) var err = Data()
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async {
        out = outPipe.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    group.enter()
    DispatchQueue.global().async {
        err = errPipe.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    if group.wait(timeout: .now() + timeout) == .timedOut {
        process.terminate()
        kill(process.processIdentifier, SIGKILL)
        group.wait()
    }
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, stdout: [UInt8](out), stderr: [UInt8](err))
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
