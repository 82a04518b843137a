import Foundation

/// A CA and its CMP server as OpenSSL makes them: keys and certificates by the openssl CLI, and
/// `openssl cmp -port`, OpenSSL's mock CMP server, which checks a request's protection and proof
/// of possession and answers with the certificate it was given (`-rsp_cert`). So a test makes the
/// key pair and its certificate first, and the client under test enrols that key.
public struct CMPTestPKI: Sendable {
    /// The directory of the files, in a sandbox.
    public let directory: TemporaryDirectory
    /// The CA that issues everything below.
    public let ca: IssuedPair
    /// The CMP server's signing certificate, issued by ``ca``.
    public let server: IssuedPair
    /// A self-signed certificate that no trust anchor vouches for.
    public let rogue: IssuedPair
    /// The shared secret, in a file (never on a command line), and its reference.
    public let secretFile: String
    public let reference = "dc-test-ref"

    /// Makes the CA, the server's and a rogue signer's certificates, and a secret.
    public init(in directory: TemporaryDirectory) throws {
        self.directory = directory
        ca = try OpenSSLFixtures.makeCA(name: "cmp-ca", subject: "/O=Example CMP Test/CN=CMP Test Root", in: directory)
        server = try OpenSSLFixtures.issue(
            name: "cmp-server", key: .p256, by: ca, subject: "/O=Example CMP Test/CN=CMP Server",
            keyUsage: "critical,digitalSignature", extendedKeyUsage: nil, in: directory)
        rogue = try OpenSSLFixtures.makeCA(name: "cmp-rogue", subject: "/CN=Rogue CMP Server", in: directory)
        secretFile = try directory.write("cmp-secret.txt", "correct pbm secret")
    }

    /// A key and a certificate for `tag`'s profile, issued by ``ca`` for `subject`: what the mock
    /// server will answer with.
    public func leaf(_ tag: String, subject: String = "/O=Example CMP Test/CN=Alice") throws -> IssuedPair {
        let (keyUsage, extendedKeyUsage, spec): (String, String, KeySpec) =
            switch tag {
            case "authentication": ("critical,digitalSignature", "clientAuth,1.3.6.1.4.1.311.20.2.2", .p256)
            case "signing": ("critical,digitalSignature,nonRepudiation", "emailProtection", .p256)
            default: ("critical,keyAgreement", "emailProtection", .p256)
            }
        return try OpenSSLFixtures.issue(
            name: "leaf-\(tag)-\(UUID().uuidString.prefix(8))", key: spec, by: ca, subject: subject,
            keyUsage: keyUsage, extendedKeyUsage: extendedKeyUsage, in: directory)
    }
}

extension CMPTestPKI {
    /// A key-archive certificate (P-256 for key agreement unless told otherwise), the recipient a
    /// CA's archive would have, issued by `issuer` (``ca`` when nil; ``rogue`` for one no anchor
    /// vouches for).
    public func archiveRecipient(
        issuedBy issuer: IssuedPair? = nil, key: KeySpec = .p256, keyUsage: String = "critical,keyAgreement"
    ) throws -> IssuedPair {
        try OpenSSLFixtures.issue(
            name: "archive-\(UUID().uuidString.prefix(8))", key: key, by: issuer ?? ca,
            subject: "/O=Example CMP Test/CN=CMP Key Archive", keyUsage: keyUsage, extendedKeyUsage: nil,
            in: directory)
    }
}

/// `openssl cmp -port PORT` running in the background: the mock CMP server.
public struct CMPMockServer: Sendable {
    public let process: SpawnedProcess
    public let port: Int
    public let log: String

    /// Starts the mock server answering with `certificate` (and `caPubs`, `extraCerts`), with the
    /// shared secret unless `secret` is false, signing its answers with `signer` when given (it
    /// protects them with the secret when it has one), and trusting `clientTrust` for
    /// signature-protected requests. `more` are further `openssl cmp` arguments (`-poll_count`…).
    /// Returns once the port accepts connections.
    public static func start(
        _ pki: CMPTestPKI, answering certificate: String, secret: Bool = true, signer: IssuedPair? = nil,
        clientTrust: String? = nil, caPubs: String? = nil, extraCerts: String? = nil, more: [String] = []
    ) throws -> CMPMockServer {
        // A free port can be taken by another test before the server binds it: a few tries.
        var attempt = 1
        while true {
            do {
                return try start(
                    pki, answering: certificate, secret: secret, signer: signer, clientTrust: clientTrust,
                    caPubs: caPubs, extraCerts: extraCerts, more: more, port: try freeLocalPort())
            } catch let failure as RunningService.StartFailure
                where attempt < 3 && failure.description.contains("Error starting accept")
            {
                attempt += 1
            }
        }
    }

