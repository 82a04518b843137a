import DerivedCredentials
import Foundation
import TestSupport
import Testing

private func dcprovision(_ arguments: [String]) throws -> ProcessResult {
    try run(Binaries.dcprovision, arguments, timeout: 30)
}

/// `command` run by bash under script(1), which gives it a pseudo-terminal as standard input,
/// output and error; what it printed there comes back on script's standard output.
private func onTerminal(_ command: String) throws -> String {
    try run("script", ["-qec", command, "/dev/null"], timeout: 30).stdoutText
}

/// A certificate with a subject longer than the table's column, two extended key usages OpenSSL
/// names and one it does not, two policies (one OpenSSL names) and an email address.
private let long: IssuedPair = {
    let f = OpenSSLFixtures.shared
    return try! OpenSSLFixtures.issue(
        name: "readable", key: .p256, by: f.ca,
        subject: "/O=Derived Credentials Test/OU=Department of Extremely Long Names/CN=Alice Averylongsurname",
        keyUsage: "critical,digitalSignature", extendedKeyUsage: "clientAuth,1.3.6.1.4.1.311.20.2.2,1.2.3.4.5",
        extra: ["certificatePolicies=2.16.840.1.101.3.2.1.3.13,2.5.29.32.0", "subjectAltName=email:alice@example.com"],
        in: f.directory)
}()

private let longSubject = "CN=Alice Averylongsurname,OU=Department of Extremely Long Names,O=Derived Credentials Test"

/// `openssl x509 -text`'s extensions block: from `X509v3 extensions:` to the line before the
/// signature algorithm.
private func opensslExtensions(_ certificate: String) throws -> String {
    let text = String(
        decoding: try OpenSSLFixtures.openssl(["x509", "-in", certificate, "-noout", "-text"]), as: UTF8.self)
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let start = try #require(lines.firstIndex { $0.hasPrefix("        X509v3 extensions:") })
    let end = try #require(lines[start...].firstIndex { $0.hasPrefix("    Signature Algorithm:") })
    return lines[start..<end].joined(separator: "\n")
}

