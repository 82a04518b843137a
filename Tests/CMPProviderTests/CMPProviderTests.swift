import CMPClient
import CMPProvider
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// The `cmp` provider against a CA we did not write: `openssl cmp -port`, OpenSSL's mock CMP
/// server, which checks our protection and proof of possession and answers with the certificate
/// the openssl CLI made for it. The openssl CLI judges what comes back.
@Suite("CMP enrolment against openssl's mock CMP server", .ownThreads, .timeLimit(.minutes(3)))
struct CMPProviderTests {
    /// A PKI, a leaf for `tag` and the options of a PBMAC-protected `ir` to `server`.
    struct World {
        let directory: TemporaryDirectory
        let pki: CMPTestPKI

        init(_ label: String) throws {
            directory = try TemporaryDirectory(label)
            pki = try CMPTestPKI(in: directory)
        }

        func options(_ server: CMPMockServer, tag: String, key: String, more: [String: [String]] = [:])
            -> [String: [String]]
        {
            [
                "server": [server.url], "trust-anchor": [pki.ca.certificate], "reference": [pki.reference],
                "secret-file": [pki.secretFile], "tag": [tag], "new-key": ["\(tag)=\(key)"],
                "subject": ["O=Example CMP Test,CN=Alice"],
            ].merging(more) { $1 }
        }

        func provide(_ options: [String: [String]]) async throws -> ProvidedCredential {
            try await CMPProvider().provide(ProviderRequest(options: options, workingDirectory: directory.path))
        }
    }

    static func spki(certificate file: String) throws -> String {
        try run(OpenSSLFixtures.openssl, ["x509", "-in", file, "-noout", "-pubkey"]).stdoutText
    }

    @Test(
        "ir with a shared secret (PBMAC): the certificate the mock CA answers with, for our key, chaining to the CA (openssl verify), with caPubs as its chain"
    )
    func initialRegistration() async throws {
        let world = try World("cmp-ir")
        defer { world.directory.remove() }
        let leaf = try world.pki.leaf("authentication")
        let server = try CMPMockServer.start(world.pki, answering: leaf.certificate, caPubs: world.pki.ca.certificate)
        defer { server.stop() }
        let provided = try await world.provide(world.options(server, tag: "authentication", key: leaf.key))
        #expect(provided.entries.map(\.tag) == [.authentication])
        let entry = try #require(provided.entries.first)
        let issued = try world.directory.write("issued.pem", pem(entry.certificate))
        #expect(try readText(issued) == (try readText(leaf.certificate)))
        let verified = try run(OpenSSLFixtures.openssl, ["verify", "-CAfile", world.pki.ca.certificate, issued])
        #expect(verified.status == 0, "\(verified.stdoutText)\(verified.stderrText)")
        // The key that came back is the one certified (openssl's public key of each).
        let key = try world.directory.write("key.pem", pem(entry.privateKey))
        let fromKey = try run(OpenSSLFixtures.openssl, ["pkey", "-in", key, "-pubout"]).stdoutText
        #expect(fromKey == (try Self.spki(certificate: issued)))
        #expect(provided.chain == [try CredentialReader().read(file: world.pki.ca.certificate).certificates[0]])
        #expect(provided.warnings.isEmpty)
    }

    @Test(
        "A fresh key that the mock CA's certificate is not for: refused as not ours (caAnswerNotTrusted), nothing returned"
    )
    func certificateForAnotherKey() async throws {
        let world = try World("cmp-other-key")
        defer { world.directory.remove() }
        let leaf = try world.pki.leaf("authentication")
        let server = try CMPMockServer.start(world.pki, answering: leaf.certificate)
        defer { server.stop() }
        var options = world.options(server, tag: "authentication", key: leaf.key)
        options["new-key"] = nil
        await #expect { try await world.provide(options) } throws: { ($0 as? DCError)?.code == .caAnswerNotTrusted }
    }