    /// ``start(_:answering:secret:signer:clientTrust:caPubs:extraCerts:more:)`` on `port`.
    static func start(
        _ pki: CMPTestPKI, answering certificate: String, secret: Bool, signer: IssuedPair?,
        clientTrust: String?, caPubs: String?, extraCerts: String?, more: [String], port: Int
    ) throws -> CMPMockServer {
        var arguments = ["cmp", "-port", String(port), "-rsp_cert", certificate]
        if secret { arguments += ["-srv_secret", "file:" + pki.secretFile, "-srv_ref", pki.reference] }
        if let signer { arguments += ["-srv_cert", signer.certificate, "-srv_key", signer.key] }
        if let clientTrust { arguments += ["-srv_trusted", clientTrust] }
        if let caPubs { arguments += ["-rsp_capubs", caPubs] }
        if let extraCerts { arguments += ["-rsp_extracerts", extraCerts] }
        let log = pki.directory.file("cmp-server-\(port).log")
        let process = try SpawnedProcess(OpenSSLFixtures.openssl, arguments + more, output: log)
        let server = CMPMockServer(process: process, port: port, log: log)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if localPortAccepts(port) { return server }
            var status: Int32 = 0
            if waitpid(process.pid, &status, WNOHANG) == process.pid {
                throw RunningService.StartFailure(description: "openssl cmp ended: \(RunningService.readLog(log))")
            }
            usleep(20_000)
        }
        server.stop()
        throw RunningService.StartFailure(description: "openssl cmp did not listen in 30 s: \(server.logText)")
    }

    /// `http://127.0.0.1:PORT/pkix/`.
    public var url: String { "http://127.0.0.1:\(port)/pkix/" }

    /// What the server has logged so far.
    public var logText: String { RunningService.readLog(log) }

    /// Stops the server.
    public func stop() {
        process.kill()
        _ = process.wait(timeout: .seconds(10))
    }
}

/// nginx terminating TLS in front of a mock CMP server, as a CA's web front often does: one port
/// with a certificate for 127.0.0.1 and one with a certificate for another host only (both issued
/// by a TLS CA the openssl CLI makes here, not the CMP CA), each passing `/pkix/` on to the mock.
public struct CMPTLSFront: Sendable {
    /// The CA that issued both TLS certificates.
    public let tlsCA: IssuedPair
    /// The port whose certificate names 127.0.0.1.
    public let port: Int
    /// The port whose certificate names only `cmp.other.example`.
    public let wrongHostPort: Int
    /// nginx, serving both ports.
    public let nginx: NginxServer
    /// nginx's access log: one line per request passed on (`status uri server-name`, the name the
    /// client sent in the handshake, `-` for none).
    public let accessLog: String

    /// Makes the TLS CA and certificates, and starts nginx in front of `upstream`.
    public init(in sandbox: Sandbox, pki: CMPTestPKI, upstream: CMPMockServer) async throws {
        let directory = pki.directory
        let ca = try OpenSSLFixtures.makeCA(
            name: "tls-ca", subject: "/O=Example TLS Test/CN=TLS Test Root", in: directory)
        func server(_ name: String, _ names: String) throws -> IssuedPair {
            try OpenSSLFixtures.issue(
                name: name, key: .p256, by: ca, subject: "/O=Example TLS Test/CN=\(name)",
                keyUsage: "critical,digitalSignature", extendedKeyUsage: "serverAuth",
                extra: ["subjectAltName=\(names)"], in: directory)
        }
        let right = try server("cmp-tls", "IP:127.0.0.1,DNS:localhost")
        let wrong = try server("cmp-tls-other", "DNS:cmp.other.example")
        let port = try freeLocalPort()
        let wrongHostPort = try freeLocalPort()
        let accessLog = sandbox.file("nginx/logs/access.log")
        func block(_ port: Int, _ pair: IssuedPair) -> String {
            """
            server {
              listen 127.0.0.1:\(port) ssl;
              ssl_certificate \(pair.certificate);
              ssl_certificate_key \(pair.key);
              location /pkix/ { proxy_pass http://127.0.0.1:\(upstream.port); }
            }
            """
        }
        nginx = try await NginxServer(
            in: sandbox,
            http: """
                log_format cmp '$status $request_uri $ssl_server_name';
                access_log \(accessLog) cmp;
                \(block(port, right))
                \(block(wrongHostPort, wrong))
                """)
        tlsCA = ca
        self.port = port
        self.wrongHostPort = wrongHostPort
        self.accessLog = accessLog
    }

    /// `https://127.0.0.1:PORT/pkix/`, whose certificate is for 127.0.0.1.
    public var url: String { "https://127.0.0.1:\(port)/pkix/" }
    /// `https://127.0.0.1:PORT/pkix/`, whose certificate is for another host.
    public var wrongHostURL: String { "https://127.0.0.1:\(wrongHostPort)/pkix/" }
    /// `https://localhost:PORT/pkix/`, by name: the certificate names localhost too.
    public var localhostURL: String { "https://localhost:\(port)/pkix/" }
    /// `https://localhost:PORT/pkix/` on the port whose certificate is for another host.
    public var wrongLocalhostURL: String { "https://localhost:\(wrongHostPort)/pkix/" }

    /// What nginx passed on so far.
    public var accessLogText: String { (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? "" }

    /// Stops nginx.
    public func stop() { nginx.stop() }
}
