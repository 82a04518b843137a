import Foundation
import TestSupport
import Testing

/// Key recovery: the test CA archives the encryption keys it issues, sealed to a recovery
/// certificate whose key lives elsewhere (here: made by openssl in the officer's own directory);
/// `testca recover` and `openssl cms -decrypt` both open the archive; `send --recover` gives a
/// client that lost its store its old decryption keys back, through the real scheme handlers.
@Suite(
    "Key recovery: archived encryption keys, opened by the officer and recovered for a client", .ownThreads,
    .timeLimit(.minutes(5)))
struct KeyRecoveryTests {
    struct World {
        let sandbox: Sandbox

        init() throws {
            sandbox = try Sandbox("key-recovery")
            // The recovery officer's key pair, made apart from the CA (openssl, not us).
            try FileManager.default.createDirectory(atPath: sandbox.file("officer"), withIntermediateDirectories: true)
            _ = try OpenSSLFixtures.openssl([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", sandbox.file("officer/recovery.key"),
                "-out", sandbox.file("officer/recovery.pem"), "-subj", "/CN=Key Recovery Officer", "-days", "30",
            ])
        }

        func openssl(_ arguments: [String]) throws -> ProcessResult {
            try sandbox.run(OpenSSLFixtures.openssl, arguments, timeout: 60)
        }

        func serial(_ certificate: String) throws -> String {
            let text = try openssl(["x509", "-in", sandbox.file(certificate), "-noout", "-serial"]).stdoutText
            return String(text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "=")[1])
        }

