import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

/// Runs `script` with /bin/sh under `confinement` and returns its standard output.
private func confined(_ script: String, _ confinement: Confinement, sandbox: Sandbox) async throws -> String {
    let outcome = try await ChildProcess.run(
        "/bin/sh", arguments: ["-c", script], environment: sandbox.environment,
        limits: .init(timeout: .seconds(20)), confinement: confinement)
    #expect(outcome.termination == .exited(0), "\(String(decoding: outcome.stderr, as: UTF8.self))")
    return String(decoding: outcome.stdout, as: UTF8.self)
}

@Suite(
    "Confinement: a child started confined reaches what it is granted and nothing else (the real kernel's Landlock and seccomp)",
    .ownThreads, .timeLimit(.minutes(2)),
    .enabled(if: Confinement.landlockABI != nil, "this kernel has no Landlock"))
struct ConfinementTests {
    @Test(
        "Reads: the system and what is granted; not a sibling, not a withheld place even when granted; writes: the writable directory only"
    )
    func grants() async throws {
        let sandbox = try Sandbox("confinement")
        defer { sandbox.remove() }
        for directory in ["granted", "sibling", "withheld"] {
            try FileManager.default.createDirectory(atPath: sandbox.file(directory), withIntermediateDirectories: true)
        }
        let granted = try sandbox.write("granted/file", "granted\n")
        let sibling = try sandbox.write("sibling/file", "sibling\n")
        let withheld = try sandbox.write("withheld/secret", "secret\n")
        let writable = sandbox.file("writable")
        try FileManager.default.createDirectory(atPath: writable, withIntermediateDirectories: true)
        let confinement = Confinement(
            readable: Confinement.systemDirectories + [granted, withheld], writable: [writable],
            withheld: [sandbox.file("withheld")])
        let output = try await confined(
            """
            cat /etc/passwd > /dev/null && echo system
            cat '\(granted)' 2>/dev/null || echo no-granted
            cat '\(sibling)' 2>/dev/null || echo no-sibling
            cat '\(withheld)' 2>/dev/null || echo no-withheld
            ln -s '\(withheld)' '\(writable)/link' && { cat '\(writable)/link' 2>/dev/null || echo no-link; }
            echo x > '\(writable)/new' && echo wrote
            echo x > '\(sandbox.file("sibling/new"))' 2>/dev/null || echo no-write-elsewhere
            """, confinement, sandbox: sandbox)
        #expect(
            output.split(separator: "\n") == [
                "system", "granted", "no-sibling", "no-withheld", "no-link", "wrote", "no-write-elsewhere",
            ], "\(output)")
        // The caller's own threads are not confined: this process and an unconfined child read the
        // sibling as before.
        #expect(FileManager.default.contents(atPath: sibling) != nil)
        let free = try ChildProcess.runSynchronously("/bin/cat", arguments: [sibling], environment: sandbox.environment)
        #expect(free.stdout == Array("sibling\n".utf8))
    }

    @Test(
        "The kernel keyring and other processes' memory are refused (seccomp); no set-user-ID gain (no new privileges)")
    func filter() async throws {
        let sandbox = try Sandbox("confinement-filter")
        defer { sandbox.remove() }
        let output = try await confined(
            """
            keyctl show @s > /dev/null 2>&1 && echo keyring || echo no-keyring
            grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status 2>/dev/null && echo no-new-privs
            grep -q '^Seccomp:[[:space:]]*2' /proc/self/status 2>/dev/null && echo filtered
            """,
            Confinement(readable: Confinement.systemDirectories + ["/proc"], writable: []), sandbox: sandbox)
        #expect(output.split(separator: "\n") == ["no-keyring", "no-new-privs", "filtered"], "\(output)")
        // Unconfined, the same keyctl call works: the refusal above is the filter's.
        let free = try ChildProcess.runSynchronously(
            "/bin/sh", arguments: ["-c", "keyctl show @s > /dev/null 2>&1 && echo keyring"],
            environment: sandbox.environment)
        #expect(String(decoding: free.stdout, as: UTF8.self) == "keyring\n")
    }

    @Test(
        "A plug-in dropped into the home directory is given only its executable; a named path inside the provider's state or the runtime directory is not given at all"
    )
    func plugInGrants() throws {
        let sandbox = try Sandbox("confinement-plug-in")
        defer { sandbox.remove() }
        let directories = XDGDirectories(environment: sandbox.xdg)
        let inHome = sandbox.home + "/dcprovider-x"
        let state = sandbox.stateHome + "/dcprovision"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let named = try sandbox.write("named.pem", "x")
        let confinement = Confinement.plugIn(
            executable: inHome,
            namedPaths: ["dir=" + state, sandbox.runtimeDirectory, "cert=named.pem,missing.pem"],
            relativeTo: sandbox.root, temporaryDirectory: sandbox.file("tmp"), directories: directories)
        #expect(confinement.readable.contains(inHome))
        #expect(!confinement.readable.contains(sandbox.home))
        #expect(confinement.readable.contains(named))
        #expect(!confinement.readable.contains(sandbox.root + "/missing.pem"))
        #expect(confinement.withheld.contains(state))
        #expect(confinement.withheld.contains(sandbox.runtimeDirectory))
        #expect(!confinement.readable.contains(state) && !confinement.writable.contains(state))
        // A plug-in in a directory of its own gets that directory.
        let own = Confinement.plugIn(
            executable: sandbox.root + "/plugins/dcprovider-y", namedPaths: [], relativeTo: sandbox.root,
            temporaryDirectory: sandbox.file("tmp"), directories: directories)
        #expect(own.readable.contains((sandbox.root + "/plugins" as NSString).standardizingPath))
    }
}
