import ClientWorld
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

@testable import ManagedClient

/// An OpenSSL configuration that loads Debian's pkcs11 engine (libengine-pkcs11-openssl) with
/// `module`, and `pin` for its logins when one is given: what `OPENSSL_CONF` names for the openssl
/// command and curl.
func pkcs11EngineConfiguration(module: String, pin: String? = nil) -> String {
    """
    openssl_conf = openssl_init
    [openssl_init]
    engines = engine_section
    [engine_section]
    pkcs11 = pkcs11_section
    [pkcs11_section]
    engine_id = pkcs11
    MODULE_PATH = \(module)
    \(pin.map { "PIN = \($0)" } ?? "")
    init = 0

    """
}

/// A client with an installed credential, and what a program that uses the PKCS#11 module needs
/// to see it: the module's path and an environment whose `HOME` and `XDG_*` are the client's.
/// Every program runs as a real process that loads the module (pkcs11-tool, p11tool, ssh-keygen,
/// NSS's certutil, openssl with the pkcs11 engine, and our own probe); the client's store key is
/// in the session keyring the test run has, which the children share.
struct ModuleWorld {
    let world: World
    let credential: Credential
    let module = Binaries.directory + "/libdcclient-pkcs11.so"
    var pin: String { "client passphrase" }

    /// A client with a credential of `algorithm`, valid for a year or, given `validFor`, for
    /// that long from now.
    init(_ algorithm: KeyAlgorithm = .p256, commonName: String = "Alice Module", validFor: TimeInterval? = nil)
        async throws
    {
        try #require(
            FileManager.default.fileExists(atPath: module),
            "the module is built by scripts/test: swift build --product dcclient-pkcs11")
        world = try World()
        let request =
            if let validFor {
                TestCAIssueRequest(
                    commonName: commonName, algorithm: algorithm, validityDays: 1, now: Date() - 86_400 + validFor)
            } else {
                TestCAIssueRequest(commonName: commonName, algorithm: algorithm)
            }
        credential = try world.credential(request)
        _ = try await world.service.send(credential, clientScheme: .exampleClient, validator: world.validator())
    }

    /// The client's directories, as a program started from the user's session has them.
    var environment: [String: String] {
        let home = world.dir.file("home")
        return [
            "HOME": home, "XDG_RUNTIME_DIR": world.dir.file("run"), "XDG_DATA_HOME": home + "/.local/share",
            "XDG_CONFIG_HOME": home + "/.config", "XDG_STATE_HOME": home + "/.local/state",
            "XDG_CACHE_HOME": home + "/.cache", "XDG_CONFIG_DIRS": world.dir.file("etc/xdg"),
            "XDG_DATA_DIRS": world.dir.file("usr/share"),
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "LANG": "C.UTF-8", "TMPDIR": world.dir.path,
        ]
    }

    @discardableResult
    func run(_ tool: String, _ arguments: [String], environment extra: [String: String] = [:]) throws -> ProcessResult {
        try TestSupport.run(
            tool, arguments, environment: environment.merging(extra) { $1 }, currentDirectory: world.dir.path,
            timeout: 60)
    }

    func pkcs11Tool(_ arguments: [String], login: Bool = false) throws -> ProcessResult {
        try run("pkcs11-tool", ["--module", module] + (login ? ["--login", "--pin", pin] : []) + arguments)
    }

    /// An OpenSSL configuration that loads the pkcs11 engine with this module and the PIN.
    func engineConfiguration() throws -> String {
        try world.dir.write("engine.cnf", pkcs11EngineConfiguration(module: module, pin: pin))
    }

    /// The certificate of `tag` as PEM in a file, and its public key.
    func certificateFiles(_ certificate: Certificate, name: String) throws -> (certificate: String, publicKey: String) {
        let path = try world.dir.write(name + ".pem", PEM.certificate(certificate))
        let key = try OpenSSLFixtures.openssl(["x509", "-in", path, "-pubkey", "-noout"])
        return (path, try world.dir.write(name + ".pub", key))
    }

    func probe(_ steps: [String]) throws -> SpawnedProcess {
        try SpawnedProcess(
            Binaries.directory + "/PKCS11Probe", [module] + steps, environment: environment,
            output: world.dir.file("probe.out"))
    }

    /// The probe's lines, `step<TAB>value`, as pairs.
    func probeLines() throws -> [(String, String)] {
        String(decoding: try world.dir.read("probe.out"), as: UTF8.self).split(separator: "\n").map { line in
            let parts = line.split(separator: "\t", maxSplits: 1).map(String.init)
            return (parts[0], parts.count > 1 ? parts[1] : "")
        }
    }

    /// The probe step that creates `ready` and waits for `go`, both in the world's directory.
    func pause(_ ready: String, _ go: String) -> String { "pause:\(world.dir.file(ready)):\(world.dir.file(go))" }

    /// Waits until the probe created `name`.
    func awaitFile(_ name: String) async throws {
        for _ in 0..<600 where !FileManager.default.fileExists(atPath: world.dir.file(name)) {
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(FileManager.default.fileExists(atPath: world.dir.file(name)), "the probe never reached \(name)")
    }
}