        /// The SubjectPublicKeyInfo of a key or certificate file, as openssl prints it (PEM).
        func publicKey(_ file: String, certificate: Bool) throws -> String {
            try openssl(
                certificate
                    ? ["x509", "-in", sandbox.file(file), "-noout", "-pubkey"]
                    : ["pkey", "-in", sandbox.file(file), "-pubout"]
            ).stdoutText
        }
    }

    @Test(
        "testca init --recovery-cert archives the encryption and escrow keys it issues; openssl cms -decrypt and testca recover open them with the officer's key, and nothing else does"
    )
    func archiveOpensWithTheOfficersKey() throws {
        let world = try World()
        defer { world.sandbox.remove() }
        // The CA refuses to hold the key that opens its own archive.
        try world.sandbox.runTool(
            "dcprovision", ["testca", "init", "refused", "--recovery-cert", "officer/recovery.key"], expect: 64)
        try world.sandbox.runTool("dcprovision", ["testca", "init", "ca", "--recovery-cert", "officer/recovery.pem"])
        try world.sandbox.runTool(
            "dcprovision", ["testca", "issue", "ca", "--out-dir", "issued", "--format", "pem", "--escrow-history", "1"])
        let archived = try FileManager.default.contentsOfDirectory(atPath: world.sandbox.file("ca/archive")).sorted()
        let expected = try ["issued/encryption.pem", "issued/escrow.pem"].map { try world.serial($0) + ".cms" }
        // The encryption pair, the escrow pair and its one retired pair; no authentication or signing key.
        #expect(archived.count == 3 && Set(expected).isSubset(of: Set(archived)), "\(archived)")
        let unarchived = try ["issued/authentication.pem", "issued/signing.pem"].map { try world.serial($0) + ".cms" }
        #expect(Set(unarchived).isDisjoint(with: Set(archived)))

        let serial = try world.serial("issued/encryption.pem")
        let opened = try world.openssl([
            "cms", "-decrypt", "-inform", "DER", "-in", "ca/archive/\(serial).cms", "-recip",
            "officer/recovery.pem", "-inkey", "officer/recovery.key", "-out", "peer.pem",
        ])
        #expect(opened.status == 0, "\(opened.stderrText)")
        let issuedKey = try world.publicKey("issued/encryption.pem", certificate: true)
        #expect(try world.publicKey("peer.pem", certificate: false) == issuedKey)

        try world.sandbox.runTool(
            "dcprovision",
            [
                "testca", "recover", "ca", "--serial", serial.lowercased(), "--recovery-key", "officer/recovery.key",
                "--out", "recovered.pem",
            ])
        #expect(try world.publicKey("recovered.pem", certificate: false) == issuedKey)
        var info = stat()
        #expect(stat(world.sandbox.file("recovered.pem"), &info) == 0 && info.st_mode & 0o777 == 0o600)

        // Another key opens nothing; a serial with nothing archived is exit 66.
        _ = try OpenSSLFixtures.openssl([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", world.sandbox.file("other.key"), "-out",
            world.sandbox.file("other.pem"), "-subj", "/CN=Someone Else", "-days", "30",
        ])
        try world.sandbox.runTool(
            "dcprovision",
            ["testca", "recover", "ca", "--serial", serial, "--recovery-key", "other.key", "--out", "x.pem"], expect: 65
        )
        #expect(!FileManager.default.fileExists(atPath: world.sandbox.file("x.pem")))
        try world.sandbox.runTool(
            "dcprovision",
            [
                "testca", "recover", "ca", "--serial", try world.serial("issued/signing.pem"), "--recovery-key",
                "officer/recovery.key", "--out", "x.pem",
            ], expect: 66)
    }

    @Test(
        "A client that lost its store: send --recover puts the archived keys in the escrow history, and mail encrypted (openssl cms) to the lost credential opens again; without --recover it does not"
    )
    func sendRecoverToAFreshClient() throws {
        let world = try World()
        defer { world.sandbox.remove() }
        let passphrase = try world.sandbox.write("client-passphrase", "client passphrase\n")
        try world.sandbox.runTool("dcprovision", ["testca", "init", "ca", "--recovery-cert", "officer/recovery.pem"])
        func setUpClient() throws {
            try world.sandbox.runTool(
                "dcclient",
                [
                    "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                    "--passphrase-file", passphrase,
                ])
            try world.sandbox.runTool("dcclient", ["register"])
            try world.sandbox.runTool("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        }
        try world.sandbox.runTool(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.dcprovision", "--brand", "Recovering Provider",
                "--testca", "ca",
            ])
        try setUpClient()
        let send = [
            "send", "--testca", "ca", "--brand", "Recovering Provider", "--provider-scheme",
            "org.example.dcprovision", "--client-scheme", "org.example.dcclient",
        ]
        try world.sandbox.runTool("dcprovision", send)
        let certificate = try world.sandbox.runTool("dcclient", ["show", "encryption", "--format", "pem"]).stdoutText
        try world.sandbox.write("lost.pem", certificate)
        try world.sandbox.write("note.txt", "written before the store was lost\n")
        let encrypted = try world.openssl([
            "cms", "-encrypt", "-aes256", "-binary", "-in", "note.txt", "-out", "note.smime", "-recip", "lost.pem",
        ])
        #expect(encrypted.status == 0, "\(encrypted.stderrText)")
        try world.sandbox.runTool("dcclient", ["decrypt", "note.smime"])

        // The store is gone (a new laptop); the client is set up afresh and paired again.
        try FileManager.default.removeItem(atPath: world.sandbox.dataHome + "/dcclient")
        try setUpClient()
        try world.sandbox.runTool("dcprovision", send)
        try world.sandbox.runTool("dcclient", ["decrypt", "note.smime"], expect: 65)

        let recovered = try world.sandbox.runTool(
            "dcprovision", send + ["--recover", "--recovery-key", "officer/recovery.key"])
        #expect(recovered.stdoutText.contains("recovered 6 archived encryption key(s)"), "\(recovered.stdoutText)")
        let opened = try world.sandbox.runTool("dcclient", ["decrypt", "note.smime"])
        #expect(opened.stdoutText == "written before the store was lost\n", "\(opened.stdoutText)")
        // --recover without the key, or with a source whose CA cannot recover, is a usage error.
        try world.sandbox.runTool("dcprovision", send + ["--recover"], expect: 64)
    }
}
