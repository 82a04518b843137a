// Benchmark runner (release builds only): times in-process work that has no CLI equivalent.
//   dcbench issue CA_DIR N   — issue N four-tag credentials from the test CA; prints credentials/s
import CredentialCoding
import DerivedCredentials
import Foundation
import TestCAProvider

let arguments = CommandLine.arguments.dropFirst()
guard arguments.first == "issue", arguments.count == 3, let count = Int(arguments[arguments.startIndex + 2]) else {
    FileHandle.standardError.write(Data("usage: dcbench issue CA_DIR N\n".utf8))
    exit(64)
}
let ca = try TestCA(directory: arguments[arguments.startIndex + 1])
_ = try ca.issue(TestCAIssueRequest())  // warm up: providers, decoder pool
let clock = ContinuousClock()
let started = clock.now
for _ in 0..<count { _ = try ca.issue(TestCAIssueRequest()) }
let elapsed = clock.now - started
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print(
    String(
        format: "issued %d four-tag credentials in %.3f s: %.1f credentials/s", count, seconds, Double(count) / seconds)
)
