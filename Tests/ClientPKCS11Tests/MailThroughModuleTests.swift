import Foundation
import TestSupport
import Testing

/// The app `mail` with its credential, and the mail programs' setup around the module: OpenSSL's
/// pkcs11 engine configured in a file of the sandbox (`OPENSSL_CONF`), an NSS database in the
/// sandbox with the module added by `modutil`, and the certificates `dcclient show` prints.
struct MailPrograms {
    let tokens: TwoAppTokens
    /// The engine's configuration: with the PIN, or (`secure-services`) without one.
    let engine: String
    /// The NSS database, `sql:DIR`.
    let database: String
    let signing: String
    let encryption: String

    /// `sendOptions` choose the credential (`key-algorithm=rsa2048`); `pin` puts the store
    /// passphrase into the engine's configuration.
    init(_ label: String, sendOptions: [String] = [], pin: Bool) throws {
        tokens = try TwoAppTokens(label, apps: ["mail"], sendOptions: sendOptions)
        let sandbox = tokens.sandbox
        signing = try sandbox.write(
            "signing.pem",
            try tokens.check("dcclient", ["show", "signing", "--format", "pem", "--app", "mail"]).stdoutText)
        encryption = try sandbox.write(
            "encryption.pem",
            try tokens.check("dcclient", ["show", "encryption", "--format", "pem", "--app", "mail"]).stdoutText)
        engine = try sandbox.write(
            "engine.cnf", pkcs11EngineConfiguration(module: tokens.module, pin: pin ? tokens.pin : nil))
        database = "sql:" + sandbox.file("nssdb")
        try FileManager.default.createDirectory(atPath: sandbox.file("nssdb"), withIntermediateDirectories: true)
        let created = try sandbox.run("/usr/bin/certutil", ["-N", "-d", database, "--empty-password"])
        try #require(created.status == 0, "\(created.stderrText)")
        let added = try sandbox.run(
            "/usr/bin/modutil", ["-force", "-add", "dcclient", "-libfile", tokens.module, "-dbdir", database])
        try #require(added.status == 0, "\(added.stderrText)")
    }

    func openssl(_ arguments: [String]) throws -> ProcessResult {
        try tokens.sandbox.run("/usr/bin/openssl", arguments, environment: ["OPENSSL_CONF": engine])
    }

    /// `openssl cms -sign` with the signing key (`CKA_ID` 02) through the engine, `file` to `out`.
    func sign(_ file: String, _ out: String) throws -> ProcessResult {
        try openssl([
            "cms", "-sign", "-binary", "-engine", "pkcs11", "-keyform", "engine", "-inkey",
            "pkcs11:token=dcclient%20mail;id=%02;type=private", "-signer", signing, "-in", file, "-out", out,
        ])
    }

    /// `openssl cms -verify` of `signed` against the test CA's chain (issuing and root, as a mail
    /// reader trusts them), the content to `out` and the signer's certificate to `signer`.
    func verify(_ signed: String, _ out: String, signer: String) throws -> ProcessResult {
        let chain = try tokens.sandbox.directory.write(
            "chain.pem",
            try readBytes(tokens.sandbox.file("ca/issuing.pem")) + readBytes(tokens.sandbox.file("ca/root.pem")))
        return try tokens.sandbox.run(
            "/usr/bin/openssl",
            ["cms", "-verify", "-binary", "-CAfile", chain, "-in", signed, "-out", out, "-signer", signer])
    }

    /// Encrypts `plain` to the encryption certificate as a mail client does (AES-256, the bytes as
    /// they are), as S/MIME into `NAME.smime` and as DER into `NAME.der`.
    func encrypt(_ plain: String, _ name: String) throws {
        for (format, file) in [("SMIME", name + ".smime"), ("DER", name + ".der")] {
            let made = try tokens.sandbox.run(
                "/usr/bin/openssl",
                [
                    "cms", "-encrypt", "-aes256", "-binary", "-outform", format, "-in", plain, "-out",
                    tokens.sandbox.file(file), encryption,
                ])
            try #require(made.status == 0, "\(made.stderrText)")
        }
    }

