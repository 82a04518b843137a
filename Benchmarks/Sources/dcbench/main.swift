// Benchmark runner (release builds only): times in-process work that has no CLI equivalent.
//   dcbench issue CA_DIR N [THREADS]  — issue N four-tag credentials from the test CA on THREADS threads
//                                       (default: one per available core); prints credentials/s
//   dcbench secure-files init         — set up an unlocked managed client under $HOME and $XDG_RUNTIME_DIR
//   dcbench secure-files write NAME   — write standard input into the secure file NAME
//   dcbench secure-files read NAME    — read the secure file NAME to standard output
//   dcbench auth-tokens SECONDS       — ES256 verifications/s, and auth tokens verified/s (cached
//                                       delegation, and without the cache), each for SECONDS on one thread
//   dcbench pkcs11-sign MODULE TOKEN ID PIN_FILE SECONDS
//                                     — P-256 signatures/s through a PKCS#11 module (C_SignInit and
//                                       C_Sign with CKM_ECDSA over a 32-byte digest, one thread), with
//                                       the private key whose CKA_ID is the hex ID on the token labelled TOKEN
import AuthTokens
import CPKCS11
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient
import SystemSupport
import TestCAProvider

#if canImport(Glibc)
    import Glibc
#endif

func usage() -> Never {
    FileHandle.standardError.write(
        Data(
            "usage: dcbench issue CA_DIR N [THREADS] | dcbench secure-files init | write NAME | read NAME | dcbench auth-tokens SECONDS | dcbench pkcs11-sign MODULE TOKEN ID PIN_FILE SECONDS\n"
                .utf8))
    exit(64)
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "issue":
    guard (3...4).contains(arguments.count), let count = Int(arguments[2]),
        let width = arguments.count == 4 ? Int(arguments[3]) : ParallelWork.availableCores, width > 0
    else { usage() }
    try issue(ca: arguments[1], count: count, width: width)
case "secure-files":
    guard arguments.count >= 2 else { usage() }
    try secureFiles(arguments[1], name: arguments.count == 3 ? arguments[2] : nil)
case "auth-tokens":
    guard arguments.count == 2, let seconds = Double(arguments[1]) else { usage() }
    try authTokens(seconds: seconds)
case "pkcs11-sign":
    guard arguments.count == 6, let seconds = Double(arguments[5]) else { usage() }
    pkcs11Sign(module: arguments[1], token: arguments[2], id: arguments[3], pinFile: arguments[4], seconds: seconds)
default:
    usage()
}