@Suite("The PKCS#11 module: the installed credential for every program", .ownThreads, .timeLimit(.minutes(5)))
struct PKCS11ModuleTests {
    @Test(
        "pkcs11-tool --test --login passes; certificates and public keys show without login, private keys only with it, one CKA_ID per tag with PIV labels, sensitive and not extractable"
    )
    func listsTheCredential() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let test = try token.pkcs11Tool(["--test"], login: true)
        #expect(test.status == 0 && test.stdoutText.contains("No errors"), "\(test.stdoutText)\(test.stderrText)")

        let anonymous = try token.pkcs11Tool(["--list-objects"]).stdoutText
        #expect(anonymous.components(separatedBy: "Certificate Object").count - 1 == 4)
        #expect(anonymous.components(separatedBy: "Public Key Object").count - 1 == 4)
        #expect(!anonymous.contains("Private Key Object"))
        let listed = try token.pkcs11Tool(["--list-objects"], login: true).stdoutText
        #expect(listed.components(separatedBy: "Private Key Object").count - 1 == 4)
        for (id, label) in [
            ("01", "Certificate for PIV Authentication (authentication)"),
            ("02", "Certificate for Digital Signature (signing)"),
            ("03", "Certificate for Key Management (encryption)"),
            ("04", "Certificate for Escrowed Key Management (escrow)"),
        ] {
            #expect(listed.contains("label:      \(label)\n  subject:    DN: O=Derived Credentials Test"), "\(label)")
            #expect(listed.contains("ID:         \(id)"))
        }
        #expect(listed.contains("label:      PIV AUTH key (authentication)"))
        // Private keys: sensitive, never "extractable" (pkcs11-tool lists the flags that are set).
        let privateKeys = listed.components(separatedBy: "Private Key Object").dropFirst()
        #expect(privateKeys.allSatisfy { $0.contains("Access:     sensitive") && !$0.contains("extractable,") })
        #expect(!listed.contains("Access:     extractable"))