    /// `openssl cms -decrypt` with the encryption key (`CKA_ID` 03) through the engine.
    func engineDecrypt(_ file: String, _ out: String) throws -> ProcessResult {
        try openssl([
            "cms", "-decrypt", "-engine", "pkcs11", "-keyform", "engine", "-inkey",
            "pkcs11:token=dcclient%20mail;id=%03;type=private", "-recip", encryption, "-in", file, "-out", out,
        ])
    }

    /// NSS's `cmsutil -D` of the DER message `file` into `out`, the PIN from `pinFile` if given.
    func nssDecrypt(_ file: String, _ out: String, pinFile: String? = nil) throws -> ProcessResult {
        try tokens.sandbox.run(
            "/usr/bin/cmsutil",
            ["-D", "-d", database, "-i", file, "-o", out] + (pinFile.map { ["-f", $0] } ?? []))
    }

    /// The bytes of a file of the sandbox, none when it is missing.
    func bytes(_ name: String) -> [UInt8] { (try? readBytes(tokens.sandbox.file(name))) ?? [] }
}

/// A message that is not text: every byte value, CR LF and a lone LF, which a mail program's
/// text canonicalization would change.
let mailBody: [UInt8] = Array("Subject: derived\r\n\r\nfor your eyes only\n".utf8) + (0...255).map(UInt8.init)

@Suite(
    "Signed and encrypted mail through the module: OpenSSL CMS, NSS cmsutil and dcclient decrypt", .ownThreads,
    .timeLimit(.minutes(5)))
struct MailThroughModuleTests {
    @Test(
        "openssl cms -sign through the pkcs11 engine signs with the signing key and openssl cms -verify accepts it against the CA; mail encrypted to the encryption certificate opens byte for byte through NSS's cmsutil -D (the PIN from -f FILE), openssl cms -decrypt with the engine and dcclient decrypt"
    )
    func signAndOpen() throws {
        let mail = try MailPrograms("mail-rsa", sendOptions: ["key-algorithm=rsa2048"], pin: true)
        let sandbox = mail.tokens.sandbox
        defer { sandbox.remove() }
        let plain = try sandbox.directory.write("plain.bin", mailBody)

        let signed = try mail.sign(plain, sandbox.file("signed.smime"))
        #expect(signed.status == 0, "\(signed.stderrText)")
        let verified = try mail.verify(
            sandbox.file("signed.smime"), sandbox.file("verified.bin"), signer: sandbox.file("signer.pem"))
        #expect(
            verified.status == 0 && verified.stderrText.contains("Verification successful"), "\(verified.stderrText)")
        #expect(mail.bytes("verified.bin") == mailBody)
        // The signer is the signing certificate.
        #expect(mail.bytes("signer.pem") == (try readBytes(mail.signing)))

