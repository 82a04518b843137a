// Benchmark runner (release builds only): times in-process work that has no CLI equivalent.
//   dcbench issue CA_DIR N            — issue N four-tag credentials from the test CA; prints credentials/s
//   dcbench secure-files init         — set up an unlocked managed client under $HOME and $XDG_RUNTIME_DIR
//   dcbench secure-files write NAME   — write standard input into the secure file NAME
//   dcbench secure-files read NAME    — read the secure file NAME to standard output
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient
import TestCAProvider

#if canImport(Glibc)
    import Glibc
#endif

func usage() -> Never {
    FileHandle.standardError.write(
        Data("usage: dcbench issue CA_DIR N | dcbench secure-files init | write NAME | read NAME\n".utf8))
    exit(64)
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "issue":
    guard arguments.count == 3, let count = Int(arguments[2]) else { usage() }
    try issue(ca: arguments[1], count: count)
case "secure-files":
    guard arguments.count >= 2 else { usage() }
    try secureFiles(arguments[1], name: arguments.count == 3 ? arguments[2] : nil)
default:
    usage()
}

func issue(ca directory: String, count: Int) throws {
    let ca = try TestCA(directory: directory)
    _ = try ca.issue(TestCAIssueRequest())  // warm up: providers, decoder pool
    let clock = ContinuousClock()
    let started = clock.now
    for _ in 0..<count { _ = try ca.issue(TestCAIssueRequest()) }
    let elapsed = clock.now - started
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(
        String(
            format: "issued %d four-tag credentials in %.3f s: %.1f credentials/s", count, seconds,
            Double(count) / seconds)
    )
}

/// The managed client of the environment's HOME and XDG_RUNTIME_DIR (the runner sandboxes both),
/// streaming a secure file from standard input or to standard output.
func secureFiles(_ command: String, name: String?) throws {
    let client = ManagedClient()
    switch (command, name) {
    case ("init", nil):
        try client.initialize(
            clientId: "dcclient", scheme: "org.example.dcclient", providerScheme: "org.example.provider",
            executable: "/usr/bin/dcclient", passphrase: SecretBytes(Array("bench passphrase".utf8)))
    case ("write", let name?):
        try client.secureFiles.write(to: name, fromDescriptor: 0)
    case ("read", let name?):
        try client.secureFiles.read(name) { chunk in
            var offset = 0
            while offset < chunk.count {
                let count = Glibc.write(1, chunk.baseAddress! + offset, chunk.count - offset)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw DCError(.ioError, "cannot write the output") }
                offset += count
            }
        }
    default:
        usage()
    }
}