func issue(ca directory: String, count: Int, width: Int) throws {
    let ca = try TestCA(directory: directory)
    _ = try ca.issue([TestCAIssueRequest](repeating: TestCAIssueRequest(), count: width), width: width)  // warm up
    let clock = ContinuousClock()
    let started = clock.now
    _ = try ca.issue([TestCAIssueRequest](repeating: TestCAIssueRequest(), count: count), width: width)
    let elapsed = clock.now - started
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(
        String(
            format: "issued %d four-tag credentials in %.3f s on %d threads: %.1f credentials/s", count, seconds, width,
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
            scheme: try URLScheme("org.example.dcclient"),
            providerScheme: try URLScheme("org.example.provider"),
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

/// Signs in a loop through a PKCS#11 module, as an application that holds a session does.
func pkcs11Sign(module: String, token: String, id: String, pinFile: String, seconds: Double) {
    func check(_ what: String, _ value: CK_RV) {
        guard value != CKR_OK else { return }
        FileHandle.standardError.write(Data("dcbench: \(what) returned 0x\(String(value, radix: 16))\n".utf8))
        exit(1)
    }
    guard let library = dlopen(module, RTLD_NOW | RTLD_LOCAL), let symbol = dlsym(library, "C_GetFunctionList") else {
        FileHandle.standardError.write(Data("dcbench: cannot load \(module)\n".utf8))
        exit(1)
    }
    typealias GetFunctionList = @convention(c) (UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?) -> CK_RV
    var listPointer: UnsafeMutablePointer<CK_FUNCTION_LIST>?
    check("C_GetFunctionList", unsafeBitCast(symbol, to: GetFunctionList.self)(&listPointer))
    guard let p11 = listPointer?.pointee else { exit(1) }
    var initialize = CK_C_INITIALIZE_ARGS()
    initialize.flags = CKF_OS_LOCKING_OK
    check("C_Initialize", p11.C_Initialize(&initialize))
    var slots = [CK_SLOT_ID](repeating: 0, count: 32)
    var count = CK_ULONG(slots.count)
    check("C_GetSlotList", p11.C_GetSlotList(1, &slots, &count))
    let slot = slots.prefix(Int(count)).first { slot in
        var info = CK_TOKEN_INFO()
        guard p11.C_GetTokenInfo(slot, &info) == CKR_OK else { return false }
        let label = withUnsafeBytes(of: info.label) { String(decoding: $0, as: UTF8.self) }
        return label.trimmingCharacters(in: .whitespaces) == token
    }
    guard let slot else {
        FileHandle.standardError.write(Data("dcbench: no token labelled \(token)\n".utf8))
        exit(1)
    }
    var session: CK_SESSION_HANDLE = 0
    check("C_OpenSession", p11.C_OpenSession(slot, CKF_SERIAL_SESSION, nil, nil, &session))
    var pin = Array(
        (try? String(contentsOfFile: pinFile, encoding: .utf8))?.trimmingCharacters(in: .newlines).utf8 ?? "".utf8)
    check("C_Login", p11.C_Login(session, CKU_USER, &pin, CK_ULONG(pin.count)))
    var keyClass = CK_OBJECT_CLASS(CKO_PRIVATE_KEY)
    var keyID: [UInt8] = stride(from: 0, to: id.count, by: 2).map {
        let start = id.index(id.startIndex, offsetBy: $0)
        return UInt8(id[start..<id.index(start, offsetBy: 2)], radix: 16) ?? 0
    }
    var key: CK_OBJECT_HANDLE = 0
    var found: CK_ULONG = 0
    withUnsafeMutableBytes(of: &keyClass) { classBytes in
        keyID.withUnsafeMutableBytes { idBytes in
            var template = [
                CK_ATTRIBUTE(type: CKA_CLASS, pValue: classBytes.baseAddress, ulValueLen: CK_ULONG(classBytes.count)),
                CK_ATTRIBUTE(type: CKA_ID, pValue: idBytes.baseAddress, ulValueLen: CK_ULONG(idBytes.count)),
            ]
            check("C_FindObjectsInit", p11.C_FindObjectsInit(session, &template, 2))
            check("C_FindObjects", p11.C_FindObjects(session, &key, 1, &found))
            check("C_FindObjectsFinal", p11.C_FindObjectsFinal(session))
        }
    }
    guard found == 1 else {
        FileHandle.standardError.write(Data("dcbench: no private key with CKA_ID \(id)\n".utf8))
        exit(1)
    }
    var digest = [UInt8](repeating: 0xA5, count: 32)
    var signature = [UInt8](repeating: 0, count: 256)
    func signOnce() {
        var mechanism = CK_MECHANISM(mechanism: CKM_ECDSA, pParameter: nil, ulParameterLen: 0)
        check("C_SignInit", p11.C_SignInit(session, &mechanism, key))
        var length = CK_ULONG(signature.count)
        check("C_Sign", p11.C_Sign(session, &digest, CK_ULONG(digest.count), &signature, &length))
    }
    for _ in 0..<200 { signOnce() }
    let clock = ContinuousClock()
    let start = clock.now
    var signatures = 0
    var cpuStart = rusage()
    getrusage(RUSAGE_SELF.rawValue, &cpuStart)
    while (clock.now - start) < .milliseconds(Int(seconds * 1000)) {
        for _ in 0..<100 { signOnce() }
        signatures += 100
    }
    let elapsed = clock.now - start
    var cpuEnd = rusage()
    getrusage(RUSAGE_SELF.rawValue, &cpuEnd)
    func microseconds(_ time: timeval) -> Double { Double(time.tv_sec) * 1e6 + Double(time.tv_usec) }
    let cpu =
        microseconds(cpuEnd.ru_utime) + microseconds(cpuEnd.ru_stime) - microseconds(cpuStart.ru_utime)
        - microseconds(cpuStart.ru_stime)
    let wall = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(
        String(
            format: "%.0f signatures/s, %.1f us wall and %.1f us CPU each (%d in %.1f s)", Double(signatures) / wall,
            wall * 1e6 / Double(signatures), cpu / Double(signatures), signatures, wall))
    _ = p11.C_Logout(session)
    _ = p11.C_Finalize(nil)
}
