// Benchmark runner (release builds only): times in-process work that has no CLI equivalent.
//   dcbench issue CA_DIR N            — issue N four-tag credentials from the test CA; prints credentials/s
//   dcbench secure-files init         — set up an unlocked managed client under $HOME and $XDG_RUNTIME_DIR
//   dcbench secure-files write NAME   — write standard input into the secure file NAME
//   dcbench secure-files read NAME    — read the secure file NAME to standard output
//   dcbench auth-tokens SECONDS       — ES256 verifications/s, and auth tokens verified/s (cached
//                                       delegation, and without the cache), each for SECONDS on one thread
import AuthTokens
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
        Data(
            "usage: dcbench issue CA_DIR N | dcbench secure-files init | write NAME | read NAME | dcbench auth-tokens SECONDS\n"
                .utf8))
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
case "auth-tokens":
    guard arguments.count == 2, let seconds = Double(arguments[1]) else { usage() }
    try authTokens(seconds: seconds)
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

/// Verifications per second on this thread: a raw ES256 signature check (as `openssl speed
/// ecdsap256` counts them), then whole auth tokens through `AuthTokenVerifier` with its cache of
/// verified delegations (one ECDSA check a token) and without it (two).
func authTokens(seconds: Double) throws {
    let issuing = try TokenSigningKey.generate()
    let tokenKey = try TokenSigningKey.generate()
    let now = Date()
    let delegation = try Delegation.issue(
        issuer: "org.example.provider", userID: "user@example.com", appID: "com.example.app",
        containerID: "0123456789abcdef", tokenKey: tokenKey.publicKey, issuingKey: issuing, now: now)
    let token = try AuthToken.make(
        challenge: "3q2-7w_challenge-0123456789", serverName: "app.example.com", delegation: delegation,
        tokenKey: tokenKey, now: now
    ).compact
    let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9".utf8)
    let signature = try issuing.sign(message)
    let publicKey = issuing.publicKey
    let trust = TrustedIssuers([issuing.publicKey])
    let cached = AuthTokenVerifier(issuers: trust, revocations: .empty)
    let uncached = AuthTokenVerifier(
        issuers: trust, revocations: .empty, options: .init(cacheCapacity: 0))
    precondition(publicKey.isValidSignature(signature, for: message))
    precondition(cached.verify(token, now: now).responseCode == "100 OK")
    precondition(uncached.verify(token, now: now).responseCode == "100 OK")
    // `openssl speed` counts per second of CPU time (use -elapsed for wall-clock time); both are
    // printed so that a busy machine compares like with like.
    func cpuSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
    func rate(_ what: String, _ body: () -> Bool) {
        let clock = ContinuousClock()
        let started = clock.now
        let cpuStarted = cpuSeconds()
        var count = 0
        var elapsed = Duration.zero
        repeat {
            for _ in 0..<100 { precondition(body()) }
            count += 100
            elapsed = clock.now - started
        } while elapsed < .milliseconds(Int(seconds * 1000))
        let total = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let cpu = cpuSeconds() - cpuStarted
        print(
            String(
                format: "%@: %.0f/s of CPU time, %.0f/s of wall-clock time (%d in %.2f s)", what,
                Double(count) / cpu, Double(count) / total, count, total))
    }
    rate("ES256 verify (TokenPublicKey)") { publicKey.isValidSignature(signature, for: message) }
    rate("auth token verify, delegation cached") { cached.verify(token, now: now).responseCode == "100 OK" }
    rate("auth token verify, no cache") { uncached.verify(token, now: now).responseCode == "100 OK" }
}
