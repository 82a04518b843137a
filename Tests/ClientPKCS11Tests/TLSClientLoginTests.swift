import Foundation
import TestSupport
import Testing

/// nginx (Debian's, run unprivileged or as root from a configuration in the sandbox, every file it
/// writes in the sandbox) serving HTTPS on a free port of 127.0.0.1 that asks every client for a
/// certificate (`ssl_verify_client on`) issued by the test CA that issued the credential.
///
/// Its page says `subject=` and the subject nginx verified (`$ssl_client_s_dn`), and carries a
/// script that sends the page's own text back (`/seen?TEXT`): a browser that shows no page text to
/// the test (Firefox) tells it so what it read. Its access log, one line per request
/// (`verify|status|uri|subject`), is the server's side of the story.
struct MutualTLSServer {
    let port: Int
    /// The CA (PEM) that issued the server's certificate, which each client is told to trust.
    let serverCA: String
    let nginx: NginxServer
    let accessLog: String
    var url: String { "https://127.0.0.1:\(port)/" }

    /// Makes a server CA and a certificate for 127.0.0.1 with the openssl command, writes the
    /// configuration and starts nginx; `clientCA` is the PEM of the CAs a client certificate must
    /// chain to.
    init(in sandbox: Sandbox, clientCA: String) async throws {
        let prefix = sandbox.file("nginx")
        try FileManager.default.createDirectory(atPath: prefix + "/logs", withIntermediateDirectories: true)
        func openssl(_ arguments: [String]) throws {
            let result = try sandbox.run("openssl", arguments)
            guard result.status == 0 else { throw ProcessFailure(command: ["openssl"] + arguments, result: result) }
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        serverCA = prefix + "/server-ca.pem"
        try openssl(
            ["req", "-x509"] + ec + [
                "-subj", "/CN=Test Server CA", "-days", "2", "-keyout", prefix + "/server-ca.key", "-out", serverCA,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        try openssl(
            ["req", "-new"] + ec + [
                "-subj", "/CN=127.0.0.1", "-keyout", prefix + "/server.key", "-out", prefix + "/server.csr",
            ])
        try sandbox.write(
            "nginx/server.ext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
        try openssl([
            "x509", "-req", "-in", prefix + "/server.csr", "-CA", serverCA, "-CAkey", prefix + "/server-ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", prefix + "/server.ext", "-out", prefix + "/server.pem",
        ])
        try sandbox.write("nginx/client-ca.pem", clientCA)
        port = try freeLocalPort()
        accessLog = prefix + "/logs/access.log"
        // The page's script writes an image whose address is the page's text, so the page's load
        // (which a screenshot waits for) includes telling the server what the browser showed.
        let page =
            "<!DOCTYPE html><html><head><title>mTLS</title></head><body><h1 id=s>subject=$ssl_client_s_dn</h1>"
            + "<script>document.write('<img width=1 height=1 src=/seen?' + "
            + "encodeURIComponent(document.getElementById('s').textContent) + '>')</script></body></html>"
        nginx = try await NginxServer(
            in: sandbox, errorLogLevel: "info",
            http: """
                log_format subject '$ssl_client_verify|$status|$request_uri|$ssl_client_s_dn';
                access_log \(accessLog) subject;
                server {
                  listen 127.0.0.1:\(port) ssl;
                  ssl_certificate \(prefix)/server.pem;
                  ssl_certificate_key \(prefix)/server.key;
                  ssl_client_certificate \(prefix)/client-ca.pem;
                  ssl_verify_client on;
                  ssl_verify_depth 2;
                  location = /seen { return 204; }
                  location / {
                    default_type text/html;
                    return 200 "\(page)";
                  }
                }
                """)
    }

    /// Stops nginx (gracefully, then by force).
    func stop() { nginx.stop() }

    /// The access log's lines as (verify, status, uri, subject).
    var requests: [Request] {
        let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "|", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 4 else { return nil }
            return Request(verify: fields[0], status: fields[1], uri: fields[2], subject: fields[3])
        }
    }

    /// One line of the access log.
    struct Request: Equatable, CustomStringConvertible {
        var verify, status, uri, subject: String
        var description: String { "\(verify)|\(status)|\(uri)|\(subject)" }
    }

    /// The subjects of the client certificates the page was served to (status 200 for `/`).
    var servedSubjects: [String] {
        requests.filter { $0.status == "200" && $0.uri == "/" }.map(\.subject)
    }

    /// What browsers said the page showed them (`/seen?TEXT`, decoded).
    var reportedTexts: [String] {
        requests.filter { $0.uri.hasPrefix("/seen?") }.compactMap {
            String($0.uri.dropFirst("/seen?".count)).removingPercentEncoding
        }
    }

    /// Expects `read` to find `expected` in the log, waiting up to ten seconds for it: nginx writes
    /// a request's line after it has sent the response, so a client may have exited before its
    /// line is there (a CI run had curl's line missing).
    func expectLogged<T: Equatable>(
        _ read: KeyPath<MutualTLSServer, T>, _ expected: T, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let deadline = ContinuousClock.now + .seconds(10)
        while self[keyPath: read] != expected, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        #expect(self[keyPath: read] == expected, "\(requests)", sourceLocation: sourceLocation)
    }
}

/// A managed app `web` set up with the real `dcclient` and `dcprovision`, with a credential, whose
/// token the operator lets programs use without the passphrase (`--token-login secure-services`,
/// as a browser that cannot type a PIN needs), and nginx asking for its authentication certificate.
struct TLSLoginWorld {
    let tokens: TwoAppTokens
    let server: MutualTLSServer
    /// The subject of the authentication certificate as nginx writes it (RFC 2253), read by openssl.
    let subject: String
    /// The common name of the CA that issued it (what a browser's certificate filter names).
    let issuerCommonName: String
    var sandbox: Sandbox { tokens.sandbox }
    var module: String { tokens.module }
    /// The key and certificate a program asks for: the authentication pair of the app's token.
    let certificateURI = "pkcs11:token=dcclient%20web;id=%01;type=cert"
    let keyURI = "pkcs11:token=dcclient%20web;id=%01;type=private"
    /// The programs' TMPDIR: a directory of this test's own, short-named directly under /tmp and
    /// removed with the sandbox, because Chromium puts its singleton's Unix socket there, whose
    /// path may not exceed 107 bytes (the sandbox's path under a deep TMPDIR can be longer).
    let temporary: String

    init(_ label: String) async throws {
        let tokens = try TwoAppTokens(label, apps: ["web"])
        self.tokens = tokens
        try tokens.check(
            "dcprovision", ["policy", "--client-scheme", "org.example.web", "--token-login", "secure-services"])
        let pem = try tokens.check("dcclient", ["show", "authentication", "--format", "pem", "--app", "web"]).stdoutText
        let certificate = try tokens.sandbox.write("authentication.pem", pem)
        subject = try tokens.sandbox.run(
            "openssl", ["x509", "-in", certificate, "-noout", "-subject", "-nameopt", "RFC2253"]
        ).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "subject=", with: "")
        let issuer = try tokens.sandbox.run(
            "openssl", ["x509", "-in", certificate, "-noout", "-issuer", "-nameopt", "multiline"]
        ).stdoutText
        issuerCommonName = try #require(
            issuer.split(separator: "\n").lazy.map { $0.trimmingCharacters(in: .whitespaces) }
                .first { $0.hasPrefix("commonName") }?.split(separator: "=", maxSplits: 1).last
                .map { $0.trimmingCharacters(in: .whitespaces) })
        let ca = try ["issuing.pem", "root.pem"].map {
            try String(contentsOfFile: tokens.sandbox.file("ca/" + $0), encoding: .utf8)
        }.joined()
        server = try await MutualTLSServer(in: tokens.sandbox, clientCA: ca)
        var template = Array("/tmp/dc-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else {
            server.stop()
            throw POSIXError(.init(rawValue: errno) ?? .EIO)
        }
        temporary = String(cString: template)
    }

    func remove() {
        server.stop()
        sandbox.remove()
        try? FileManager.default.removeItem(atPath: temporary)
    }

    /// Runs `tool` in the sandbox's environment with `extra`, its temporary files in the test's
    /// own `temporary` (Chromium leaves a directory of its own in TMPDIR after every run).
    func run(_ tool: String, _ arguments: [String], stdin: String? = nil, environment extra: [String: String] = [:])
        throws -> ProcessResult
    {
        try sandbox.run(
            tool, arguments, stdin: stdin.map { Array($0.utf8) },
            environment: ["TMPDIR": temporary].merging(extra) { $1 }, timeout: 90)
    }

    /// Keeps `file` as `docs/images/NAME` when `DC_SCREENSHOT_DIR` names a directory
    /// (docs/images/firefox-mtls.png and chromium-mtls.png are made so).
    func keepScreenshot(_ file: String, as name: String) throws {
        if let keep = ProcessInfo.processInfo.environment["DC_SCREENSHOT_DIR"] {
            _ = try? FileManager.default.removeItem(atPath: keep + "/" + name)
            try FileManager.default.copyItem(atPath: file, toPath: keep + "/" + name)
        }
    }

    /// Whether `file` is a PNG picture with more than a blank page in it (ImageMagick's `identify`
    /// counts its colours: a rendered line of text has dozens, an empty page one).
    func isPictureWithText(_ file: String) throws -> Bool {
        guard let bytes = FileManager.default.contents(atPath: file), bytes.starts(with: [0x89, 0x50, 0x4E, 0x47])
        else { return false }
        let colours = try run("identify", ["-format", "%k", file]).stdoutText
        return (Int(colours.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 2
    }
}

@Suite(
    "Programs log in to a TLS server with the module's authentication key: curl, gnutls-cli, Firefox ESR, Chromium",
    .ownThreads, .timeLimit(.minutes(5)))
struct TLSClientLoginTests {
    @Test(
        "curl through OpenSSL's pkcs11 engine logs in to nginx with the authentication key (pkcs11: URIs, no PIN) and reads its subject; locked or unauthorized, the client has no certificate to send and nginx serves no subject"
    )
    func curlThroughTheEngine() async throws {
        let world = try await TLSLoginWorld("tls-curl")
        defer { world.remove() }
        // The engine loads the module by its path; no PIN: the operator's policy lets the key sign.
        let configuration = try world.sandbox.write("engine.cnf", pkcs11EngineConfiguration(module: world.module))
        func curl() throws -> ProcessResult {
            try world.run(
                "curl",
                [
                    "-sS", "--cacert", world.server.serverCA, "--engine", "pkcs11", "--cert-type", "ENG", "--cert",
                    world.certificateURI, "--key-type", "ENG", "--key", world.keyURI, world.server.url,
                ], environment: ["OPENSSL_CONF": configuration])
        }
        let loggedIn = try curl()
        #expect(loggedIn.status == 0, "\(loggedIn.stderrText)")
        #expect(loggedIn.stdoutText.contains("<h1 id=s>subject=\(world.subject)</h1>"), "\(loggedIn.stdoutText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject])

        // Locked: the store shows nothing, so curl finds no certificate and sends no request.
        try world.tokens.check("dcclient", ["lock", "--app", "web"])
        let locked = try curl()
        #expect(locked.status != 0 && !locked.stdoutText.contains("subject="), "\(locked.stdoutText)")
        #expect(locked.stderrText.contains("cannot load client cert"), "\(locked.stderrText)")
        // Unlocked again but unauthorized: the token is gone.
        try world.tokens.check("dcclient", ["unlock", "--app", "web", "--passphrase-file", "pass.txt"])
        #expect(try curl().stdoutText.contains("subject=\(world.subject)"))
        try world.tokens.check("dcprovision", ["unauthorize", "--client-scheme", "org.example.web"])
        let unauthorized = try curl()
        #expect(unauthorized.status != 0 && !unauthorized.stdoutText.contains("subject="))
        #expect(unauthorized.stderrText.contains("cannot load client cert"), "\(unauthorized.stderrText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject, world.subject])
    }

    @Test(
        "gnutls-cli loads the module with --provider and logs in to nginx with the authentication key's pkcs11: URIs, reading its subject; locked, it is asked for a PIN it does not have and nginx serves no subject"
    )
    func gnutlsCLI() async throws {
        let world = try await TLSLoginWorld("tls-gnutls")
        defer { world.remove() }
        func gnutls(_ request: String?) throws -> ProcessResult {
            try world.run(
                "gnutls-cli",
                [
                    "--provider", world.module, "--x509certfile", world.certificateURI, "--x509keyfile", world.keyURI,
                    "--x509cafile", world.server.serverCA, "-p", String(world.server.port), "127.0.0.1",
                ], stdin: request)
        }
        let loggedIn = try gnutls("GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(
            loggedIn.stdoutText.contains("<h1 id=s>subject=\(world.subject)</h1>"),
            "\(loggedIn.stdoutText)\(loggedIn.stderrText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject])

        // Locked: the token wants its PIN, which gnutls-cli asks for on its standard input (the
        // request would be taken for the PIN: it gets none here) and, without one, gives up.
        try world.tokens.check("dcclient", ["lock", "--app", "web"])
        let locked = try gnutls(nil)
        #expect(!locked.stdoutText.contains("subject="), "\(locked.stdoutText)")
        #expect((locked.stdoutText + locked.stderrText).contains("No PIN given"), "\(locked.stderrText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject])
    }

    @Test(
        "Firefox ESR, headless with a fresh profile, loads the module and trusts the server's CA through policies.json, picks the certificate by itself, and shows the subject nginx verified; unauthorized, it has no certificate and nginx serves no subject"
    )
    func firefox() async throws {
        let world = try await TLSLoginWorld("tls-firefox")
        defer { world.remove() }
        // Firefox reads enterprise policies from /etc/firefox/policies/policies.json, else from
        // distribution/policies.json beside its binary. The test writes nothing outside its
        // sandbox: it runs a copy of the small launcher binary from a directory of links to the
        // rest of Firefox, with a distribution/policies.json of its own.
        try #require(
            !FileManager.default.fileExists(atPath: "/etc/firefox/policies/policies.json"),
            "a system policies.json would take the place of the test's own")
        let installed = URL(fileURLWithPath: try which("firefox-esr")).resolvingSymlinksInPath()
        let firefoxDirectory = installed.deletingLastPathComponent().path
        let copy = world.sandbox.file("firefox")
        try FileManager.default.createDirectory(atPath: copy + "/distribution", withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: firefoxDirectory)
        where name != "distribution" && name != installed.lastPathComponent {
            try FileManager.default.createSymbolicLink(
                atPath: copy + "/" + name, withDestinationPath: firefoxDirectory + "/" + name)
        }
        let binary = copy + "/" + installed.lastPathComponent
        try FileManager.default.copyItem(atPath: installed.path, toPath: binary)
        let policies: [String: Any] = [
            "policies": [
                "SecurityDevices": ["Add": ["dcclient": world.module]],
                "Certificates": ["Install": [world.server.serverCA]],
                "Preferences": [
                    "security.default_personal_cert": ["Value": "Select Automatically", "Status": "locked"]
                ],
            ]
        ]
        let json = try JSONSerialization.data(withJSONObject: policies, options: [.prettyPrinted, .sortedKeys])
        try world.sandbox.write("firefox/distribution/policies.json", String(decoding: json, as: UTF8.self))

        func screenshot(_ name: String) throws -> (String, ProcessResult) {
            let profile = world.sandbox.file("profile-" + name)
            try FileManager.default.createDirectory(atPath: profile, withIntermediateDirectories: false)
            let file = world.sandbox.file(name + ".png")
            let result = try world.run(
                binary,
                [
                    "--headless", "--no-remote", "--profile", profile, "--window-size", "1000,400", "--screenshot",
                    file, world.server.url,
                ])
            return (file, result)
        }
        let (picture, shown) = try screenshot("firefox")
        #expect(shown.status == 0, "\(shown.stdoutText)\(shown.stderrText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject])
        await world.server.expectLogged(\.reportedTexts, ["subject=\(world.subject)"])
        #expect(try world.isPictureWithText(picture))
        try world.keepScreenshot(picture, as: "firefox-mtls.png")

        // Unauthorized: the token is gone, Firefox sends no certificate, nginx answers 400.
        try world.tokens.check("dcprovision", ["unauthorize", "--client-scheme", "org.example.web"])
        let (_, refused) = try screenshot("firefox-unauthorized")
        #expect(refused.status == 0)
        await world.server.expectLogged(\.servedSubjects, [world.subject])
        await world.server.expectLogged(\.reportedTexts, ["subject=\(world.subject)"])
        await world.server.expectLogged(\.requests.last?.status, "400")
        #expect(world.server.requests.last?.verify == "NONE")
    }

    @Test(
        "Chromium, headless, finds the module in its NSS database (modutil) and picks the certificate by the AutoSelectCertificateForUrls policy in /etc/chromium (a policy for another issuer picks none); --dump-dom shows the subject nginx verified; locked or unauthorized, it has no certificate and nginx serves no subject"
    )
    func chromium() async throws {
        let world = try await TLSLoginWorld("tls-chromium")
        defer { world.remove() }
        // Chromium's NSS database is $HOME/.pki/nssdb, in the sandbox: the module and the server's CA.
        let database = "sql:" + world.sandbox.home + "/.pki/nssdb"
        try FileManager.default.createDirectory(
            atPath: world.sandbox.home + "/.pki/nssdb", withIntermediateDirectories: true)
        for arguments in [
            ["certutil", "-N", "-d", database, "--empty-password"],
            ["modutil", "-add", "dcclient", "-libfile", world.module, "-dbdir", database, "-force"],
            ["certutil", "-A", "-d", database, "-n", "Test Server CA", "-t", "C,,", "-i", world.server.serverCA],
        ] {
            let result = try world.run(arguments[0], Array(arguments.dropFirst()))
            #expect(result.status == 0, "\(arguments): \(result.stdoutText)\(result.stderrText)")
        }
        // AutoSelectCertificateForUrls is read from /etc/chromium/policies/managed. Chromium runs
        // in a mount namespace of its own (a user namespace too when the test is not root, keeping
        // the test's user id) where a directory of the sandbox is bound over /etc/chromium: the
        // browser reads the real policy file at its real path, and nothing under /etc changes.
        let profile = world.sandbox.file("chromium")
        let etc = world.sandbox.file("etc-chromium")
        try FileManager.default.createDirectory(atPath: etc + "/policies/managed", withIntermediateDirectories: true)
        if FileManager.default.fileExists(atPath: "/etc/chromium/master_preferences") {
            try FileManager.default.copyItem(
                atPath: "/etc/chromium/master_preferences", toPath: etc + "/master_preferences")
        }
        func policy(issuer: String) throws {
            let rule: [String: Any] = [
                "pattern": "https://127.0.0.1:\(world.server.port)", "filter": ["ISSUER": ["CN": issuer]],
            ]
            let text = String(decoding: try JSONSerialization.data(withJSONObject: rule), as: UTF8.self)
            let document = ["AutoSelectCertificateForUrls": [text]]
            try world.sandbox.write(
                "etc-chromium/policies/managed/dcclient.json",
                String(decoding: try JSONSerialization.data(withJSONObject: document), as: UTF8.self))
        }
        func chromium(_ arguments: [String]) throws -> ProcessResult {
            let namespace =
                getuid() == 0
                ? ["--mount"]
                : ["--mount", "--user", "--map-user=\(getuid())", "--map-group=\(getgid())", "--keep-caps"]
            // Chromium's sandbox needs an ordinary user; as root it runs only without.
            let browser =
                ["chromium", "--headless=new", "--user-data-dir=" + profile, "--no-first-run", "--disable-gpu"]
                + (getuid() == 0 ? ["--no-sandbox"] : []) + arguments + [world.server.url]
            return try world.run(
                "/usr/bin/unshare",
                namespace + ["/bin/sh", "-c", "mount --bind \"$0\" /etc/chromium && exec \"$@\"", etc] + browser)
        }
        // A policy for another issuer picks nothing: headless Chromium waits for a choice nobody can
        // make (it is stopped after 5 s), and sends no certificate.
        try policy(issuer: "Some Other CA")
        let unpicked = try chromium(["--timeout=5000", "--dump-dom"])
        #expect(!unpicked.stdoutText.contains("subject="), "\(unpicked.stdoutText)")
        #expect(world.server.requests.isEmpty)
        try policy(issuer: world.issuerCommonName)
        let dom = try chromium(["--dump-dom"])
        #expect(dom.status == 0, "\(dom.stderrText.suffix(2000))")
        #expect(dom.stdoutText.contains("<h1 id=\"s\">subject=\(world.subject)</h1>"), "\(dom.stdoutText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject])
        await world.server.expectLogged(\.reportedTexts, ["subject=\(world.subject)"])
        let picture = world.sandbox.file("chromium.png")
        let shot = try chromium(["--screenshot=" + picture, "--window-size=1000,400"])
        #expect(shot.status == 0, "\(shot.stderrText.suffix(2000))")
        #expect(try world.isPictureWithText(picture))
        try world.keepScreenshot(picture, as: "chromium-mtls.png")

        // Locked: the token shows no key, so there is nothing to send (and nobody to ask for a PIN).
        try world.tokens.check("dcclient", ["lock", "--app", "web"])
        let locked = try chromium(["--timeout=5000", "--dump-dom"])
        #expect(!locked.stdoutText.contains("subject="), "\(locked.stdoutText)")
        await world.server.expectLogged(\.servedSubjects, [world.subject, world.subject])
        try world.tokens.check("dcclient", ["unlock", "--app", "web", "--passphrase-file", "pass.txt"])

        try world.tokens.check("dcprovision", ["unauthorize", "--client-scheme", "org.example.web"])
        let refused = try chromium(["--dump-dom"])
        #expect(refused.stdoutText.contains("No required SSL certificate was sent"), "\(refused.stdoutText)")
        #expect(!refused.stdoutText.contains("subject="))
        await world.server.expectLogged(\.servedSubjects, [world.subject, world.subject])
    }
}
