import Foundation
import Testing

extension Sandbox {
    /// Runs the built tool `tool` (`dcprovision`, `dcclient`, `dcverify`) inside the sandbox and,
    /// unless `status` is nil, records an issue naming the command and its output when it exits
    /// with another status: the one helper the command suites share.
    @discardableResult
    public func runTool(
        _ tool: String, _ arguments: [String], expect status: Int32? = 0, timeout: TimeInterval = 120,
        _ location: SourceLocation = #_sourceLocation
    ) throws -> ProcessResult {
        let result = try run(Binaries.directory + "/" + tool, arguments, timeout: timeout)
        if let status {
            #expect(
                result.status == status, "\(tool) \(arguments): \(result.stdoutText)\(result.stderrText)",
                sourceLocation: location)
        }
        return result
    }
}