        try mail.encrypt(plain, "mail")
        // NSS: the PIN (the store passphrase) from a file, as `cmsutil -f` reads it.
        try sandbox.write("pin.txt", mail.tokens.pin + "\n")
        let nss = try mail.nssDecrypt(
            sandbox.file("mail.der"), sandbox.file("nss.bin"), pinFile: sandbox.file("pin.txt"))
        #expect(nss.status == 0, "\(nss.stderrText)")
        #expect(mail.bytes("nss.bin") == mailBody)
        let engine = try mail.engineDecrypt(sandbox.file("mail.smime"), sandbox.file("engine.bin"))
        #expect(engine.status == 0, "\(engine.stderrText)")
        #expect(mail.bytes("engine.bin") == mailBody)
        for file in ["mail.smime", "mail.der"] {
            let opened = try mail.tokens.check("dcclient", ["decrypt", "--app", "mail", sandbox.file(file)])
            #expect(opened.stdout == mailBody, "\(file)")
        }
    }

    @Test(
        "An EC (P-256) credential: openssl cms signs through the engine, and mail encrypted to its encryption certificate (ECDH) opens byte for byte through openssl cms -decrypt with the engine and dcclient decrypt"
    )
    func ellipticCurveMail() throws {
        let mail = try MailPrograms("mail-ec", pin: true)
        let sandbox = mail.tokens.sandbox
        defer { sandbox.remove() }
        let plain = try sandbox.directory.write("plain.bin", mailBody)
        #expect(try mail.sign(plain, sandbox.file("signed.smime")).status == 0)
        let verified = try mail.verify(
            sandbox.file("signed.smime"), sandbox.file("verified.bin"), signer: sandbox.file("signer.pem"))
        #expect(verified.status == 0 && mail.bytes("verified.bin") == mailBody, "\(verified.stderrText)")
        try mail.encrypt(plain, "mail")
        let engine = try mail.engineDecrypt(sandbox.file("mail.smime"), sandbox.file("engine.bin"))
        #expect(engine.status == 0 && mail.bytes("engine.bin") == mailBody, "\(engine.stderrText)")
        let opened = try mail.tokens.check("dcclient", ["decrypt", "--app", "mail", sandbox.file("mail.smime")])
        #expect(opened.stdout == mailBody)
    }

    @Test(
        "Locked, no mail program signs or decrypts: with --token-login secure-services and no PIN anywhere, openssl signs and cmsutil, openssl and dcclient decrypt while unlocked; after dcclient lock openssl cms -sign, cmsutil -D, openssl cms -decrypt and dcclient decrypt all fail and write no plaintext"
    )
    func lockedClientOpensNothing() throws {
        let mail = try MailPrograms("mail-locked", sendOptions: ["key-algorithm=rsa2048"], pin: false)
        let sandbox = mail.tokens.sandbox
        defer { sandbox.remove() }
        try mail.tokens.check(
            "dcprovision", ["policy", "--client-scheme", "org.example.mail", "--token-login", "secure-services"])
        let plain = try sandbox.directory.write("plain.bin", mailBody)
        try mail.encrypt(plain, "mail")

        #expect(try mail.sign(plain, sandbox.file("signed.smime")).status == 0)
        #expect(try mail.nssDecrypt(sandbox.file("mail.der"), sandbox.file("nss.bin")).status == 0)
        #expect(mail.bytes("nss.bin") == mailBody)
        #expect(try mail.engineDecrypt(sandbox.file("mail.smime"), sandbox.file("engine.bin")).status == 0)
        #expect(mail.bytes("engine.bin") == mailBody)
        #expect(try mail.tokens.check("dcclient", ["decrypt", "--app", "mail", "mail.smime"]).stdout == mailBody)

        // Locked, the token shows no private key: each program fails for that reason, not another.
        let notFound = "The private key was not found at: pkcs11:token=dcclient%20mail;"
        try mail.tokens.check("dcclient", ["lock", "--app", "mail"])
        let signed = try mail.sign(plain, sandbox.file("locked.smime"))
        #expect(signed.status != 0 && mail.bytes("locked.smime").isEmpty, "\(signed.stderrText)")
        #expect(signed.stderrText.contains(notFound + "id=%02;type=private"), "\(signed.stderrText)")
        let nss = try mail.nssDecrypt(sandbox.file("mail.der"), sandbox.file("locked-nss.bin"))
        #expect(nss.status != 0 && mail.bytes("locked-nss.bin").isEmpty, "\(nss.stderrText)")
        #expect(nss.stderrText.contains("SEC_ERROR_NOT_A_RECIPIENT"), "\(nss.stderrText)")
        let engine = try mail.engineDecrypt(sandbox.file("mail.smime"), sandbox.file("locked-engine.bin"))
        #expect(engine.status != 0 && mail.bytes("locked-engine.bin").isEmpty, "\(engine.stderrText)")
        #expect(engine.stderrText.contains(notFound + "id=%03;type=private"), "\(engine.stderrText)")
        let opened = try sandbox.run(Binaries.directory + "/dcclient", ["decrypt", "--app", "mail", "mail.smime"])
        #expect(opened.status == 69 && opened.stdout.isEmpty, "\(opened.stderrText)")
    }
}
