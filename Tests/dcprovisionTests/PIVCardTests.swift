import Foundation
import PKCS11Provider
import TestSupport
import Testing

/// The card path as a real card takes it: a real `pcscd` with `vpcd` readers, our virtual PIV card
/// (Tests/VirtualPIVCard) behind them, OpenSC's PIV driver reached through p11-kit's registration
/// (no module path given), keys made on the card by `piv-tool`. OpenSC's own tools are the oracle
/// for what the card holds. The emulator stands in for the card itself, the one part that cannot
/// run here; everything between a program and the card is the real stack.
@Suite("A PIV card through pcscd and OpenSC", .ownThreads, .timeLimit(.minutes(10)))
struct PIVCardTests {
    /// One test's readers, cards and sandbox.
    final class World {
        let cards: VirtualCards
        let sandbox: Sandbox
        let pin: String

        init(_ label: String, cards count: Int = 1, slots: String? = nil, delayMilliseconds: Int? = nil) throws {
            cards = try VirtualCards(label, cards: count, delayMilliseconds: delayMilliseconds)
            for card in 1...count { try cards.provision(card: card, slots: slots) }
            sandbox = try Sandbox(label, extra: cards.environment)
            pin = try sandbox.directory.write("pin", VirtualCards.pin + "\n")
        }

        deinit {
            cards.stop()
            sandbox.directory.remove()
        }

        func dcprovision(_ arguments: [String], timeout: TimeInterval = 120) throws -> ProcessResult {
            try run(Binaries.dcprovision, arguments, environment: sandbox.environment, timeout: timeout)
        }

        /// OpenSC's pkcs11-tool on the same pcscd: the oracle.
        func pkcs11Tool(_ arguments: [String]) throws -> ProcessResult {
            try run(
                "pkcs11-tool", ["--module", "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so"] + arguments,
                environment: sandbox.environment, timeout: 120)
        }

        /// The one token's URI as `dcprovision tokens` lists it.
        func tokenURI() throws -> String {
            let tokens = try dcprovision(["tokens", "--json"])
            #expect(tokens.status == 0, "\(tokens.stderrText)")
            let listed = try jsonPayload(tokens.stdout, "tokens") as? [[String: Any]] ?? []
            return try #require(listed.first { $0["label"] as? String == VirtualCards.label }?["uri"] as? String)
        }
    }

    /// The error lines: what standard error says besides the tries left shown before a login and
    /// warnings (a registered module this user cannot initialise, such as SoftHSM2 with the
    /// system's token directory, is left out with one).
    static func lines(_ result: ProcessResult) -> [Substring] {
        result.stderrText.split(separator: "\n").filter { !$0.contains("tries left") && !$0.contains("warning:") }
    }

    @Test(
        "The emulator's own checks of what OpenSC cannot drive: external authentication, the PUK, PIN Always, chaining, state reload"
    )
    func emulatorChecks() throws {
        let checks = try run(
            "/usr/bin/python3", ["-B", Repository.root + "/Tests/VirtualPIVCard/test_virtual_piv_card.py"],
            environment: try Sandbox.shared().environment, timeout: 60)
        #expect(checks.status == 0, "\(checks.stdoutText)\(checks.stderrText)")
    }

    @Test("OpenSC takes the emulator for a PIV card and sees what piv-tool put on it")
    func openSCSeesAPIVCard() throws {
        let world = try World("piv-oracle")
        let name = try run("opensc-tool", ["--name"], environment: world.sandbox.environment)
        #expect(name.stdoutText.contains("Personal Identity Verification"), "\(name.stdoutText)\(name.stderrText)")
        let objects = try world.pkcs11Tool(["--list-objects"])
        #expect(objects.status == 0, "\(objects.stderrText)")
        for label in [
            "Certificate for PIV Authentication", "Certificate for Digital Signature",
            "Certificate for Key Management", "Certificate for Card Authentication",
            "Retired Certificate for Key Management 1",
        ] {
            #expect(objects.stdoutText.contains(label), "\(objects.stdoutText)")
        }
    }