        // The certificates are the installed ones, byte for byte.
        for (tag, id) in [(CredentialTag.authentication, "01"), (.signing, "02"), (.encryption, "03"), (.escrow, "04")]
        {
            let read = try token.pkcs11Tool(["--read-object", "--type", "cert", "--id", id, "-o", "\(id).der"])
            #expect(read.status == 0)
            #expect(try token.world.dir.read("\(id).der") == token.credential[tag]?.certificate.derBytes)
        }
        // A wrong passphrase is refused as a wrong PIN.
        let wrong = try token.run("pkcs11-tool", ["--module", token.module, "--login", "--pin", "not it", "-O"])
        #expect(wrong.status != 0 && wrong.stderrText.contains("CKR_PIN_INCORRECT"))
    }

    @Test(
        "Signatures made through the module verify with openssl against the certificates (ECDSA raw and with SHA-256, RSA PKCS#1 v1.5 and PSS); the encryption key does not sign and the signing key does not decrypt"
    )
    func signaturesVerifyWithOpenSSL() async throws {
        let message = "sign me\n"
        for algorithm in [KeyAlgorithm.p256, .rsa2048] {
            let token = try await ModuleWorld(algorithm)
            defer { token.world.dir.remove() }
            let input = try token.world.dir.write("message", message)
            let digest = try token.world.dir.write("message.sha256", Digests.sha256(Array(message.utf8)))
            for (tag, id) in [(CredentialTag.authentication, "01"), (.signing, "02")] {
                let files = try token.certificateFiles(try #require(token.credential[tag]).certificate, name: id)
                let cases: [(mechanism: [String], verify: [String])] =
                    algorithm == .p256
                    ? [
                        (
                            ["-m", "ECDSA-SHA256", "-i", input],
                            ["dgst", "-sha256", "-verify", files.publicKey, "-signature"]
                        ),
                        (
                            ["-m", "ECDSA", "-i", digest],
                            ["pkeyutl", "-verify", "-pubin", "-inkey", files.publicKey, "-in", digest, "-sigfile"]
                        ),
                    ]
                    : [
                        (
                            ["-m", "SHA256-RSA-PKCS", "-i", input],
                            ["dgst", "-sha256", "-verify", files.publicKey, "-signature"]
                        ),
                        (
                            ["-m", "SHA256-RSA-PKCS-PSS", "--mgf", "MGF1-SHA256", "--salt-len", "32", "-i", input],
                            [
                                "dgst", "-sha256", "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:32",
                                "-verify", files.publicKey, "-signature",
                            ]
                        ),
                        (
                            [
                                "-m", "RSA-PKCS-PSS", "--hash-algorithm", "SHA256", "--mgf", "MGF1-SHA256",
                                "--salt-len", "32",
                                "-i", digest,
                            ],
                            [
                                "dgst", "-sha256", "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:32",
                                "-verify", files.publicKey, "-signature",
                            ]
                        ),
                    ]
                for (index, (mechanism, verify)) in cases.enumerated() {
                    let signature = token.world.dir.file("sig-\(id)-\(index)")
                    let signed = try token.pkcs11Tool(
                        ["--sign", "--id", id, "--signature-format", "openssl", "-o", signature] + mechanism,
                        login: true)
                    #expect(signed.status == 0, "\(mechanism): \(signed.stderrText)")
                    let tail = verify.first == "dgst" ? [signature, input] : [signature]
                    let checked = try token.run("openssl", verify + tail)
                    #expect(
                        checked.status == 0,
                        "\(algorithm) \(id) \(mechanism): \(checked.stdoutText)\(checked.stderrText)")
                }
            }
            // The tag decides: the encryption key signs nothing, the signing key decrypts nothing.
            let mechanism = algorithm == .p256 ? "ECDSA" : "RSA-PKCS"
            let refused = try token.pkcs11Tool(["--sign", "--id", "03", "-m", mechanism, "-i", digest], login: true)
            #expect(refused.status != 0 && refused.stderrText.contains("CKR_KEY_FUNCTION_NOT_PERMITTED"))
            if algorithm == .rsa2048 {
                let ciphertext = try OpenSSLFixtures.openssl(
                    [
                        "pkeyutl", "-encrypt", "-pubin", "-inkey",
                        try token.certificateFiles(
                            try #require(token.credential[.signing]).certificate, name: "sign-enc"
                        ).publicKey, "-in", digest,
                    ])
                let encrypted = try token.world.dir.write("to-signing", ciphertext)
                let decrypt = try token.pkcs11Tool(
                    ["--decrypt", "--id", "02", "-m", "RSA-PKCS", "-i", encrypted, "-o", "out"], login: true)
                #expect(decrypt.status != 0 && decrypt.stderrText.contains("CKR_KEY_FUNCTION_NOT_PERMITTED"))
            }
        }
    }

    @Test(
        "Decryption and key agreement: RSA PKCS#1 and OAEP through pkcs11-tool --test, ECDH equal to openssl pkeyutl -derive, and S/MIME from openssl cms opened through the pkcs11 engine, also for a key a renewal moved into the history"
    )
    func decryptionAndAgreement() async throws {
        // ECDH with the encryption key, against OpenSSL's own derivation with the peer's key.
        let ec = try await ModuleWorld(.p256)
        defer { ec.world.dir.remove() }
        let peer = ec.world.dir.file("peer.pem")
        _ = try OpenSSLFixtures.openssl([
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", peer,
        ])
        let peerPublic = try ec.world.dir.write(
            "peer.der", try OpenSSLFixtures.openssl(["pkey", "-in", peer, "-pubout", "-outform", "DER"]))
        let derived = try ec.pkcs11Tool(
            ["--derive", "-m", "ECDH1-DERIVE", "--id", "03", "-i", peerPublic, "-o", "shared.bin"], login: true)
        #expect(derived.status == 0, "\(derived.stderrText)")
        let encryption = try ec.certificateFiles(try #require(ec.credential[.encryption]).certificate, name: "enc")
        let expected = try OpenSSLFixtures.openssl([
            "pkeyutl", "-derive", "-inkey", peer, "-peerkey", encryption.publicKey,
        ])
        #expect(try ec.world.dir.read("shared.bin") == expected)
        // The authentication key agrees on nothing.
        let refused = try ec.pkcs11Tool(
            ["--derive", "-m", "ECDH1-DERIVE", "--id", "01", "-i", peerPublic, "-o", "no.bin"], login: true)
        #expect(refused.status != 0 && refused.stderrText.contains("CKR_KEY_FUNCTION_NOT_PERMITTED"))

        // RSA: pkcs11-tool's own decryption test (PKCS#1 v1.5 and OAEP, with and without a label).
        let rsa = try await ModuleWorld(.rsa2048, commonName: "Bob Module")
        defer { rsa.world.dir.remove() }
        let test = try rsa.pkcs11Tool(["--test"], login: true)
        #expect(test.status == 0 && test.stdoutText.contains("testing key 2 (KEY MAN key (encryption))"))
        #expect(test.stdoutText.contains("RSA-PKCS: OK") && test.stdoutText.contains("RSA-PKCS-OAEP"))
        #expect(test.stdoutText.contains("No errors"), "\(test.stdoutText)")

        // S/MIME as a mail client sends it, opened through the engine; then a renewal, and the
        // old message opens with the history's key (CKA_ID 05).
        let configuration = try rsa.engineConfiguration()
        let oldCertificate = try rsa.certificateFiles(
            try #require(rsa.credential[.encryption]).certificate, name: "old")
        let plain = try rsa.world.dir.write("plain.txt", "for your eyes only\n")
        _ = try OpenSSLFixtures.openssl(
            [
                "cms", "-encrypt", "-aes256", "-binary", "-in", plain, "-out", rsa.world.dir.file("mail.smime"),
                oldCertificate.certificate,
            ])
        func open(_ id: String, recipient: String) throws -> ProcessResult {
            try rsa.run(
                "openssl",
                [
                    "cms", "-decrypt", "-engine", "pkcs11", "-keyform", "engine", "-inkey",
                    "pkcs11:token=dcclient%20dcclient;id=%\(id);type=private", "-recip", recipient, "-in", "mail.smime",
                    "-out", "opened-\(id).txt",
                ], environment: ["OPENSSL_CONF": configuration])
        }
        func opened(_ id: String) -> String {
            String(decoding: (try? rsa.world.dir.read("opened-\(id).txt")) ?? [], as: UTF8.self)
        }
        let before = try open("03", recipient: oldCertificate.certificate)
        #expect(before.status == 0 && opened("03") == "for your eyes only\n", "\(before.stderrText)")
        let renewed = try rsa.world.credential(TestCAIssueRequest(commonName: "Bob Module", algorithm: .rsa2048))
        _ = try await rsa.world.service.send(
            renewed, clientScheme: .exampleClient, validator: rsa.world.validator())
        let listed = try rsa.pkcs11Tool(["--list-objects", "--type", "privkey"], login: true).stdoutText
        #expect(listed.contains("RETIRED KEY MAN 1 key (escrow history 1)") && listed.contains("ID:         05"))
        _ = try rsa.world.dir.write("opened-05.txt", "")
        let after = try open("05", recipient: oldCertificate.certificate)
        #expect(after.status == 0 && opened("05") == "for your eyes only\n", "\(after.stderrText)")
        // The renewed encryption key (CKA_ID 03 now) does not open the old message. Not "must be
        // refused": with RSA PKCS#1 v1.5 key transport, OpenSSL answers a wrong key with a random
        // content key (implicit rejection), and the AES-CBC padding check then passes for about 1
        // key in 256, giving garbage (a run hit it); what must never come out is the message.
        _ = try rsa.world.dir.write("opened-03.txt", "")
        let wrongKey = try open("03", recipient: oldCertificate.certificate)
        #expect(wrongKey.status != 0 || opened("03") != "for your eyes only\n")
    }

    @Test(
        "Other programs see the token: p11tool lists it, ssh-keygen -D prints the authentication key, NSS lists the certificates after modutil -add, and openssl req signs with a pkcs11: key URI"
    )
    func peersUseTheToken() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let p11tool = try token.run("p11tool", ["--provider", token.module, "--list-all-certs"])
        #expect(
            p11tool.stdoutText.contains("Certificate for PIV Authentication (authentication)"), "\(p11tool.stderrText)")
        #expect(p11tool.stdoutText.contains("token=dcclient%20dcclient"))

        let ssh = try token.run("ssh-keygen", ["-D", token.module])
        let authentication = try token.certificateFiles(
            try #require(token.credential[.authentication]).certificate, name: "auth")
        let expected = try token.run("ssh-keygen", ["-i", "-m", "PKCS8", "-f", authentication.publicKey]).stdoutText
        let expectedKey = expected.split(separator: " ").prefix(2).joined(separator: " ")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!expectedKey.isEmpty && ssh.stdoutText.contains(expectedKey), "\(ssh.stdoutText)\(ssh.stderrText)")
        #expect(ssh.stdoutText.contains("PIV AUTH pubkey (authentication)"))

        let database = "sql:" + token.world.dir.file("nssdb")
        try FileManager.default.createDirectory(
            atPath: token.world.dir.file("nssdb"), withIntermediateDirectories: true)
        #expect(try token.run("certutil", ["-N", "-d", database, "--empty-password"]).status == 0)
        let added = try token.run(
            "modutil", ["-force", "-add", "dcclient", "-libfile", token.module, "-dbdir", database])
        #expect(added.status == 0, "\(added.stderrText)")
        let nss = try token.run("certutil", ["-L", "-h", "all", "-d", database]).stdoutText
        for label in [
            "PIV Authentication (authentication)", "Digital Signature (signing)", "Key Management (encryption)",
        ] {
            #expect(nss.contains("dcclient dcclient:Certificate for \(label)"), "\(nss)")
        }

        let request = try token.run(
            "openssl",
            [
                "req", "-new", "-engine", "pkcs11", "-keyform", "engine", "-key",
                "pkcs11:token=dcclient%20dcclient;id=%01;type=private", "-subj", "/CN=Alice Module", "-out", "req.pem",
            ], environment: ["OPENSSL_CONF": try token.engineConfiguration()])
        #expect(request.status == 0, "\(request.stderrText)")
        let verified = try token.run("openssl", ["req", "-in", "req.pem", "-verify", "-noout"])
        #expect(verified.status == 0 && verified.stderrText.contains("verify OK"))
        // The engine writes the point compressed; the same point uncompressed is the certificate's key.
        _ = try token.world.dir.write(
            "req.pub", try token.run("openssl", ["req", "-in", "req.pem", "-pubkey", "-noout"]).stdout)
        let requestKey = try token.run(
            "openssl", ["pkey", "-pubin", "-in", "req.pub", "-pubout", "-ec_conv_form", "uncompressed"]
        ).stdoutText
        #expect(requestKey == String(decoding: try token.world.dir.read("auth.pub"), as: UTF8.self), "\(requestKey)")
    }

    @Test(
        "gnutls-cli authenticates to openssl s_server -Verify 1 with the derived authentication key through pkcs11: URIs"
    )
    func tlsClientAuthentication() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let server = token.world.dir.file("server")
        _ = try OpenSSLFixtures.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            server + ".key",
            "-out", server + ".pem", "-subj", "/CN=localhost", "-days", "2",
        ])
        let chain = try token.world.dir.write(
            "chain.pem",
            PEM.certificate(token.world.ca.issuingCertificate) + PEM.certificate(token.world.ca.rootCertificate))
        let log = token.world.dir.file("s_server.log")
        let process = try SpawnedProcess(
            try which("openssl"),
            [
                "s_server", "-accept", "127.0.0.1:0", "-cert", server + ".pem", "-key", server + ".key", "-Verify", "1",
                "-verify_return_error", "-CAfile", chain, "-naccept", "1", "-rev",
            ], environment: token.environment, output: log)
        defer { process.kill() }
        var port = 0
        for _ in 0..<200 where port == 0 {
            let text = String(decoding: (try? token.world.dir.read("s_server.log")) ?? [], as: UTF8.self)
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT 127.0.0.1:") }) {
                port = Int(line.split(separator: ":").last ?? "") ?? 0
            }
            if port == 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        try #require(port > 0, "openssl s_server did not start")
        let key = "pkcs11:token=dcclient%20dcclient;id=%01"
        // GnuTLS reads the PIN of a pkcs11: URI from GNUTLS_PIN when it has no terminal.
        let client = try TestSupport.run(
            "gnutls-cli",
            [
                "--provider", token.module, "--port", String(port), "127.0.0.1", "--no-ca-verification",
                "--x509certfile", key + ";type=cert", "--x509keyfile", key + ";type=private",
            ], stdin: Array("derived\n".utf8), environment: token.environment.merging(["GNUTLS_PIN": token.pin]) { $1 },
            timeout: 60)
        #expect(client.stdoutText.contains("devired"), "\(client.stdoutText)\(client.stderrText)")
        _ = process.wait(timeout: .seconds(10))
        let serverLog = String(decoding: try token.world.dir.read("s_server.log"), as: UTF8.self)
        #expect(
            serverLog.contains("depth=0 O = Derived Credentials Test, OU = Derived PIV, CN = Alice Module"),
            "\(serverLog)")
        #expect(!serverLog.contains("verify error"))
    }

    @Test(
        "A store that pairs a certificate with another key's private key: that key never signs, its first use fails with CKR_GENERAL_ERROR, the certificates still show and the keys that match still sign"
    )
    func mismatchedKeyNeverSigns() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        // The store as a hostile hand with the store key could leave it, sealed as the client
        // seals it: the signing certificate with the authentication key.
        let client = token.world.client
        let key = try client.storeKey()
        var delivered = try DeliveryPayload.decode(try #require(try client.installation.payload(key: key)))
        let authentication = try #require(delivered.credential[.authentication])
        let entries = try delivered.credential.entries.map { entry in
            entry.tag == .signing
                ? try CredentialEntry(
                    tag: .signing, certificate: entry.certificate, privateKey: authentication.privateKey)
                : entry
        }
        delivered.credential = try Credential(
            name: delivered.credential.name, serialNumber: delivered.credential.serialNumber,
            expirationDate: delivered.credential.expirationDate, entries: entries)
        try client.installation.replace(
            with: try delivered.encode(), sequence: client.installation.sequence ?? 1,
            keyHistory: try client.keyHistory(), key: key)

        let digest = try token.world.dir.write("digest", Digests.sha256(Array("mismatch".utf8)))
        func sign(_ id: String) throws -> ProcessResult {
            try token.pkcs11Tool(["--sign", "--id", id, "-m", "ECDSA", "-i", digest, "-o", "sig"], login: true)
        }
        let listed = try token.pkcs11Tool(["--list-objects", "--type", "cert"])
        #expect(listed.status == 0 && listed.stdoutText.contains("Certificate for Digital Signature"), "\(listed)")
        let refused = try sign("02")
        #expect(refused.status != 0)
        #expect(refused.stderrText.contains("CKR_GENERAL_ERROR"), "\(refused.stderrText)")
        let signed = try sign("01")
        #expect(signed.status == 0, "\(signed.stderrText)")
    }

    @Test(
        "When the operator's policy says secure-services, the token's keys sign without C_Login while the client is unlocked, and need the passphrase again once the policy says passphrase"
    )
    func loginFreePolicy() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let digest = try token.world.dir.write("digest", Digests.sha256(Array("no login".utf8)))
        func signWithoutLogin() throws -> ProcessResult {
            try token.pkcs11Tool(["--sign", "--id", "02", "-m", "ECDSA", "-i", digest, "-o", "sig"])
        }
        #expect(try token.pkcs11Tool(["--list-objects", "--type", "privkey"]).stdoutText.isEmpty)
        #expect(try signWithoutLogin().status != 0)

        let record = try await token.world.setPolicy { $0.tokenLogin = .secureServices }
        // The signed URL carries it, and reads back the same.
        let url = try token.world.policyURL(record.policy)
        #expect(url.contains("&tokenlogin=secure-services&time="))
        let parsed = try DeliveryMessage.parse(url, scheme: try URLScheme("org.example.dcclient"))
        guard case .policy(let notice) = parsed else {
            Issue.record("not a policy: \(parsed)")
            return
        }
        #expect(notice.policy.tokenLogin == .secureServices)
        #expect(try token.world.client.currentPolicy()?.tokenLogin == .secureServices)

        let listed = try token.pkcs11Tool(["--list-objects", "--type", "privkey"]).stdoutText
        #expect(listed.components(separatedBy: "Private Key Object").count - 1 == 4, "\(listed)")
        let signed = try signWithoutLogin()
        #expect(signed.status == 0, "\(signed.stderrText)")
        let slots = try token.pkcs11Tool(["--list-token-slots"]).stdoutText
        #expect(!slots.contains("login required"), "\(slots)")
        // Locked, nothing signs, policy or not.
        try token.world.client.lock()
        #expect(try signWithoutLogin().status != 0)
        try token.world.client.unlock(passphrase: token.world.passphrase)
        #expect(try signWithoutLogin().status == 0)

        _ = try await token.world.setPolicy { $0.tokenLogin = .passphrase }
        #expect(try token.world.policyURL(try token.world.client.currentPolicy()!).contains("tokenlogin") == false)
        #expect(try signWithoutLogin().status != 0)
        #expect(try token.pkcs11Tool(["--list-token-slots"]).stdoutText.contains("login required"))
    }

    @Test(
        "Lock, unauthorize and retire: the next call of an open session fails (CKR_USER_NOT_LOGGED_IN after a lock, CKR_DEVICE_REMOVED once unauthorized or retired), the token leaves the slot, and C_WaitForSlotEvent reports each change"
    )
    func stateChangesReachOpenSessions() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let login = "login:\(token.pin)"
        let probe = try token.probe([
            "init", "open", login, "sign:02", "wait-nonblock", token.pause("ready1", "go1"), "sign-again",
            "session-state",
            "wait-nonblock", login, "sign:02", "wait-nonblock", token.pause("ready2", "go2"), "wait-block",
            "sign-again",
            "slots-present",
            "session-state", "finalize",
        ])
        try await token.awaitFile("ready1")
        try token.world.client.lock()
        _ = try token.world.dir.write("go1", "")
        try await token.awaitFile("ready2")
        _ = try token.world.dir.write("go2", "")
        // The probe is now in a blocking C_WaitForSlotEvent: the next change wakes it.
        try await Task.sleep(for: .milliseconds(300))
        try await token.world.setPolicy { $0.state = .unauthorized }
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        let lines = try token.probeLines()
        let expected: [(String, String)] = [
            ("init", "CKR_OK"), ("open", "CKR_OK"), ("login", "CKR_OK"), ("sign:02", "CKR_OK"),
            ("wait-nonblock", "CKR_NO_EVENT"), ("pause", "resumed"),
            // Locked: logged out, the key is gone from the session; the slot reports the change.
            ("sign-again", "CKR_USER_NOT_LOGGED_IN"), ("session-state", "state=0"), ("wait-nonblock", "CKR_OK"),
            // Logging in again unlocks the store with the passphrase.
            ("login", "CKR_OK"), ("sign:02", "CKR_OK"), ("wait-nonblock", "CKR_OK"), ("pause", "resumed"),
            // Unauthorized: the event, then the token is gone with its sessions.
            ("wait-block", "CKR_OK"), ("sign-again", "CKR_DEVICE_REMOVED"), ("slots-present", "0"),
            ("session-state", "CKR_SESSION_HANDLE_INVALID"), ("finalize", "CKR_OK"),
        ]
        #expect(lines.map { "\($0.0) \($0.1)" } == expected.map { "\($0.0) \($0.1)" })

        // Retired: the data is erased; a program that starts afterwards finds no token at all.
        let other = try await ModuleWorld(commonName: "Retiring Module")
        defer { other.world.dir.remove() }
        let retiring = try other.probe([
            "init", "open", login, "sign:02", other.pause("ready", "go"), "sign-again", "open",
        ])
        try await other.awaitFile("ready")
        try await other.world.setPolicy { $0.state = .retired }
        _ = try other.world.dir.write("go", "")
        #expect(retiring.wait(timeout: .seconds(60)) == 0)
        let retired = try other.probeLines().map { "\($0.0) \($0.1)" }
        #expect(
            retired == [
                "init CKR_OK", "open CKR_OK", "login CKR_OK", "sign:02 CKR_OK", "pause resumed",
                "sign-again CKR_DEVICE_REMOVED", "open CKR_TOKEN_NOT_PRESENT",
            ])
        let listed = try other.pkcs11Tool(["--list-token-slots"])
        #expect(!listed.stdoutText.contains("token label"), "\(listed.stdoutText)")
    }

    @Test(
        "A signing key whose certificate ends while the token is logged in stops signing at its next use (CKR_KEY_FUNCTION_NOT_PERMITTED), in the same session"
    )
    func expiryWhileLoggedIn() async throws {
        let token = try await ModuleWorld(validFor: 20)
        defer { token.world.dir.remove() }
        let signing = try #require(token.credential[.signing])
        let notAfter = try #require(try CertificateDetails(signing.certificate).notAfter)
        let probe = try token.probe([
            "init", "open", "login:\(token.pin)", "sign:02", token.pause("ready", "go"), "sign-again", "finalize",
        ])
        try await token.awaitFile("ready")
        try #require(Date() < notAfter, "the delivery took longer than the certificate's 20 s")
        try await Task.sleep(for: .seconds(max(0, notAfter.timeIntervalSinceNow) + 1.5))
        _ = try token.world.dir.write("go", "")
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        let lines = try token.probeLines().map { "\($0.0) \($0.1)" }
        #expect(
            lines == [
                "init CKR_OK", "open CKR_OK", "login CKR_OK", "sign:02 CKR_OK", "pause resumed",
                "sign-again CKR_KEY_FUNCTION_NOT_PERMITTED", "finalize CKR_OK",
            ], "\(lines)")
    }

    @Test(
        "Secrets from C_DeriveKey belong to the application: another session reads them, logging out destroys them, and an empty label reads as no bytes"
    )
    func derivedSecrets() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let login = "login:\(token.pin)"
        let probe = try token.probe([
            "init", "open", login, "derive:03", "read-derived", "open", "read-derived", "logout", "read-derived",
            login, "read-derived", "finalize",
        ])
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        #expect(
            try token.probeLines().map { "\($0.0) \($0.1)" } == [
                "init CKR_OK", "open CKR_OK", "login CKR_OK", "derive:03 CKR_OK", "read-derived CKR_OK 32,0",
                "open CKR_OK", "read-derived CKR_OK 32,0", "logout CKR_OK", "read-derived CKR_OBJECT_HANDLE_INVALID",
                "login CKR_OK", "read-derived CKR_OBJECT_HANDLE_INVALID", "finalize CKR_OK",
            ])
    }

    @Test(
        "C_Finalize returns only after a thread blocked in C_WaitForSlotEvent has left the module (the application may unload it next)"
    )
    func finalizeWaitsForWaiters() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let probe = try token.probe(["finalize-while-waiting"])
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        #expect(try token.probeLines().map { "\($0.0) \($0.1)" } == ["finalize-while-waiting CKR_OK left=5/5"])
    }

    @Test(
        "Bad arguments, unknown handles, wrong mechanisms and short buffers get the return values PKCS#11 names, with the size-query convention, and nothing crashes"
    )
    func conformance() async throws {
        let token = try await ModuleWorld()
        defer { token.world.dir.remove() }
        let probe = try token.probe([
            "init-bad-locking", "init", "open", "login:\(token.pin)", "conformance", "finalize",
        ])
        #expect(probe.wait(timeout: .seconds(60)) == 0)
        let answers = Dictionary(try token.probeLines().map { ($0.0, $0.1) }, uniquingKeysWith: { $1 })
        let expected: [String: String] = [
            "init-bad-locking": "CKR_CANT_LOCK", "init": "CKR_OK", "login": "CKR_OK",
            "conformance.GetFunctionList(null)": "CKR_ARGUMENTS_BAD",
            "conformance.Initialize(again)": "CKR_CRYPTOKI_ALREADY_INITIALIZED",
            "conformance.GetInfo(null)": "CKR_ARGUMENTS_BAD",
            "conformance.GetSlotList(null count)": "CKR_ARGUMENTS_BAD",
            "conformance.GetSlotList(short)": "CKR_BUFFER_TOO_SMALL 1",
            "conformance.GetSlotInfo(bad slot)": "CKR_SLOT_ID_INVALID",
            "conformance.GetTokenInfo(null)": "CKR_ARGUMENTS_BAD",
            "conformance.OpenSession(not serial)": "CKR_SESSION_PARALLEL_NOT_SUPPORTED",
            "conformance.OpenSession(null handle)": "CKR_ARGUMENTS_BAD",
            "conformance.CloseSession(unknown)": "CKR_SESSION_HANDLE_INVALID",
            "conformance.Login(again)": "CKR_USER_ALREADY_LOGGED_IN", "conformance.Login(SO)": "CKR_USER_TYPE_INVALID",
            "conformance.Logout(unknown session)": "CKR_SESSION_HANDLE_INVALID",
            "conformance.FindObjects(not initialized)": "CKR_OPERATION_NOT_INITIALIZED",
            "conformance.FindObjectsInit(null template)": "CKR_ARGUMENTS_BAD",
            "conformance.Sign(not initialized)": "CKR_OPERATION_NOT_INITIALIZED",
            "conformance.SignInit(null mechanism)": "CKR_ARGUMENTS_BAD",
            "conformance.SignInit(unknown key)": "CKR_KEY_HANDLE_INVALID",
            "conformance.SignInit(certificate)": "CKR_KEY_HANDLE_INVALID",
            "conformance.SignInit(public key)": "CKR_KEY_FUNCTION_NOT_PERMITTED",
            "conformance.SignInit(encryption key)": "CKR_KEY_FUNCTION_NOT_PERMITTED",
            "conformance.SignInit(RSA mechanism, EC key)": "CKR_KEY_TYPE_INCONSISTENT",
            "conformance.SignInit(unknown mechanism)": "CKR_MECHANISM_INVALID",
            "conformance.SignInit(parameter where none belongs)": "CKR_MECHANISM_PARAM_INVALID",
            "conformance.DecryptInit(signing key)": "CKR_KEY_TYPE_INCONSISTENT",
            "conformance.SignInit": "CKR_OK", "conformance.SignInit(active)": "CKR_OPERATION_ACTIVE",
            "conformance.Sign(size query)": "CKR_OK 64", "conformance.Sign(short buffer)": "CKR_BUFFER_TOO_SMALL 64",
            "conformance.Sign": "CKR_OK 64", "conformance.Sign(after the end)": "CKR_OPERATION_NOT_INITIALIZED",
            "conformance.SignInit(raw ECDSA)": "CKR_OK",
            "conformance.SignUpdate(raw ECDSA)": "CKR_FUNCTION_NOT_SUPPORTED",
            "conformance.Sign(raw ECDSA, after a refused update)": "CKR_OPERATION_NOT_INITIALIZED",
            "conformance.SignInit(ECDSA_SHA256)": "CKR_OK", "conformance.SignUpdate(ECDSA_SHA256)": "CKR_OK",
            "conformance.Sign(after SignUpdate)": "CKR_FUNCTION_NOT_SUPPORTED",
            "conformance.SignInit(ECDSA_SHA256, again)": "CKR_OK", "conformance.SignFinal(two parts)": "CKR_OK 64",
            "conformance.SignInit(ECDSA_SHA256, no parts)": "CKR_OK", "conformance.SignFinal(no parts)": "CKR_OK 64",
            "conformance.GetAttributeValue(mixed)":
                "CKR_BUFFER_TOO_SMALL unavailable,unavailable,unavailable,1 sensitive=1",
            "conformance.GetAttributeValue(unknown object)": "CKR_OBJECT_HANDLE_INVALID",
            "conformance.DestroyObject(token object)": "CKR_ACTION_PROHIBITED",
            "conformance.GenerateRandom(null)": "CKR_ARGUMENTS_BAD",
            "conformance.SeedRandom": "CKR_RANDOM_SEED_NOT_SUPPORTED",
            "conformance.WaitForSlotEvent(null slot)": "CKR_ARGUMENTS_BAD",
            "conformance.WaitForSlotEvent(reserved)": "CKR_ARGUMENTS_BAD",
            "conformance.Finalize(reserved)": "CKR_ARGUMENTS_BAD", "finalize": "CKR_OK",
        ]
        for (step, value) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(answers[step] == value, "\(step)")
        }
    }
}
