import DerivedCredentials
import Foundation
import TestSupport
import Testing

private let f = OpenSSLFixtures.shared

private func dcprovision(_ arguments: [String]) throws -> ProcessResult {
    try run(Binaries.dcprovision, arguments, timeout: 30)
}

private func pemArguments() -> [String] {
    [
        "--pem", "authentication=\(f.authentication.certificate),\(f.authentication.key)",
        "--pem", "signing=\(f.signing.certificate),\(f.signing.key)",
        "--pem", "encryption=\(f.encryption.certificate),\(f.encryption.key)",
        "--pem", "escrow=\(f.escrow.certificate),\(f.escrow.key)",
        "--pem", "escrow=\(f.escrowHistory[0].certificate),\(f.escrowHistory[0].key)",
    ]
}

@Suite("dcprovision inspect", .ownThreads, .timeLimit(.minutes(3)))
struct InspectCommandTests {
    @Test("A four-tag credential prints a table and validates, chained to the CA")
    func table() throws {
        let result = try dcprovision(["inspect"] + pemArguments() + ["--trust-anchor", f.ca.certificate])
        #expect(result.status == 0, "\(result.stderrText)")
        let lines = result.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("TAG") == true)
        for tag in ["authentication", "signing", "encryption", "escrow", "escrow (history 0)"] {
            #expect(lines.contains { $0.hasPrefix(tag + " ") })
        }
        #expect(result.stdoutText.contains("EC P-384"))
        #expect(result.stdoutText.contains("RSA 2048"))
        #expect(lines.last == "valid: 0 error(s), 0 warning(s)")
    }

    @Test("--json is machine-readable")
    func json() throws {
        let result = try dcprovision(["inspect", "--json"] + pemArguments())
        #expect(result.status == 0)
        let object = try jsonPayload(result.stdout, "report") as? [String: Any]
        let rows = object?["rows"] as? [[String: Any]]
        #expect(rows?.map { $0["tag"] as? String } == ["authentication", "signing", "encryption", "escrow", "escrow"])
        #expect(object?["valid"] as? Bool == true)
    }

    @Test("PKCS#12 with --tag, and a validation error exits 65 after printing the findings")
    func pkcs12AndFailure() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pass = try dir.write("pass", fixturePassphrase + "\n")
        let p12 = try dir.write(
            "enc.p12",
            try OpenSSLFixtures.openssl([
                "pkcs12", "-export", "-inkey", f.encryption.key, "-in", f.encryption.certificate, "-passout",
                "file:\(pass)",
            ]))
        let ok = try dcprovision(["inspect", "--pkcs12", p12, "--tag", "encryption", "--passphrase-file", pass])
        #expect(ok.status == 0, "\(ok.stderrText)")
        // The encryption certificate presented as authentication violates that profile.
        let bad = try dcprovision(["inspect", "--pkcs12", "authentication=\(p12)", "--passphrase-file", pass])
        #expect(bad.status == 65)
        #expect(bad.stdoutText.contains("key-usage-insufficient"))
        #expect(bad.stdoutText.contains("eku-mismatch"))
        #expect(bad.stderrText.contains("fails validation"))
    }

    @Test("--strict makes warnings fatal")
    func strict() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pair = try OpenSSLFixtures.issue(
            name: "extra", key: .p256, by: f.ca, keyUsage: "critical,digitalSignature,keyEncipherment",
            extendedKeyUsage: nil, in: dir)
        let arguments = ["inspect", "--pem", "authentication=\(pair.certificate),\(pair.key)"]
        let lenient = try dcprovision(arguments)
        #expect(lenient.status == 0)
        #expect(lenient.stdoutText.contains("warning [authentication] key-usage-extra"))
        #expect(try dcprovision(arguments + ["--strict"]).status == 65)
    }

    @Test("Names from inside certificates are printed with control characters escaped")
    func escapesNames() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pair = try OpenSSLFixtures.issue(
            name: "evil", key: .p256, by: f.ca, subject: "/CN=Mallory\u{1B}[2J\u{7}",
            keyUsage: "critical,digitalSignature",
            extendedKeyUsage: nil, in: dir)
        let result = try dcprovision(["inspect", "--pem", "authentication=\(pair.certificate),\(pair.key)"])
        #expect(result.status == 0)
        #expect(!result.stdout.contains(0x1B))
        #expect(!result.stdout.contains(0x07))
        // RFC 4514 hex escapes, as OpenSSL's RFC 2253 printer writes them.
        #expect(result.stdoutText.contains("CN=Mallory\\1B[2J\\07"))
    }

    @Test("PKCS#12 friendly names are shown, escaped, in the table and the JSON")
    func friendlyNames() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pass = try dir.write("pass", fixturePassphrase + "\n")
        let p12 = try dir.write(
            "named.p12",
            try OpenSSLFixtures.openssl([
                "pkcs12", "-export", "-inkey", f.authentication.key, "-in", f.authentication.certificate, "-name",
                "Alice\u{1B}]0;pwned\u{7}", "-passout", "file:\(pass)",
            ]))
        let table = try dcprovision(["inspect", "--pkcs12", "authentication=\(p12)", "--passphrase-file", pass])
        #expect(table.status == 0, "\(table.stderrText)")
        #expect(!table.stdout.contains(0x1B) && !table.stdout.contains(0x07))
        #expect(table.stdoutText.contains("\"Alice\\u{1b}]0;pwned\\u{7}\""))
        let json = try dcprovision([
            "inspect", "--json", "--pkcs12", "authentication=\(p12)", "--passphrase-file", pass,
        ])
        let rows =
            (try jsonPayload(json.stdout, "report") as? [String: Any])?["rows"] as? [[String: Any]]
        #expect(rows?.first?["friendlyName"] as? String == "Alice\u{1B}]0;pwned\u{7}")
    }

    @Test("A repeated tag other than escrow is an error; a key with the wrong certificate too")
    func sourceErrors() throws {
        let repeated = try dcprovision([
            "inspect", "--pem", "signing=\(f.signing.certificate),\(f.signing.key)", "--pem",
            "signing=\(f.signing.certificate),\(f.signing.key)",
        ])
        #expect(repeated.status == 65)
        #expect(repeated.stderrText.contains("more than once"))
        let mismatch = try dcprovision(["inspect", "--pem", "signing=\(f.signing.certificate),\(f.authentication.key)"])
        #expect(mismatch.status == 65)
        #expect(mismatch.stderrText.contains("does not belong"))
    }
}