    @Test(
        "tokens, objects and inspect through p11-kit's registration of OpenSC, no module path given; the PIN is never needed to read certificates"
    )
    func listing() throws {
        let world = try World("piv-listing")
        let uri = try world.tokenURI()
        #expect(uri.contains("token=PIV%20Cardholder") && uri.contains("manufacturer=piv_II"), "\(uri)")
        let objects = try world.dcprovision(["objects", uri + ";type=cert", "--json"])
        #expect(objects.status == 0, "\(objects.stderrText)")
        let listed = try jsonPayload(objects.stdout, "objects") as? [[String: Any]] ?? []
        #expect(Set(listed.compactMap { $0["id"] as? String }) == ["01", "02", "03", "04", "05", "06"], "\(listed)")
        // inspect reads the keys too: on a PIV card they stay, and it says to derive instead.
        let inspected = try world.dcprovision(["inspect", "--pkcs11", uri, "--layout", "piv", "--pin-file", world.pin])
        #expect(inspected.status == 65, "\(inspected.stdoutText)\(inspected.stderrText)")
        #expect(inspected.stderrText.contains("--derive"), "\(inspected.stderrText)")
        #expect(!(inspected.stdoutText + inspected.stderrText).contains(VirtualCards.pin))
    }

    @Test("--layout piv names OpenSC's ids and labels for all 24 key slots")
    func layoutMatchesOpenSC() throws {
        let slots = PIVLayout.slots.map { String(format: "%02x:p256", $0.keyReference) }.joined(separator: ",")
        let world = try World("piv-layout", slots: slots)
        let listed = try world.pkcs11Tool(["--list-objects", "--login", "--pin", VirtualCards.pin])
        #expect(listed.status == 0, "\(listed.stderrText)")
        // pkcs11-tool prints each object as a block: a "… Object; type" line, then "label:" and "ID:".
        var seen: [(kind: String, label: String, id: String)] = []
        var kind = ""
        var label = ""
        for line in listed.stdoutText.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            if text.contains("Object;") {
                kind = text.hasPrefix("Certificate") ? "cert" : text.hasPrefix("Private") ? "key" : "other"
            }
            if text.hasPrefix("label:") { label = text.dropFirst("label:".count).trimmingCharacters(in: .whitespaces) }
            if text.hasPrefix("ID:") {
                seen.append((kind, label, text.dropFirst("ID:".count).trimmingCharacters(in: .whitespaces)))
            }
        }
        #expect(PIVLayout.slots.count == 24)
        for slot in PIVLayout.slots {
            let id = String(format: "%02x", slot.id)
            #expect(
                seen.contains { $0.kind == "cert" && $0.id == id && $0.label == slot.certificateLabel },
                "certificate of \(String(format: "%02X", slot.keyReference)): \(id) \(slot.certificateLabel)")
            #expect(
                seen.contains { $0.kind == "key" && $0.id == id && $0.label == slot.keyLabel },
                "key of \(String(format: "%02X", slot.keyReference)): \(id) \(slot.keyLabel)")
        }
        // And our listing of the same card agrees, without a PIN.
        let ours = try world.dcprovision(["objects", try world.tokenURI() + ";type=cert", "--json"])
        let ids = Set(
            (try jsonPayload(ours.stdout, "objects") as? [[String: Any]] ?? []).compactMap { $0["id"] as? String })
        #expect(ids == Set(PIVLayout.slots.map { String(format: "%02x", $0.id) }))
    }

    @Test("convert of a PIV card: the keys stay on the card, one line pointing at --derive, nothing written")
    func keysStay() throws {
        let world = try World("piv-export")
        let out = world.sandbox.file("out")
        let converted = try world.dcprovision([
            "convert", "--pkcs11", try world.tokenURI(), "--layout", "piv", "--pin-file", world.pin, "--out-dir", out,
        ])
        #expect(converted.status == 65, "\(converted.stderrText)")
        #expect(converted.stderrText.contains("--derive"), "\(converted.stderrText)")
        #expect(Self.lines(converted).count == 1, "\(converted.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: out))
    }

    @Test(
        "--derive: the card's 9A key signs the CA's challenge through GENERAL AUTHENTICATE; new keys, certified, written"
    )
    func derive() throws {
        let world = try World("piv-derive")
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.sandbox.directory)
        let ca = world.sandbox.file("ca")
        #expect(try world.dcprovision(["testca", "init", ca]).status == 0)
        try world.cards.control("reset-stats")
        let out = world.sandbox.file("derived")
        let derived = try world.dcprovision([
            "convert", "--pkcs11", try world.tokenURI(), "--layout", "piv", "--derive", "--testca", ca,
            "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", crl, "--pin-file", world.pin,
            "--out-dir", out,
        ])
        #expect(derived.status == 0, "\(derived.stderrText)")
        #expect(FileManager.default.fileExists(atPath: out + "/authentication.key.der"))
        // The PIN's tries were shown before the one VERIFY; the signature was made on the card.
        #expect(derived.stderrText.contains("PIN 3 tries left"), "\(derived.stderrText)")
        let counts = try world.cards.apduCount()
        #expect(counts.byINS["87", default: 0] >= 1, "\(counts)")
        #expect(counts.byINS["20", default: 0] >= 1, "\(counts)")
        #expect(!(derived.stdoutText + derived.stderrText).contains(VirtualCards.pin))
        // Logged out on the card itself: OpenSC's C_Logout sends nothing to a PIV card, and pcscd
        // leaves the card as it is, so the next program would otherwise find the PIN verified.
        let after = try world.dcprovision(["card", "status"])
        #expect(after.stdoutText.contains("PIN 3 tries left"), "\(after.stdoutText)")
        #expect(world.cards.apduLog().contains("0020FF80"), "no log-out was sent")
    }

    @Test(
        "A wrong PIN: the tries left shown first, never retried; the final try needs --allow-final-pin-try; a blocked card gets no VERIFY; the PUK unblocks it"
    )
    func wrongPIN() throws {
        let world = try World("piv-pin")
        let uri = try world.tokenURI()
        let wrong = try world.sandbox.directory.write("wrong", "654321\n")
        func objects(_ pinFile: String, _ extra: [String] = []) throws -> ProcessResult {
            try world.dcprovision(["objects", uri, "--login", "--pin-file", pinFile] + extra)
        }
        func verifiesWithPIN() -> Int {
            // The card's log: "TIME 00200080 lc=8 …"; a VERIFY without data (lc=0) asks for the counter only.
            world.cards.apduLog().split(separator: "\n").filter { $0.contains("00200080 lc=8") }.count
        }
        var result = try objects(wrong)
        #expect(result.status == 77, "\(result.stderrText)")
        #expect(result.stderrText.contains("PIN 3 tries left"), "\(result.stderrText)")
        #expect(result.stderrText.contains("not retried"), "\(result.stderrText)")
        #expect(verifiesWithPIN() == 1)
        result = try objects(wrong)
        #expect(result.stderrText.contains("PIN 2 tries left"), "\(result.stderrText)")
        // One try left: refused without the flag, and no PIN is sent.
        result = try objects(wrong)
        #expect(result.status == 77)
        #expect(result.stderrText.contains("final try") || result.stderrText.contains("one more wrong PIN"))
        #expect(result.stderrText.contains("--allow-final-pin-try"), "\(result.stderrText)")
        #expect(verifiesWithPIN() == 2)
        result = try objects(wrong, ["--allow-final-pin-try"])
        #expect(result.status == 77, "\(result.stderrText)")
        #expect(verifiesWithPIN() == 3)
        // Blocked: refused before any VERIFY with a PIN, even with the right one.
        result = try objects(world.pin, ["--allow-final-pin-try"])
        #expect(result.status == 77, "\(result.stderrText)")
        #expect(
            result.stderrText.contains("blocked") || result.stderrText.contains("locked"), "\(result.stderrText)")
        #expect(verifiesWithPIN() == 3)
        let status = try world.dcprovision(["card", "status"])
        #expect(status.stdoutText.contains("PIN blocked"), "\(status.stdoutText)\(status.stderrText)")

        // The operator's chores: unblock with the PUK, change the PIN; never a PIN on argv.
        let puk = try world.sandbox.directory.write("puk", VirtualCards.puk + "\n")
        let newPIN = try world.sandbox.directory.write("new-pin", "24681357\n")
        let unblocked = try world.dcprovision(["card", "unblock", "--puk-file", puk, "--new-pin-file", newPIN])
        #expect(unblocked.status == 0, "\(unblocked.stderrText)")
        #expect(try world.dcprovision(["card", "status"]).stdoutText.contains("PIN 3 tries left"))
        let changed = try world.dcprovision([
            "card", "change-pin", "--pin-file", newPIN, "--new-pin-file", world.pin,
        ])
        #expect(changed.status == 0, "\(changed.stderrText)")
        // A changed PIN is verified on the card (SP 800-73-4): change-pin ends that itself.
        let afterChange = try world.dcprovision(["card", "status"])
        #expect(afterChange.stdoutText.contains("PIN 3 tries left"), "\(afterChange.stdoutText)")
        let loggedIn = try objects(world.pin)
        #expect(loggedIn.status == 0, "\(loggedIn.stderrText)")
        let wrongPUK = try world.dcprovision(["card", "unblock", "--puk-file", wrong, "--new-pin-file", newPIN])
        #expect(wrongPUK.status == 77, "\(wrongPUK.stderrText)")
        #expect(wrongPUK.stderrText.contains("PUK"), "\(wrongPUK.stderrText)")
        #expect(wrongPUK.stderrText.contains("2 tries left"), "\(wrongPUK.stderrText)")
        let short = try world.sandbox.directory.write("short", "123\n")
        let refused = try world.dcprovision(["card", "change-pin", "--pin-file", world.pin, "--new-pin-file", short])
        #expect(refused.status == 64, "\(refused.stderrText)")
        let final = try world.dcprovision(["card", "status"])
        #expect(final.stdoutText.contains("PIN 3 tries left"), "\(final.stdoutText)\(final.stderrText)")
    }

    @Test(
        "The card pulled out during login, during a listing, and between the CA's challenge and the certification: exit 75, one line, nothing issued; put back, the next run works",
        arguments: [("login", "20", 1), ("listing", "CB", 3), ("derivation", "87", 0)])
    func removed(_ phase: String, _ instruction: String, _ skip: Int) throws {
        let world = try World("piv-removed-\(phase)")
        let uri = try world.tokenURI()
        let ca = world.sandbox.file("ca")
        #expect(try world.dcprovision(["testca", "init", ca]).status == 0)
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.sandbox.directory)
        let out = world.sandbox.file("out")
        let command: [String] =
            phase == "listing"
            ? ["objects", uri]
            : [
                "convert", "--pkcs11", uri, "--layout", "piv", "--derive", "--testca", ca, "--card-trust-anchor",
                OpenSSLFixtures.shared.ca.certificate, "--crl", crl, "--pin-file", world.pin, "--out-dir", out,
            ]
        try world.cards.control("remove-on \(instruction) \(skip)")
        let pulled = try world.dcprovision(command, timeout: 60)
        #expect(pulled.status == 75, "\(pulled.stdoutText)\(pulled.stderrText)")
        #expect(Self.lines(pulled).count == 1, "\(pulled.stderrText)")
        #expect(pulled.stderrText.contains("removed") || pulled.stderrText.contains("reset"), "\(pulled.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Nothing issued: the test CA's ledger of derived certificates is empty.
        let issued = (try? FileManager.default.contentsOfDirectory(atPath: ca + "/issued")) ?? []
        #expect(issued.isEmpty, "\(issued)")
        try world.cards.insert()
        let again = try world.dcprovision(command, timeout: 60)
        #expect(again.status == 0, "\(again.stderrText)")
    }

    @Test("Two readers, two cards with the same label: the URI's serial picks one; without it, one line asking for it")
    func twoCards() throws {
        let world = try World("piv-two", cards: 2)
        let tokens = try world.dcprovision(["tokens", "--json"])
        let listed = try jsonPayload(tokens.stdout, "tokens") as? [[String: Any]] ?? []
        let piv = listed.filter { $0["label"] as? String == VirtualCards.label }
        #expect(piv.count == 2, "\(listed)")
        let serials = Set(piv.compactMap { $0["serialNumber"] as? String })
        #expect(serials.count == 2, "\(piv)")
        let ambiguous = try world.dcprovision([
            "convert", "--pkcs11", "pkcs11:token=PIV%20Cardholder", "--layout", "piv", "--pin-file", world.pin,
            "--out-dir",
            world.sandbox.file("out"),
        ])
        #expect(ambiguous.status == 64, "\(ambiguous.stderrText)")
        #expect(ambiguous.stderrText.contains("2 tokens match"), "\(ambiguous.stderrText)")
        for token in piv {
            let uri = try #require(token["uri"] as? String)
            let objects = try world.dcprovision(["objects", uri + ";type=cert", "--json"])
            #expect(objects.status == 0, "\(objects.stderrText)")
        }
        let two = try world.dcprovision(["card", "status"])
        #expect(
            two.stdoutText.split(separator: "\n").filter { $0.contains("PIV card") }.count == 2, "\(two.stdoutText)")
        let which = try world.dcprovision(["card", "change-pin", "--pin-file", world.pin, "--new-pin-file", world.pin])
        #expect(which.status == 64, "\(which.stderrText)")
        #expect(which.stderrText.contains("--reader"), "\(which.stderrText)")
    }

    @Test("No card in any reader: tokens and card status each say so in one line")
    func noCard() throws {
        let world = try World("piv-none")
        try world.cards.remove()
        let tokens = try world.dcprovision(["tokens"])
        #expect(tokens.stderrText.contains("no card in DC Virtual Reader 00 00"), "\(tokens.stderrText)")
        let status = try world.dcprovision(["card", "status"])
        #expect(status.status == 69, "\(status.stderrText)")
        #expect(status.stdoutText.contains("no card"), "\(status.stdoutText)")
        #expect(Self.lines(status).count == 1, "\(status.stderrText)")
    }

    @Test("A card with only 9A filled: the layout takes what is there; 9E signs without a PIN through OpenSC")
    func partialCard() throws {
        let world = try World("piv-partial", slots: "9a:p256,9e:p256")
        let uri = try world.tokenURI()
        let objects = try world.dcprovision(["objects", uri + ";type=cert", "--json"])
        let ids = Set(
            (try jsonPayload(objects.stdout, "objects") as? [[String: Any]] ?? []).compactMap { $0["id"] as? String })
        #expect(ids == ["01", "04"], "\(ids)")
        // The card authentication key needs no PIN: OpenSC's pkcs15-crypt signs with it, and no
        // VERIFY carrying a PIN reaches the card. (pkcs11-tool asks for a PIN first for any signature.)
        let digest = try world.sandbox.directory.write("digest", Array(repeating: UInt8(0x5A), count: 32))
        let signature = world.sandbox.file("sig")
        let signed = try run(
            "pkcs15-crypt", ["-r", "0", "--sign", "--key", "04", "-i", digest, "-o", signature, "-f", "openssl"],
            environment: world.sandbox.environment)
        #expect(signed.status == 0, "\(signed.stderrText)")
        #expect(!world.cards.apduLog().contains("00200080 lc=8"))
        // The authentication key does need one.
        let refused = try run(
            "pkcs15-crypt", ["-r", "0", "--sign", "--key", "01", "-i", digest, "-o", signature, "-f", "openssl"],
            stdin: [], environment: world.sandbox.environment)
        #expect(refused.status != 0)
    }
    @Test(
        "A slow card (200 ms an answer): progress on a terminal, no timeout, and the derivation completes; Ctrl-C ends it at once, exit 130, the card logged out, nothing written"
    )
    func slowCard() throws {
        let world = try World("piv-slow", delayMilliseconds: 200)
        let uri = try world.tokenURI()
        let ca = world.sandbox.file("ca")
        #expect(try world.dcprovision(["testca", "init", ca]).status == 0)
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.sandbox.directory)
        func derive(_ out: String) -> [String] {
            [
                Binaries.dcprovision, "convert", "--pkcs11", uri, "--layout", "piv", "--derive", "--testca", ca,
                "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", crl, "--pin-file", world.pin,
                "--out-dir", out,
            ]
        }
        // On a terminal (script(1) gives the command one), each card step is shown as it starts.
        let shell = derive(world.sandbox.file("out")).map { "'\($0)'" }.joined(separator: " ")
        let started = ContinuousClock.now
        let onTerminal = try run(
            "script", ["-qefc", shell, "/dev/null"], environment: world.sandbox.environment, timeout: 300)
        let took = ContinuousClock.now - started
        #expect(onTerminal.status == 0, "\(onTerminal.stdoutText)")
        for step in [
            "card: logging in to PIV Cardholder", "card: reading the certificates", "card: signing the CA's challenge",
        ] {
            #expect(onTerminal.stdoutText.contains(step), "\(onTerminal.stdoutText)")
        }
        #expect(took > .seconds(2), "the delay did not apply: \(took)")

        // Ctrl-C while the slow card works: the process ends at once, the card is not left logged in.
        let out = world.sandbox.file("interrupted")
        let log = world.sandbox.file("interrupted.log")
        let arguments = derive(out)
        // The log already holds the first run's VERIFY: wait for this run's own, so the signal comes
        // after the process is inside its card work (not while it is still starting).
        func verifications() -> Int { world.cards.apduLog().components(separatedBy: "00200080 lc=8").count - 1 }
        let before = verifications()
        let child = try SpawnedProcess(
            arguments[0], Array(arguments.dropFirst()), environment: world.sandbox.environment, output: log)
        let deadline = ContinuousClock.now + .seconds(60)
        while verifications() == before && ContinuousClock.now < deadline {
            usleep(20_000)
        }
        #expect(verifications() > before, "the run never reached the card's VERIFY")
        // The card's next answers take 5 s: the run is surely inside a card call when Ctrl-C comes.
        try world.cards.control("delay 5000")
        usleep(300_000)
        child.kill(SIGINT)
        let stopped = ContinuousClock.now
        let status = child.wait(timeout: .seconds(10))
        #expect(ContinuousClock.now - stopped < .seconds(3))
        #expect(status.map { ($0 >> 8) & 0xFF } == 130, "\(String(describing: status))")
        let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(said.contains("interrupted"), "\(said)")
        #expect(!FileManager.default.fileExists(atPath: out))
        try world.cards.control("delay 0")
        let after = try world.dcprovision(["card", "status"])
        #expect(!after.stdoutText.contains("PIN verified"), "\(after.stdoutText)")
        #expect(after.stdoutText.contains("tries left"), "\(after.stdoutText)")
    }

    @Test("The card authentication key (9E) proves the card, not its holder: derivation from it is refused")
    func cardAuthenticationKey() throws {
        let world = try World("piv-9e")
        let ca = world.sandbox.file("ca")
        #expect(try world.dcprovision(["testca", "init", ca]).status == 0)
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.sandbox.directory)
        let refused = try world.dcprovision([
            "convert", "--pkcs11", try world.tokenURI(), "--tag", "authentication=04", "--derive", "--testca", ca,
            "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl", crl, "--pin-file", world.pin,
            "--out-dir", world.sandbox.file("out"),
        ])
        #expect(refused.status == 77, "\(refused.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: world.sandbox.file("out")))
    }
    @Test(
        "demo --card runs the card steps (status, tokens, derive, send) on the virtual card; with no pcscd it says what is missing, exit 69"
    )
    func demoWithCard() throws {
        let world = try World("piv-demo")
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: world.sandbox.directory)
        let demo = try world.dcprovision(
            [
                "demo", "--card", "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--pin-file", world.pin,
                "--crl", crl,
            ], timeout: 240)
        #expect(demo.status == 0, "\(demo.stdoutText)\(demo.stderrText)")
        for line in [
            "The PIV card in its reader (PC/SC)", "PIN 3 tries left", "The card through OpenSC's PIV driver",
            "A credential derived from the card", "Derived from the card",
        ] {
            #expect(demo.stdoutText.contains(line), "\(line): \(demo.stdoutText)")
        }
        #expect(!(demo.stdoutText + demo.stderrText).contains(VirtualCards.pin))

        var environment = world.sandbox.environment
        environment["PCSCLITE_CSOCK_NAME"] = world.sandbox.file("no-pcscd/pcscd.comm")
        let missing = try run(
            Binaries.dcprovision,
            ["demo", "--card", "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--pin-file", world.pin],
            environment: environment, timeout: 60)
        #expect(missing.status == 69, "\(missing.stderrText)")
        #expect(Self.lines(missing).count == 1, "\(missing.stderrText)")
        #expect(missing.stderrText.contains("pcscd is not running"), "\(missing.stderrText)")
        #expect(missing.stderrText.contains("virtual-card start"), "\(missing.stderrText)")
    }
}