@Suite("Readable output: inspect and convert as openssl users expect", .ownThreads, .timeLimit(.minutes(3)))
struct ReadableOutputTests {
    @Test("inspect -v prints every extension exactly as openssl x509 -text does, and the purposes by name")
    func extensionsAsOpenSSL() throws {
        let result = try dcprovision(["inspect", "--pem", "authentication=\(long.certificate),\(long.key)", "-v"])
        #expect(result.status == 0, "\(result.stderrText)")
        let expected = try opensslExtensions(long.certificate)
        #expect(result.stdoutText.contains(expected + "\n"), "\(result.stdoutText)\n---\n\(expected)")
        #expect(
            result.stdoutText.contains(
                "    Extended key usage: TLS Web Client Authentication, Microsoft Smartcard Login, 1.2.3.4.5\n"))
        // Without -v, the table alone.
        let plain = try dcprovision(["inspect", "--pem", "authentication=\(long.certificate),\(long.key)"])
        #expect(!plain.stdoutText.contains("X509v3"))
    }

    @Test("inspect --json keeps the OIDs and adds the names openssl prints for purposes and policies")
    func namesInJSON() throws {
        let result = try dcprovision(["inspect", "--json", "--pem", "authentication=\(long.certificate),\(long.key)"])
        #expect(result.status == 0, "\(result.stderrText)")
        let report = try #require(jsonPayload(result.stdout, "report") as? [String: Any])
        let rows = try #require(report["rows"] as? [[String: Any]])
        let certificate = try #require(rows.first?["certificate"] as? [String: Any])
        #expect(
            certificate["extendedKeyUsage"] as? [String] == [
                "1.3.6.1.5.5.7.3.2", "1.3.6.1.4.1.311.20.2.2", "1.2.3.4.5",
            ])
        // openssl's own words: the line after "X509v3 Extended Key Usage:" and the Policy: lines.
        let text = try opensslExtensions(long.certificate).split(separator: "\n").map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let ekuLine = try #require(text.firstIndex { $0.hasPrefix("X509v3 Extended Key Usage:") })
        #expect(certificate["extendedKeyUsageNames"] as? [String] == text[ekuLine + 1].components(separatedBy: ", "))
        let policies = try #require(certificate["certificatePolicies"] as? [[String: String]])
        #expect(policies.map { $0["oid"] } == ["2.16.840.1.101.3.2.1.3.13", "2.5.29.32.0"])
        #expect(policies.map { "Policy: " + ($0["name"] ?? "") } == text.filter { $0.hasPrefix("Policy: ") })
        #expect(policies.last?["name"] == "X509v3 Any Policy")
    }

    @Test("A long subject is shown whole in a pipe and with --wide, shortened on a terminal without it")
    func wideSubjects() throws {
        let arguments = "inspect --pem authentication=\(long.certificate),\(long.key)"
        let piped = try dcprovision(arguments.split(separator: " ").map(String.init))
        #expect(piped.stdoutText.contains(longSubject))
        let terminal = try onTerminal("\(Binaries.dcprovision) \(arguments)")
        #expect(!terminal.contains(longSubject), "\(terminal)")
        #expect(terminal.contains("…"))
        let wide = try onTerminal("\(Binaries.dcprovision) \(arguments) --wide")
        #expect(wide.contains(longSubject), "\(wide)")
    }

    @Test("convert --format pem writes what openssl x509 and openssl pkey print, under a name template")
    func pemAndTemplate() throws {
        let f = OpenSSLFixtures.shared
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pass = try dir.write("pass", fixturePassphrase + "\n")
        let p12 = try dir.write(
            "alice.p12",
            try OpenSSLFixtures.openssl([
                "pkcs12", "-export", "-inkey", f.signing.key, "-in", f.signing.certificate, "-certfile",
                f.ca.certificate, "-passout", "file:\(pass)",
            ]))
        let out = dir.file("out")
        let result = try dcprovision([
            "convert", p12, "--out-dir", out, "--passphrase-file", pass, "--format", "pem",
            "--name-template", "{kind}-{stem}-{n}.{format}",
        ])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: out).sorted() == [
                "cert-alice-1.pem", "cert-alice-2.pem", "key-alice-1.pem",
            ])
        #expect(
            try readBytes(out + "/cert-alice-1.pem")
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.signing.certificate])))
        #expect(
            try readBytes(out + "/cert-alice-2.pem")
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.ca.certificate])))
        #expect(
            try readBytes(out + "/key-alice-1.pem") == (try OpenSSLFixtures.openssl(["pkey", "-in", f.signing.key])))
        var info = stat()
        stat(out + "/key-alice-1.pem", &info)
        #expect(info.st_mode & 0o777 == 0o600)
    }

    @Test(
        "A name template with an unknown placeholder, a / or names that would collide is one line and exit 64",
        arguments: ["{stem}.{what}", "a/{kind}{n}", "{stem}.{kind}", "{stem}{n}.der", "{stem"])
    func badTemplates(template: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try dcprovision([
            "convert", OpenSSLFixtures.shared.authentication.certificate, "--out-dir", dir.file("out"),
            "--name-template", template,
        ])
        #expect(result.status == 64)
        #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("out")))
    }

    @Test("convert --out - writes the one object to a pipe, identical to openssl; two objects are exit 64")
    func toStandardOutput() throws {
        let f = OpenSSLFixtures.shared
        let certificate = try dcprovision(["convert", f.encryption.certificate, "--out", "-"])
        #expect(certificate.status == 0, "\(certificate.stderrText)")
        #expect(
            certificate.stdout
                == (try OpenSSLFixtures.openssl(["x509", "-in", f.encryption.certificate, "-outform", "DER"])))
        let key = try dcprovision(["convert", f.encryption.key, "--out", "-", "--format", "pem"])
        #expect(key.status == 0, "\(key.stderrText)")
        #expect(key.stdout == (try OpenSSLFixtures.openssl(["pkey", "-in", f.encryption.key])))
        let two = try dcprovision(["convert", f.encryption.key, f.encryption.certificate, "--out", "-"])
        #expect(two.status == 64)
        #expect(two.stdout.isEmpty)
        #expect(two.stderrText.split(separator: "\n").count == 1)
        #expect(try dcprovision(["convert", f.encryption.key, "--out", "-", "--out-dir", "x"]).status == 64)
    }

    @Test("On a terminal, convert --out - prints a certificate but refuses a private key: one line, exit 77")
    func keyNotToTerminal() throws {
        let f = OpenSSLFixtures.shared
        let refused = try onTerminal(
            "\(Binaries.dcprovision) convert \(f.authentication.key) --out - --format pem; echo \"exit=$?\"")
        #expect(refused.contains("exit=77"), "\(refused)")
        #expect(refused.contains("a private key is not written to a terminal"))
        #expect(!refused.contains("PRIVATE KEY"))
        #expect(refused.split(whereSeparator: \.isNewline).count == 2, "one line, then the exit status: \(refused)")
        let certificate = try onTerminal(
            "\(Binaries.dcprovision) convert \(f.authentication.certificate) --out - --format pem; echo \"exit=$?\"")
        #expect(certificate.contains("exit=0"), "\(certificate)")
        #expect(certificate.contains("-----BEGIN CERTIFICATE-----"))
    }
}