    @Test(
        "Failures, each its own code: a wrong secret (caRefused), a server signing with another certificate than the one pinned (caServerMismatch), an answer signed by a key no anchor vouches for (caAnswerNotTrusted), a server that is down (caUnreachable)"
    )
    func failures() async throws {
        let world = try World("cmp-failures")
        defer { world.directory.remove() }
        let pki = world.pki
        let leaf = try pki.leaf("authentication")
        func code(_ options: [String: [String]]) async -> DCError.Code? {
            do {
                _ = try await world.provide(options)
                return nil
            } catch { return (error as? DCError)?.code }
        }
        // A wrong secret.
        let secret = try CMPMockServer.start(pki, answering: leaf.certificate)
        let wrong = try world.directory.write("wrong.txt", "not the secret")
        #expect(
            await code(world.options(secret, tag: "authentication", key: leaf.key, more: ["secret-file": [wrong]]))
                == .caRefused)
        secret.stop()
        // Signature-protected requests (a cr by the certificate the CA issued before) to a server
        // that signs its answers: with the server's certificate pinned to another one, and with
        // a server whose key no anchor vouches for.
        let signed = ["certificate": [leaf.certificate], "key": [leaf.key], "request": ["cr"]]
        let genuine = try CMPMockServer.start(
            pki, answering: leaf.certificate, secret: false, signer: pki.server, clientTrust: pki.ca.certificate)
        var pinned = world.options(genuine, tag: "authentication", key: leaf.key, more: signed)
        pinned["reference"] = nil
        pinned["secret-file"] = nil
        #expect(await code(pinned) == nil, "the genuine server, trusted through the anchors")
        pinned["server-certificate"] = [pki.rogue.certificate]
        #expect(await code(pinned) == .caServerMismatch)
        genuine.stop()
        let rogue = try CMPMockServer.start(
            pki, answering: leaf.certificate, secret: false, signer: pki.rogue, clientTrust: pki.ca.certificate)
        var untrusted = world.options(rogue, tag: "authentication", key: leaf.key, more: signed)
        untrusted["reference"] = nil
        untrusted["secret-file"] = nil
        #expect(await code(untrusted) == .caAnswerNotTrusted)
        rogue.stop()
        // Nothing listening.
        let down = "http://127.0.0.1:\(try freeLocalPort())/pkix/"
        // OpenSSL's HTTP client tries to connect until the message timeout.
        var unreachable = world.options(rogue, tag: "authentication", key: leaf.key, more: ["message-timeout": ["2"]])
        unreachable["server"] = [down]
        #expect(await code(unreachable) == .caUnreachable)
    }

    @Test(
        "Polling: a CA that answers 'waiting' twice is polled (pollReq) until it issues; one that waits past total-timeout is caPending"
    )
    func polling() async throws {
        let world = try World("cmp-poll")
        defer { world.directory.remove() }
        let leaf = try world.pki.leaf("authentication")
        let patient = try CMPMockServer.start(
            world.pki, answering: leaf.certificate, more: ["-poll_count", "2", "-check_after", "1"])
        let provided = try await world.provide(world.options(patient, tag: "authentication", key: leaf.key))
        #expect(provided.entries.first?.certificate.derBytes.isEmpty == false)
        #expect(patient.logText.components(separatedBy: "POST /pkix/").count - 1 >= 4, "\(patient.logText)")
        patient.stop()
        let slow = try CMPMockServer.start(
            world.pki, answering: leaf.certificate, more: ["-poll_count", "5", "-check_after", "2"])
        defer { slow.stop() }
        await #expect {
            try await world.provide(
                world.options(slow, tag: "authentication", key: leaf.key, more: ["total-timeout": ["2"]]))
        } throws: { ($0 as? DCError)?.code == .caPending }
    }

    @Test(
        "kur: signed by the certificate it renews, the server's signed answer checked against the anchors; rr revokes a certificate; a kur with archive-certificate puts its archive control after the oldCertID and still verifies"
    )
    func keyUpdateAndRevocation() async throws {
        let world = try World("cmp-kur")
        defer { world.directory.remove() }
        let pki = world.pki
        // The mock server renews into the certificate it was given and checks that the kur names
        // that certificate as the old one: the "renewed" certificate is the old one, its key the same.
        let old = try pki.leaf("signing")
        let renewed = old
        let server = try CMPMockServer.start(
            pki, answering: renewed.certificate, secret: false, signer: pki.server, clientTrust: pki.ca.certificate)
        defer { server.stop() }
        let options: [String: [String]] = [
            "server": [server.url], "trust-anchor": [pki.ca.certificate], "certificate": [old.certificate],
            "key": [old.key], "request": ["kur"], "tag": ["signing"], "new-key": ["signing=\(renewed.key)"],
        ]
        let provided = try await world.provide(options)
        let issued = try world.directory.write("kur.pem", pem(try #require(provided.entries.first).certificate))
        #expect(try readText(issued) == (try readText(renewed.certificate)))
        #expect(server.logText.contains("POST /pkix/"))
        // The old certificate revoked, over the same signed protection.
        try await CMPProvider().revoke(
            ProviderRequest(options: options, workingDirectory: world.directory.path),
            certificates: [try CredentialReader().read(file: old.certificate).certificates[0]],
            reason: .cessationOfOperation)

        // A kur of an encryption key sent for archival: the request carries the oldCertID control
        // OpenSSL put in and the archive control after it, and the mock CA still checks its
        // signature (the proof of possession) over both and names the old certificate.
        // (It signs its own kur, so its key usage allows signatures too.)
        let encryption = try OpenSSLFixtures.issue(
            name: "kur-encryption", key: .p256, by: pki.ca, subject: "/O=Example CMP Test/CN=Alice",
            keyUsage: "critical,digitalSignature,keyAgreement", extendedKeyUsage: "emailProtection",
            in: world.directory)
        let encrypting = try CMPMockServer.start(
            pki, answering: encryption.certificate, secret: false, signer: pki.server, clientTrust: pki.ca.certificate)
        defer { encrypting.stop() }
        let archived = try await world.provide([
            "server": [encrypting.url], "trust-anchor": [pki.ca.certificate], "certificate": [encryption.certificate],
            "key": [encryption.key], "request": ["kur"], "tag": ["encryption"],
            "new-key": ["encryption=\(encryption.key)"],
            "archive-certificate": [try pki.archiveRecipient().certificate],
        ])
        #expect(archived.entries.map(\.tag) == [.encryption])
        #expect(archived.warnings.isEmpty, "\(archived.warnings)")
    }

    @Test(
        "Options: a server is http[s]://HOST[:PORT]/PATH (other schemes and bad ports are usage errors); a secret and a certificate together, a kur with a secret, an ir without a subject are usage errors, before anything is sent"
    )
    func optionRules() async throws {
        let address = try CMPServerAddress(url: "http://ca.example:8080/ejbca/publicweb/cmp/alias")
        #expect(address.host == "ca.example" && address.port == 8080 && address.path == "ejbca/publicweb/cmp/alias")
        #expect(try CMPServerAddress(url: "http://[::1]/pkix/").description == "http://[::1]:80/pkix/")
        let secure = try CMPServerAddress(url: "https://ca.example/.well-known/cmp")
        #expect(secure.usesTLS && secure.port == 443 && secure.description == "https://ca.example:443/.well-known/cmp")
        for bad in [
            "ftp://ca.example/", "httpx://ca.example/", "http://ca.example:0/", "http://:80/", "http://a@b/",
        ] {
            #expect(throws: DCError.self, "\(bad)") { try CMPServerAddress(url: bad) }
        }
        let world = try World("cmp-options")
        defer { world.directory.remove() }
        let leaf = try world.pki.leaf("authentication")
        let base: [String: [String]] = [
            "server": ["http://127.0.0.1:1/pkix/"], "trust-anchor": [world.pki.ca.certificate],
            "reference": [world.pki.reference], "secret-file": [world.pki.secretFile], "tag": ["authentication"],
            "subject": ["CN=Alice"],
        ]
        let cases: [(String, [String: [String]])] = [
            ("secret and certificate", base.merging(["certificate": [leaf.certificate], "key": [leaf.key]]) { $1 }),
            ("kur with a secret", base.merging(["request": ["kur"]]) { $1 }),
            ("no subject", base.filter { $0.key != "subject" }),
            ("no protection", base.filter { $0.key != "secret-file" }),
            ("no reference", base.filter { $0.key != "reference" }),
        ]
        for (what, options) in cases {
            await #expect(throws: DCError.self, "\(what)") { try await world.provide(options) }
            do {
                _ = try await world.provide(options)
            } catch { #expect((error as? DCError)?.code == .usage, "\(what): \(error)") }
        }
    }

    @Test(
        "certify (--derive): the card's proof over a challenge this provider issued is checked, the public key goes to the CA as raVerified and its certificate comes back, kept by card in the record; a replayed proof is refused, and so is archive-certificate"
    )
    func certifyDerivedKey() async throws {
        let world = try World("cmp-certify")
        defer { world.directory.remove() }
        let pki = world.pki
        // The card: a certificate and key made by the openssl CLI; the key to certify: the leaf's,
        // whose certificate the mock CA answers with.
        let card = try pki.leaf("authentication", subject: "/O=Example CMP Test/CN=Alice Card")
        let leaf = try pki.leaf("authentication", subject: "/O=Example CMP Test/CN=Alice Card")
        let server = try CMPMockServer.start(pki, answering: leaf.certificate, more: ["-accept_raverified"])
        defer { server.stop() }
        let options: [String: [String]] = [
            "server": [server.url], "trust-anchor": [pki.ca.certificate], "reference": [pki.reference],
            "secret-file": [pki.secretFile], "record": ["record"],
        ]
        let provider = CMPProvider()
        let request = ProviderRequest(options: options, workingDirectory: world.directory.path)
        let challenge = try await provider.challenge(request)
        let challengeFile = world.directory.file("challenge.bin")
        try Data(challenge).write(to: URL(fileURLWithPath: challengeFile))
        let signature = try OpenSSLFixtures.openssl(["dgst", "-sha256", "-sign", card.key, challengeFile])
        let cardCertificate = try CredentialReader().read(file: card.certificate).certificates[0]
        let publicKey = try OpenSSLFixtures.openssl(["pkey", "-in", leaf.key, "-pubout", "-outform", "DER"])
        let proof = PossessionProof(certificate: cardCertificate, challenge: challenge, signature: signature)
        let certification = CertificationRequest(
            request: request, subject: try CertificateDetails.subjectDER(of: cardCertificate),
            publicKeys: [.authentication: publicKey], proof: proof)
        let issued = try await provider.certify(certification)
        let certificate = try #require(issued.certificates[.authentication])
        #expect(certificate == (try CredentialReader().read(file: leaf.certificate).certificates[0]))
        // Kept by card, for terminate to revoke.
        let cardSerial = try CertificateDetails(cardCertificate).serialNumber
        #expect(
            try CMPRecord(directory: world.directory.file("record")).certificates(cardSerial: cardSerial) == [
                certificate
            ])
        await #expect { try await provider.certify(certification) } throws: {
            ($0 as? DCError)?.code == .possessionNotProven
        }
        // A derived key is certified by its public key alone: there is nothing to archive.
        let archiving = CertificationRequest(
            request: ProviderRequest(
                options: options.merging(["archive-certificate": [pki.ca.certificate]]) { $1 },
                workingDirectory: world.directory.path),
            subject: certification.subject, publicKeys: certification.publicKeys, proof: proof)
        await #expect { try await provider.certify(archiving) } throws: {
            ($0 as? DCError)?.code == .usage && "\($0)".contains("archive-certificate")
        }
    }

    @Test(
        "An encryption key without archive-certificate: enrolled, and the answer says it was not archived at the CA; with it, the mock CA still accepts the request (its protection and proof of possession verify with the archive control in it) and no warning is given"
    )
    func encryptionArchival() async throws {
        let world = try World("cmp-archive")
        defer { world.directory.remove() }
        let leaf = try world.pki.leaf("encryption")
        let server = try CMPMockServer.start(world.pki, answering: leaf.certificate)
        defer { server.stop() }
        let provided = try await world.provide(world.options(server, tag: "encryption", key: leaf.key))
        #expect(provided.entries.map(\.tag) == [.encryption])
        #expect(provided.warnings.count == 1)
        #expect(provided.warnings.first?.contains("not asked to archive the encryption key") == true)

        let archive = try world.pki.archiveRecipient()
        let archived = try await world.provide(
            world.options(
                server, tag: "encryption", key: leaf.key, more: ["archive-certificate": [archive.certificate]]))
        #expect(archived.entries.map(\.tag) == [.encryption])
        #expect(archived.warnings.isEmpty, "\(archived.warnings)")
    }
}

/// A certificate as PEM text.
func pem(_ certificate: Certificate) -> String { String(decoding: PEM.certificate(certificate), as: UTF8.self) }

/// A private key as PEM text (for the openssl CLI, in a test's temporary directory).
func pem(_ key: PrivateKey) -> String {
    PEM.privateKey(key).withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
}
