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

        /// `slots` for every card, or `cardSlots[K]` for card K (the script's default set for a
        /// card given neither).
        init(
            _ label: String, cards count: Int = 1, slots: String? = nil, cardSlots: [Int: String] = [:],
            delayMilliseconds: Int? = nil
        ) throws {
            cards = try VirtualCards(label, cards: count, delayMilliseconds: delayMilliseconds)
            for card in 1...count { try cards.provision(card: card, slots: cardSlots[card] ?? slots) }
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
        "send from a PIV card to a real managed client: without --derive one line pointing at it and nothing sent; with it, installed"
    )
    func sendFromCard() throws {
        let world = try World("piv-send")
        let directory = world.sandbox.directory
        let passphrase = try directory.write("client-passphrase", "client passphrase\n")
        func tool(_ name: String, _ arguments: [String]) throws -> ProcessResult {
            try run(
                Binaries.directory + "/" + name, arguments, environment: world.sandbox.environment,
                currentDirectory: directory.path, timeout: 120)
        }
        for (name, arguments) in [
            ("dcprovision", ["testca", "init", "ca"]),
            (
                "dcclient",
                [
                    "init", "--scheme", "org.example.dcclient", "--provider-scheme", "org.example.dcprovision",
                    "--passphrase-file", passphrase,
                ]
            ),
            ("dcclient", ["register"]),
            (
                "dcprovision",
                ["register", "--scheme", "org.example.dcprovision", "--brand", "Card Provider", "--testca", "ca"]
            ),
            ("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"]),
        ] {
            let result = try tool(name, arguments)
            try #require(result.status == 0, "\(name) \(arguments): \(result.stderrText)")
        }
        let crl = try OpenSSLFixtures.shared.crl(revoking: [], name: "card.crl", in: directory)
        let send = [
            "send", "--pkcs11", try world.tokenURI(), "--layout", "piv", "--pin-file", world.pin, "--brand",
            "Card Provider",
            "--callback-scheme", "org.example.dcprovision", "--client-scheme", "org.example.dcclient",
        ]
        let refused = try tool("dcprovision", send)
        #expect(refused.status == 65, "\(refused.stderrText)")
        #expect(Self.lines(refused).count == 1 && refused.stderrText.contains("--derive"), "\(refused.stderrText)")
        let nothing = try tool("dcclient", ["list"])
        #expect(!nothing.stdoutText.contains("authentication"), "\(nothing.stdoutText)")

        let sent = try tool(
            "dcprovision",
            send + [
                "--derive", "--testca", "ca", "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--crl",
                crl,
            ])
        #expect(sent.status == 0, "\(sent.stderrText)")
        let installed = try tool("dcclient", ["list"])
        // The card's cardholder on the new certificates; the keys are new (none left the card).
        #expect(installed.stdoutText.contains("authentication  EC P-256  CN=PIV Cardholder"), "\(installed.stdoutText)")
        #expect(!(sent.stdoutText + sent.stderrText + installed.stdoutText).contains(VirtualCards.pin))
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
        // A new PUK: the old one unblocks no more, the new one does (its counter is back at 3 after
        // the right PUK).
        let oldPUK = puk
        let newPUK = try world.sandbox.directory.write("new-puk", "87654321\n")
        let pukChanged = try world.dcprovision(["card", "change-puk", "--puk-file", oldPUK, "--new-puk-file", newPUK])
        #expect(pukChanged.status == 0, "\(pukChanged.stderrText)")
        let oldRefused = try world.dcprovision(["card", "unblock", "--puk-file", oldPUK, "--new-pin-file", world.pin])
        #expect(oldRefused.status == 77, "\(oldRefused.stderrText)")
        let newWorks = try world.dcprovision(["card", "unblock", "--puk-file", newPUK, "--new-pin-file", world.pin])
        #expect(newWorks.status == 0, "\(newWorks.stderrText)")
        #expect(!world.cards.apduLog().contains("87654321"))
        let short = try world.sandbox.directory.write("short", "123\n")
        let refused = try world.dcprovision(["card", "change-pin", "--pin-file", world.pin, "--new-pin-file", short])
        #expect(refused.status == 64, "\(refused.stderrText)")
        let final = try world.dcprovision(["card", "status"])
        #expect(final.stdoutText.contains("PIN 3 tries left"), "\(final.stdoutText)\(final.stderrText)")
    }

    @Test(
        "The card pulled out during login, during a listing, and between the CA's challenge and the certification: exit 75, one line, nothing issued; put back, the next run works",
        arguments: [
            ("login, reading the PIN's counter", "20 1"), ("login, the VERIFY that carries the PIN", "20 0 lc=8"),
            ("listing", "CB 3"), ("derivation", "87 0"),
        ])
    func removed(_ phase: String, _ removeOn: String) throws {
        let world = try World("piv-removed-\(phase.prefix(while: { $0.isLetter }))")
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
        try world.cards.control("remove-on \(removeOn)")
        let pulled = try world.dcprovision(command, timeout: 60)
        #expect(world.cards.apduLog().contains("removed"), "the card was not pulled out at \(removeOn)")
        #expect(pulled.status == 75, "\(pulled.stdoutText)\(pulled.stderrText)")
        #expect(Self.lines(pulled).count == 1, "\(pulled.stderrText)")
        #expect(pulled.stderrText.contains("removed") || pulled.stderrText.contains("reset"), "\(pulled.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Nothing issued: the test CA's ledger of derived certificates is empty.
        let issued = (try? FileManager.default.contentsOfDirectory(atPath: ca + "/issued")) ?? []
        #expect(issued.isEmpty, "\(issued)")
        try world.cards.insert()
        // A PIN the card never answered was not counted, and is not tried again by us: the tries
        // left are the card's three.
        let status = try world.dcprovision(["card", "status"])
        #expect(status.stdoutText.contains("PIN 3 tries left"), "\(status.stdoutText)\(status.stderrText)")
        let again = try world.dcprovision(command, timeout: 60)
        #expect(again.status == 0, "\(again.stderrText)")
    }

    @Test(
        "Two readers, two cards with the same label: the URI's serial or slot-id picks the right one, --reader the right reader; without them, one line asking"
    )
    func twoCards() throws {
        // The cards differ where the oracle can see it: card 1's 9A is EC P-256, card 2's RSA 2048.
        let world = try World("piv-two", cards: 2, cardSlots: [1: "9a:p256,9c:p384", 2: "9a:rsa2048,9c:p256"])
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
        // Which card a token is, by OpenSC's own account: the type of its 9A key (pkcs11-tool on
        // the slot the listing names). Then our listing through each URI, by serial and by slot-id,
        // must show that card's key.
        func authenticationKeyType(_ objects: ProcessResult) throws -> String? {
            let listed = try jsonPayload(objects.stdout, "objects") as? [[String: Any]] ?? []
            return listed.first { $0["id"] as? String == "01" && $0["kind"] as? String == "public-key" }?["keyType"]
                as? String
        }
        var typeBySlot: [Int: String] = [:]
        for token in piv {
            let uri = try #require(token["uri"] as? String)
            let slot = try #require(token["slot"] as? Int)
            let oracle = try world.pkcs11Tool([
                "--slot", String(slot), "--list-objects", "--type", "pubkey", "--id", "01",
            ])
            #expect(oracle.status == 0, "\(oracle.stderrText)")
            let expected = try #require(
                ["RSA", "EC"].first { oracle.stdoutText.contains("Public Key Object; \($0)") }, "\(oracle.stdoutText)")
            typeBySlot[slot] = expected
            let bySerial = try world.dcprovision(["objects", uri + ";type=public", "--json"])
            #expect(bySerial.status == 0, "\(bySerial.stderrText)")
            #expect(try authenticationKeyType(bySerial) == expected, "\(uri): \(bySerial.stdoutText)")
            let bySlot = try world.dcprovision([
                "objects", "pkcs11:token=PIV%20Cardholder;slot-id=\(slot);type=public", "--json",
            ])
            #expect(bySlot.status == 0, "\(bySlot.stderrText)")
            #expect(try authenticationKeyType(bySlot) == expected, "slot-id=\(slot): \(bySlot.stdoutText)")
        }
        #expect(Set(typeBySlot.values) == ["RSA", "EC"], "\(typeBySlot)")

        let two = try world.dcprovision(["card", "status"])
        #expect(
            two.stdoutText.split(separator: "\n").filter { $0.contains("PIV card") }.count == 2, "\(two.stdoutText)")
        let which = try world.dcprovision(["card", "change-pin", "--pin-file", world.pin, "--new-pin-file", world.pin])
        #expect(which.status == 64, "\(which.stderrText)")
        #expect(which.stderrText.contains("--reader"), "\(which.stderrText)")
        // --reader picks the second reader's card, and only that card hears the command.
        let reader = "DC Virtual Reader 00 01"
        let one = try world.dcprovision(["card", "status", "--reader", reader])
        #expect(one.status == 0, "\(one.stderrText)")
        #expect(
            one.stdoutText.split(separator: "\n").count == 1 && one.stdoutText.contains(reader), "\(one.stdoutText)")
        let newPIN = try world.sandbox.directory.write("new-pin", "24681357\n")
        let changed = try world.dcprovision([
            "card", "change-pin", "--reader", reader, "--pin-file", world.pin, "--new-pin-file", newPIN,
        ])
        #expect(changed.status == 0, "\(changed.stderrText)")
        #expect(world.cards.apduLog(card: 2).contains("00240080"), "card 2 was not asked to change its PIN")
        #expect(!world.cards.apduLog(card: 1).contains("00240080"), "card 1 was asked to change its PIN")
        // Card 2 now takes the new PIN and card 1 still the old one, as OpenSC sees them.
        let slots = typeBySlot.keys.sorted()
        for (slot, pin) in [(slots[0], VirtualCards.pin), (slots[1], "24681357")] {
            let login = try world.pkcs11Tool(["--slot", String(slot), "--login", "--pin", pin, "--list-objects"])
            #expect(login.status == 0, "slot \(slot): \(login.stderrText)")
        }
    }

    @Test(
        "The card's keys work as OpenSC drives them: P-384 and RSA 2048 signatures, RSA decipher, ECDH; openssl checks each with the card's certificate"
    )
    func keyOperations() throws {
        // Card 1: the default set (9A P-256, 9C P-384, 9D RSA 2048, 82 P-256); its 9A made RSA 2048 on
        // card 2, so an RSA signature is checked too.
        let world = try World("piv-keys", cards: 2, cardSlots: [2: "9a:rsa2048"])
        let tokens = try jsonPayload(try world.dcprovision(["tokens", "--json"]).stdout, "tokens") as? [[String: Any]]
        let slots = try #require(
            tokens?.filter { $0["label"] as? String == VirtualCards.label }.compactMap { $0["slot"] as? Int })
        #expect(slots.count == 2)
        for card in 1...2 { try world.cards.control("reset-stats", card: card) }
        let directory = world.sandbox.directory
        let data = try directory.write("data", Array("derived credentials".utf8))
        func publicKey(card: Int, slot: String) throws -> String {
            let certificate = world.cards.directory.file("card-\(card).\(slot).pem")
            let key = directory.file("card-\(card)-\(slot).pub.pem")
            let extracted = try run("openssl", ["x509", "-in", certificate, "-noout", "-pubkey", "-out", key])
            #expect(extracted.status == 0, "\(extracted.stderrText)")
            return key
        }
        // The slot id of card K's reader, as pkcs11-tool lists it: "Slot 1 (0x4): DC Virtual Reader 00 01".
        func slot(card: Int) throws -> String {
            let listed = try world.pkcs11Tool(["--list-slots"])
            let line = try #require(
                listed.stdoutText.split(separator: "\n").first { $0.contains("DC Virtual Reader 00 0\(card - 1)") },
                "\(listed.stdoutText)")
            let id = try #require(line.split(separator: "(").dropFirst().first?.split(separator: ")").first)
            return String(id)
        }
        func tool(card: Int, _ arguments: [String]) throws -> ProcessResult {
            let result = try world.pkcs11Tool(
                ["--slot", try slot(card: card), "--login", "--pin", VirtualCards.pin] + arguments)
            #expect(result.status == 0, "\(arguments): \(result.stderrText)")
            return result
        }

        // P-384 (9C, PIN Always: pkcs11-tool logs in again for the one use).
        let p384 = directory.file("p384.sig")
        try tool(
            card: 1,
            ["--sign", "--id", "02", "-m", "ECDSA-SHA384", "--signature-format", "openssl", "-i", data, "-o", p384])
        let p384Checked = try run(
            "openssl", ["dgst", "-sha384", "-verify", try publicKey(card: 1, slot: "9c"), "-signature", p384, data])
        #expect(p384Checked.stdoutText.contains("Verified OK"), "\(p384Checked.stdoutText)\(p384Checked.stderrText)")

        // RSA 2048 (card 2's 9A), PKCS#1 v1.5 over SHA-256.
        let rsa = directory.file("rsa.sig")
        try tool(card: 2, ["--sign", "--id", "01", "-m", "SHA256-RSA-PKCS", "-i", data, "-o", rsa])
        let rsaChecked = try run(
            "openssl", ["dgst", "-sha256", "-verify", try publicKey(card: 2, slot: "9a"), "-signature", rsa, data])
        #expect(rsaChecked.stdoutText.contains("Verified OK"), "\(rsaChecked.stdoutText)\(rsaChecked.stderrText)")

        // RSA decipher (9D): openssl encrypts to the certificate, the card opens it.
        let sealed = directory.file("sealed")
        let encrypted = try run(
            "openssl",
            [
                "pkeyutl", "-encrypt", "-pubin", "-inkey", try publicKey(card: 1, slot: "9d"), "-in", data, "-out",
                sealed,
            ])
        #expect(encrypted.status == 0, "\(encrypted.stderrText)")
        let opened = directory.file("opened")
        try tool(card: 1, ["--decrypt", "--id", "03", "-m", "RSA-PKCS", "-i", sealed, "-o", opened])
        #expect(FileManager.default.contents(atPath: opened) == FileManager.default.contents(atPath: data))

        // ECDH (retired 82, P-256, id 05): the card's shared secret with a key of openssl's is the
        // one openssl computes with the card's certificate.
        let peer = directory.file("peer.key")
        let peerPublic = directory.file("peer.pub.der")
        #expect(
            try run("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", peer])
                .status == 0)
        #expect(
            try run("openssl", ["pkey", "-in", peer, "-pubout", "-outform", "DER", "-out", peerPublic]).status == 0)
        let cardSecret = directory.file("card.secret")
        try tool(card: 1, ["--derive", "--id", "05", "-m", "ECDH1-DERIVE", "-i", peerPublic, "-o", cardSecret])
        let opensslSecret = directory.file("openssl.secret")
        let derived = try run(
            "openssl",
            [
                "pkeyutl", "-derive", "-inkey", peer, "-peerkey", try publicKey(card: 1, slot: "82"), "-out",
                opensslSecret,
            ])
        #expect(derived.status == 0, "\(derived.stderrText)")
        let secret = FileManager.default.contents(atPath: cardSecret)
        #expect(secret?.count == 32 && secret == FileManager.default.contents(atPath: opensslSecret))
        // Every operation went through GENERAL AUTHENTICATE on the cards.
        #expect(try world.cards.apduCount(card: 1).byINS["87", default: 0] >= 3)
        #expect(try world.cards.apduCount(card: 2).byINS["87", default: 0] >= 1)
    }

    @Test("No card in any reader: tokens and card status each say so in one line")
    func noCard() throws {
        let world = try World("piv-none")
        try world.cards.remove()
        let tokens = try world.dcprovision(["tokens"])
        #expect(tokens.stderrText.contains("no card in DC Virtual Reader 00 00"), "\(tokens.stderrText)")
        #expect(Self.lines(tokens).count == 1, "\(tokens.stderrText)")
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
        "A slow card (200 ms an answer): progress on one line on a terminal, none in a pipe, no timeout, and the derivation completes; Ctrl-C ends it at once, exit 130, the card logged out, nothing written"
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
        // On a terminal (script(1) gives the command one), each card step is shown as it starts, on
        // one line redrawn in place (a carriage return before each, never a line of its own).
        let shell = derive(world.sandbox.file("out")).map { "'\($0)'" }.joined(separator: " ")
        let started = ContinuousClock.now
        let onTerminal = try run(
            "script", ["-qefc", shell, "/dev/null"], environment: world.sandbox.environment, timeout: 300)
        let took = ContinuousClock.now - started
        #expect(onTerminal.status == 0, "\(onTerminal.stdoutText)")
        for step in ["logging in to PIV Cardholder", "reading the certificates", "signing the CA's challenge"] {
            #expect(
                onTerminal.stdoutText.contains("\rdcprovision: \(step)"), "\(onTerminal.stdoutText.debugDescription)")
            #expect(!onTerminal.stdoutText.contains("\(step)…\r\n"), "\(onTerminal.stdoutText.debugDescription)")
        }
        #expect(took > .seconds(2), "the delay did not apply: \(took)")
        // The card's notice (its PIN tries left) comes on a line of its own: the progress line is
        // cleared before it, not written over.
        #expect(onTerminal.stdoutText.contains("\rcard: PIV Cardholder"), "\(onTerminal.stdoutText.debugDescription)")
        // The same derivation with --quiet on a terminal, and piped: no progress at all.
        let quietShell = (derive(world.sandbox.file("quiet")) + ["--quiet"]).map { "'\($0)'" }.joined(separator: " ")
        let quiet = try run(
            "script", ["-qefc", quietShell, "/dev/null"], environment: world.sandbox.environment, timeout: 300)
        #expect(quiet.status == 0, "\(quiet.stdoutText)")
        #expect(!quiet.stdoutText.contains("logging in"), "\(quiet.stdoutText.debugDescription)")
        let pipedRun = derive(world.sandbox.file("piped"))
        let piped = try run(
            pipedRun[0], Array(pipedRun.dropFirst()), environment: world.sandbox.environment, timeout: 300)
        #expect(piped.status == 0, "\(piped.stderrText)")
        #expect(
            !piped.stderrText.contains("logging in") && !piped.stderrText.contains("signing"), "\(piped.stderrText)")
        // Listing the slow reader's token: the slot being read, on a terminal only.
        let listing = try run(
            "script", ["-qefc", "'\(Binaries.dcprovision)' tokens", "/dev/null"],
            environment: world.sandbox.environment,
            timeout: 300)
        #expect(listing.status == 0, "\(listing.stdoutText)")
        #expect(listing.stdoutText.contains("\rdcprovision: "), "\(listing.stdoutText.debugDescription)")
        #expect(listing.stdoutText.contains(VirtualCards.label))
        let listed = try world.dcprovision(["tokens"], timeout: 300)
        #expect(listed.status == 0, "\(listed.stderrText)")
        #expect(!listed.stderrText.contains("reading the token") && !listed.stderrText.contains("\r"))
        // The PIN asked on the terminal while the line is drawn: the line is cleared first, so the
        // question starts a clean line, and nothing is drawn over it until the answer comes. The
        // PIN is typed (into script's terminal) only once the question is there.
        var prompting = derive(world.sandbox.file("prompted"))
        let pinFlag = try #require(prompting.firstIndex(of: "--pin-file"))
        prompting.replaceSubrange(pinFlag...(pinFlag + 1), with: ["--pin-prompt"])
        let transcript = world.sandbox.file("prompted.typescript")
        let typist =
            "{ until grep -q 'PIN for' '\(transcript)' 2>/dev/null; do sleep 0.2; done; cat '\(world.pin)'; }"
        let prompted = try run(
            "bash",
            [
                "-c",
                "\(typist) | script -qefc \"\(prompting.map { "'\($0)'" }.joined(separator: " "))\" '\(transcript)'",
            ],
            environment: world.sandbox.environment, timeout: 300)
        #expect(prompted.status == 0, "\(prompted.stdoutText)")
        let screen = try readText(transcript)
        let question = try #require(screen.range(of: "PIN for"), "\(screen.debugDescription)")
        let opening = screen[..<question.lowerBound]
        #expect(opening.contains("\rdcprovision: "), "no progress before the prompt: \(screen.debugDescription)")
        let lineStart = opening.lastIndex { $0 == "\r" || $0 == "\n" || $0 == "\r\n" }.map { opening.index(after: $0) }
        #expect(opening[(lineStart ?? opening.startIndex)...].isEmpty, "\(screen.debugDescription)")
        let answered = screen[question.upperBound...].prefix { $0 != "\n" && $0 != "\r\n" }
        #expect(!answered.contains("dcprovision:"), "\(screen.debugDescription)")
        #expect(FileManager.default.fileExists(atPath: world.sandbox.file("prompted")))

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
            "convert", "--pkcs11", try world.tokenURI(), "--object", "authentication=04", "--derive", "--testca", ca,
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

        // pcscd running, its readers empty (vpcd always gives two): one line, naming what is missing.
        try world.cards.remove()
        let empty = try world.dcprovision(
            ["demo", "--card", "--card-trust-anchor", OpenSSLFixtures.shared.ca.certificate, "--pin-file", world.pin],
            timeout: 60)
        #expect(empty.status == 69, "\(empty.stderrText)")
        #expect(Self.lines(empty).count == 1, "\(empty.stderrText)")
        #expect(empty.stderrText.contains("needs a PIV card: none in the 2 reader(s)"), "\(empty.stderrText)")
    }
}
