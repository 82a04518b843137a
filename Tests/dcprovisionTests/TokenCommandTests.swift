import Foundation
import TestSupport
import Testing

@Suite("dcprovision tokens and objects", .ownThreads, .softHSM, .timeLimit(.minutes(5)))
struct TokenCommandTests {
    private func dcprovision(_ arguments: [String], stdin: [UInt8]? = nil) throws -> ProcessResult {
        let hsm = SoftHSM.shared
        var environment = try Sandbox.shared().environment
        environment["SOFTHSM2_CONF"] = hsm.configuration
        return try run(Binaries.dcprovision, arguments, stdin: stdin, environment: environment, timeout: 60)
    }

    @Test("tokens lists the card with its PIN state; --json parses")
    func tokens() throws {
        let text = try dcprovision(["tokens", "--module", "softhsm2"])
        #expect(text.status == 0, "\(text.stderrText)")
        #expect(text.stdoutText.contains("PIV Card  (SoftHSM project SoftHSM v2, serial "))
        #expect(text.stdoutText.contains("login required"))
        #expect(text.stdoutText.contains("pkcs11:model=SoftHSM%20v2;manufacturer=SoftHSM%20project;serial="))
        let json = try dcprovision(["tokens", "--module", "softhsm2", "--json"])
        let tokens = try jsonPayload(json.stdout, "tokens") as? [[String: Any]]
        #expect(
            tokens?.contains { $0["label"] as? String == "PIV Card" && $0["loginRequired"] as? Bool == true } == true)
    }

    @Test(
        "tokens and objects --json agree with p11tool: the same tokens under the same URIs, the same certificates with the same ids, labels, URIs and key types, and the subjects openssl reads from p11tool's export"
    )
    func agreesWithP11Tool() throws {
        let sandbox = try Sandbox("tokens-p11tool")
        defer { sandbox.remove() }
        let environment = ["SOFTHSM2_CONF": SoftHSM.shared.configuration]
        func json(_ arguments: [String]) throws -> [[String: Any]] {
            let result = try sandbox.run(Binaries.dcprovision, arguments, environment: environment)
            try #require(result.status == 0, "dcprovision \(arguments): \(result.stderrText)")
            return try #require(try jsonPayload(result.stdout, arguments[0]) as? [[String: Any]])
        }
        func p11tool(_ arguments: [String]) throws -> String {
            let result = try SoftHSM.p11tool(arguments, in: sandbox)
            try #require(result.status == 0, "p11tool \(arguments): \(result.stderrText)")
            return result.stdoutText
        }
        // The initialised tokens (p11tool does not list SoftHSM's free slot), URI for URI.
        let tokens = try json(["tokens", "--module", SoftHSM.module, "--json"]).filter {
            $0["initialized"] as? Bool == true
        }
        let tokenURLs = try p11tool(["--list-token-urls"]).split(separator: "\n").map(String.init)
        #expect(
            Set(tokens.compactMap { $0["uri"] as? String }.map(SoftHSM.uriAttributes))
                == Set(tokenURLs.map(SoftHSM.uriAttributes)))
        #expect(tokens.count == 3)
        // Label, serial, manufacturer and model as p11tool prints them.
        let listed = SoftHSM.parseP11ToolListing(try p11tool(["--list-tokens"]))
        for token in tokens {
            let theirs = try #require(listed.first { $0.fields["Label"] == token["label"] as? String })
            #expect(theirs.fields["Serial"] == token["serialNumber"] as? String)
            #expect(theirs.fields["Manufacturer"] == token["manufacturer"] as? String)
            #expect(theirs.fields["Model"] == token["model"] as? String)
        }
        // The certificates of the cards whose files no other test rewrites (wrong PINs make SoftHSM
        // rewrite the PIN card's).
        for card in [SoftHSM.shared.pivCard, SoftHSM.shared.exportCard] {
            let uri = try #require(tokens.first { $0["label"] as? String == card }?["uri"] as? String)
            let ours = try json(["objects", uri + ";type=cert", "--module", SoftHSM.module, "--json"])
            let theirs = SoftHSM.parseP11ToolListing(try p11tool(["--list-all-certs", uri]))
            #expect(ours.count == theirs.count && !ours.isEmpty, "\(card)")
            #expect(
                Set(ours.compactMap { $0["uri"] as? String }.map(SoftHSM.uriAttributes))
                    == Set(theirs.map { SoftHSM.uriAttributes($0.url) }), "\(card)")
            for object in ours {
                let id = try #require(object["id"] as? String)
                let other = try #require(theirs.first { $0.fields["ID"] == id }, "\(card) id \(id)")
                #expect(other.fields["Label"] == object["label"] as? String)
                // "X.509 Certificate (EC/ECDSA-SECP256R1)", "X.509 Certificate (RSA-2048)".
                let bits = object["keyBits"] as? Int ?? 0
                let keyType =
                    object["keyType"] as? String == "RSA" ? "RSA-\(bits)" : "EC/ECDSA-SECP\(bits == 521 ? 521 : bits)R1"
                #expect(other.fields["Type"] == "X.509 Certificate (\(keyType))", "\(card) id \(id)")
                // The subject we print is the one openssl reads from the certificate p11tool exports.
                let pem = try sandbox.write("\(card)-\(id).pem", try p11tool(["--export", other.url]))
                let subject = try sandbox.run(
                    OpenSSLFixtures.openssl, ["x509", "-in", pem, "-noout", "-subject", "-nameopt", "RFC2253,-esc_msb"])
                #expect(subject.stdoutText == "subject=\(object["subject"] as? String ?? "")\n", "\(card) id \(id)")
            }
        }
    }

    @Test("inspect --pkcs11: exported keys validate; a PIV card's keys give exit 65 pointing at derivation")
    func inspectToken() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pin = try dir.write("pin", SoftHSM.userPIN + "\n")
        let exported = try dcprovision([
            "inspect", "--pkcs11", "pkcs11:token=Export%20Card", "--object", "authentication=01", "--object",
            "signing=pkcs11:object=Certificate%202",
            "--pkcs11-module", "softhsm2", "--pin-file", pin,
        ])
        #expect(exported.status == 0, "\(exported.stderrText)")
        #expect(exported.stdoutText.contains("valid: 0 error(s)"))
        let piv = try dcprovision([
            "inspect", "--pkcs11", "pkcs11:token=PIV%20Card", "--layout", "piv", "--pkcs11-module", "softhsm2",
            "--pin-file", pin,
        ])
        #expect(piv.status == 65)
        #expect(piv.stderrText.contains("pkcs11:token=PIV%20Card;id=%01: the private key cannot leave the card"))
        let noPIN = try dcprovision(
            ["inspect", "--pkcs11", "pkcs11:token=PIV%20Card", "--layout", "piv", "--pkcs11-module", "softhsm2"],
            stdin: [])
        #expect(noPIN.status == 77)
    }

    @Test("objects lists certificates by URI; no match is exit 66; a PIN in the URI is exit 64")
    func objects() throws {
        let listed = try dcprovision(["objects", "pkcs11:token=PIV%20Card;type=cert", "--module", "softhsm2"])
        #expect(listed.status == 0, "\(listed.stderrText)")
        #expect(listed.stdoutText.contains("certificate  id 01  \"Certificate for PIV Authentication\"  EC 256"))
        #expect(listed.stdoutText.contains("subject: CN=Alice signing,O=Derived Credentials Test"))
        let json = try dcprovision(["objects", "pkcs11:token=PIV%20Card;id=%03", "--module", "softhsm2", "--json"])
        let objects = try jsonPayload(json.stdout, "objects") as? [[String: Any]]
        // One certificate only: this process never logged in, so the private key with id 03 is not
        // visible (PKCS#11 login state is per process; this claim needs a process of its own).
        #expect(objects?.map { $0["id"] as? String } == ["03"])
        #expect(objects?.map { $0["kind"] as? String } == ["certificate"])
        #expect(try dcprovision(["objects", "pkcs11:token=Nobody", "--module", "softhsm2"]).status == 66)
        let pin = try dcprovision(["objects", "pkcs11:token=PIV%20Card;pin-value=123456", "--module", "softhsm2"])
        #expect(pin.status == 64)
        #expect(!pin.stderrText.contains("123456"))
    }

    /// Runs `dcprovision inspect --pkcs11 … --derive --testca DIR/ca` with `extra` arguments through
    /// the fault module, which counts the calls into `log`: the result, and the counts (none when no
    /// module was loaded: the module writes its log when it is unloaded).
    private func deriveThroughFaultModule(_ dir: TemporaryDirectory, pin: String, _ extra: [String], log: String)
        throws -> (ProcessResult, [String: Int])
    {
        var environment = try Sandbox.shared().environment
        environment["SOFTHSM2_CONF"] = SoftHSM.shared.configuration
        environment["DC_FAULT_CALL_LOG"] = dir.file(log)
        let result = try run(
            Binaries.dcprovision,
            [
                "inspect", "--pkcs11", "pkcs11:token=PIV%20Card", "--layout", "piv", "--derive", "--testca",
                dir.file("ca"), "--pkcs11-module", Binaries.directory + "/libDCFaultPKCS11.so", "--pin-file", pin,
                // The openssl fixtures' card CA publishes no CRL or responder.
                "--allow-unchecked-revocation",
            ] + extra,
            environment: environment, timeout: 60)
        let text = FileManager.default.fileExists(atPath: dir.file(log)) ? try readText(dir.file(log)) : ""
        let calls = Dictionary(
            uniqueKeysWithValues: text.split(separator: "\n").map {
                let parts = $0.split(separator: " ")
                return (String(parts[0]), Int(parts[1])!)
            })
        return (result, calls)
    }

    @Test(
        "inspect --derive: one login and one signature on the card (calls counted by the fault module, which injects nothing here)"
    )
    func deriveCallCounts() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pin = try dir.write("pin", SoftHSM.userPIN + "\n")
        #expect(try dcprovision(["testca", "init", dir.file("ca")]).status == 0)
        let (result, calls) = try deriveThroughFaultModule(
            dir, pin: pin,
            ["--trust-anchor", dir.file("ca/root.pem"), "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate],
            log: "calls")
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(result.stdoutText.contains("valid: 0 error(s)"), "\(result.stdoutText)")
        #expect(calls["C_Login"] == 1)
        #expect(calls["C_SignInit"] == 1)
        #expect(calls["C_Sign"] == 1)
        // One search for the certificates, one for the authentication key.
        #expect(calls["C_FindObjectsInit"] == 2)
    }

    @Test(
        "A slot named by slot-id that holds no token is exit 66 naming the slot (an empty reader, shown by the fault module); tokens lists no such slot"
    )
    func emptySlot() throws {
        var environment = try Sandbox.shared().environment
        environment["SOFTHSM2_CONF"] = SoftHSM.shared.configuration
        environment["DC_FAULT"] = "empty-slot"
        let module = PINSafetyTests.faultModule
        let empty = try run(
            Binaries.dcprovision, ["objects", "pkcs11:slot-id=4242", "--module", module], environment: environment,
            timeout: 60)
        #expect(empty.status == 66)
        #expect(
            empty.stderrText
                == "dcprovision: pkcs11:slot-id=4242: slot-id=4242 of module \(module) has no token in it (no card "
                + "inserted); insert the card, or see dcprovision tokens\n")
        let tokens = try run(
            Binaries.dcprovision, ["tokens", "--module", module, "--json"], environment: environment, timeout: 60)
        #expect(tokens.status == 0, "\(tokens.stderrText)")
        let listed = try #require(try jsonPayload(tokens.stdout, "tokens") as? [[String: Any]])
        #expect(listed.count == 4 && !listed.contains { $0["slot"] as? Int == 4242 })
        // A slot id no slot has is no error: nothing matches.
        let none = try run(
            Binaries.dcprovision, ["objects", "pkcs11:slot-id=4243", "--module", module], environment: environment,
            timeout: 60)
        #expect(none.status == 66, "\(none.stderrText)")
        #expect(!none.stderrText.contains("no card inserted"))
    }

    @Test(
        "--derive without --card-trust-anchor is a usage error (64) before the card is touched; a card from another CA is refused (77)"
    )
    func deriveNeedsCardTrustAnchor() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let pin = try dir.write("pin", SoftHSM.userPIN + "\n")
        #expect(try dcprovision(["testca", "init", dir.file("ca")]).status == 0)
        let (missing, untouched) = try deriveThroughFaultModule(dir, pin: pin, [], log: "calls-missing")
        #expect(missing.status == 64, "\(missing.stderrText)")
        #expect(missing.stderrText.contains("--card-trust-anchor"), "\(missing.stderrText)")
        #expect(untouched["C_Login"] == nil)
        #expect(untouched["C_Sign"] == nil)

        let (other, _) = try deriveThroughFaultModule(
            dir, pin: pin, ["--card-trust-anchor", OpenSSLFixtures.shared.otherCA.certificate], log: "calls-other")
        #expect(other.status == 77, "\(other.stderrText)")
        #expect(other.stderrText.contains("does not chain"), "\(other.stderrText)")
    }
}
