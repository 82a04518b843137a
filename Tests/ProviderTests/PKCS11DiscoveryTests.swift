import CredentialCoding
import DerivedCredentials
import Foundation
import PKCS11Provider
import TestSupport
import Testing

private let hsm = SoftHSM.shared

/// SoftHSM reads SOFTHSM2_CONF once, when the module is first initialised in this process; every
/// test touches the fixture before anything loads the module.
private func prepared() -> SoftHSM { hsm }

@Suite("PKCS#11 discovery through p11-kit (SoftHSM2 as the card)", .ownThreads, .softHSM, .timeLimit(.minutes(5)))
struct PKCS11DiscoveryTests {
    /// Swift Testing makes a suite value per test: every test here prepares the SoftHSM fixture
    /// (and SOFTHSM2_CONF) before it can load the module, whatever runs first in the process.
    init() { _ = SoftHSM.shared }

    @Test(
        "Tokens: by p11-kit name and by absolute path, with PIN flags and a URI p11-kit (through p11tool) parses back")
    func tokens() throws {
        _ = prepared()
        for module in ["softhsm2", SoftHSM.module] {
            let tokens = try PKCS11Discovery.tokens(modules: [module])
            let card = try #require(tokens.first { $0.label == hsm.pivCard })
            #expect(card.manufacturer == "SoftHSM project")
            #expect(card.model == "SoftHSM v2")
            #expect(card.initialized && card.loginRequired)
            #expect(!card.protectedAuthenticationPath && !card.userPINLocked && !card.userPINFinalTry)
            #expect(card.uri.hasPrefix("pkcs11:") && card.uri.contains("token=PIV%20Card"))
            #expect(tokens.contains { !$0.initialized })  // SoftHSM's free slot
        }
        // p11-kit parses the URI back: p11tool (whose URIs are p11-kit's), handed the URI we report,
        // finds exactly the card's certificates, and lists the card under the same URI.
        let card = try #require(try PKCS11Discovery.tokens(modules: ["softhsm2"]).first { $0.label == hsm.pivCard })
        let sandbox = try Sandbox("p11tool")
        defer { sandbox.remove() }
        let listed = try SoftHSM.p11tool(["--list-all-certs", card.uri], in: sandbox)
        try #require(listed.status == 0, "p11tool --list-all-certs \(card.uri): \(listed.stderrText)")
        let certificates = SoftHSM.parseP11ToolListing(listed.stdoutText)
        #expect(certificates.compactMap { $0.fields["ID"] }.sorted() == hsm.pivPairs.map(\.id).sorted())
        #expect(certificates.allSatisfy { SoftHSM.uriAttributes(card.uri).isSubset(of: SoftHSM.uriAttributes($0.url)) })
        let tokenURLs = try SoftHSM.p11tool(["--list-token-urls"], in: sandbox).stdoutText.split(separator: "\n")
        #expect(tokenURLs.map { SoftHSM.uriAttributes(String($0)) }.contains(SoftHSM.uriAttributes(card.uri)))
        // The URI is read, not ignored: with its serial changed, p11tool finds nothing.
        let otherSerial = card.uri.replacingOccurrences(of: "serial=", with: "serial=0")
        try #require(otherSerial != card.uri)
        #expect(try SoftHSM.p11tool(["--list-all-certs", otherSerial], in: sandbox).stdoutText.isEmpty)
        #expect(throws: DCError.self) { try PKCS11Discovery.tokens(modules: ["no-such-module"]) }
    }

    @Test("Objects: the PIV certificates by URI, without logging in, as pkcs11-tool lists them")
    func objects() throws {
        _ = prepared()
        let certificates = try PKCS11Discovery.certificates(
            matching: "pkcs11:token=PIV%20Card;type=cert", modules: ["softhsm2"])
        #expect(certificates.map(\.object.id).sorted() == ["01", "02", "03", "05"])
        for (id, label, pair) in hsm.pivPairs {
            let found = try #require(certificates.first { $0.object.id == id })
            #expect(found.object.label == label)
            #expect(found.certificate.derBytes == (try HostileInput.der(of: pair.certificate)))
            #expect(found.object.uri.contains("id=%\(id)"))
        }
        // The independent tool sees the same certificates: the same ids with the same labels.
        let listing = try SoftHSM.pkcs11Tool(["--token-label", hsm.pivCard, "--list-objects", "--type", "cert"])
            .stdoutText
        #expect(
            Self.pkcs11ToolObjects(listing)
                == certificates.map { [$0.object.id, $0.object.label] }.sorted { $0[0] < $1[0] },
            "\(listing)")
        // By id: the certificate. Whether the private key with that id shows too depends on whether
        // this process is logged in to the token: PKCS#11 keeps login state per application, not per
        // session, and other tests in this process log in to the same card concurrently. The claim
        // that a listing without a login shows no private key is held in a process of its own, by
        // the `dcprovision objects` test in TokenCommandTests.
        let byID = try PKCS11Discovery.objects(matching: "pkcs11:token=PIV%20Card;id=%02", modules: ["softhsm2"])
        let certificate = try #require(byID.first { $0.kind == "certificate" })
        #expect(byID.allSatisfy { $0.id == "02" })
        #expect(certificate.keyType == "EC" && certificate.keyBits == 384)
        // The URI an object reports selects exactly that object.
        let again = try PKCS11Discovery.objects(matching: certificate.uri, modules: ["softhsm2"])
        #expect(again == [certificate])
        #expect(try PKCS11Discovery.objects(matching: "pkcs11:token=No%20Such%20Card", modules: ["softhsm2"]).isEmpty)
    }

    /// (ID, label) of each object in `pkcs11-tool --list-objects` output, sorted by ID.
    static func pkcs11ToolObjects(_ listing: String) -> [[String]] {
        var objects: [[String: String]] = []
        for line in listing.split(separator: "\n") {
            if !line.hasPrefix(" ") {
                objects.append([:])
                continue
            }
            guard !objects.isEmpty, let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon].trimmingCharacters(in: .whitespaces)
            objects[objects.count - 1][key] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return objects.compactMap { object in object["ID"].map { [$0, object["label"] ?? ""] } }.sorted {
            $0[0] < $1[0]
        }
    }

    @Test(
        "Bad URIs are usage errors; a URI with a PIN is refused; RFC 7512's grammar is held (characters, path and query, duplicates, vendor path attributes)",
        arguments: [
            "pkcs11:token=PIV%20Card;pin-value=123456", "pkcs11:token=PIV%20Card?pin-source=file:/tmp/pin",
            "https://example.com", "pkcs11:id=%zz", "pkcs11:colour=blue", "pkcs11:token=PIV Card",
            "pkcs11:token=PIV%20Card;token=Other", "pkcs11:?module-name=softhsm2&module-name=opensc-pkcs11",
            "pkcs11:module-path=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so", "pkcs11:?token=PIV%20Card",
            "pkcs11:slot-id=abc", "pkcs11:slot-id=", "pkcs11:library-version=2.x", "pkcs11:token",
            "pkcs11:x-vendor=1", "pkcs11:;token=PIV%20Card", "pkcs11:token=PIV%2", "pkcs11:object=a\nb",
        ])
    func badURIs(uri: String) {
        _ = prepared()
        #expect(throws: DCError.self) { try PKCS11Discovery.objects(matching: uri, modules: ["softhsm2"]) }
    }

    /// The certificates our discovery finds for `uri`, as sets of URI path attributes.
    static func ours(_ uri: String, modules: [String]? = ["softhsm2"]) throws -> Set<Set<String>> {
        Set(
            try PKCS11Discovery.certificates(matching: uri, modules: modules).map {
                SoftHSM.uriAttributes($0.object.uri)
            })
    }

    /// The certificates p11tool lists for `uri`, as sets of URI path attributes.
    static func p11tools(_ uri: String, in sandbox: Sandbox) throws -> Set<Set<String>> {
        let listed = try SoftHSM.p11tool(["--list-all-certs", uri], in: sandbox)
        // p11tool exits 2 when nothing matches.
        if listed.status == 2 && listed.stderrText.hasPrefix("No matching objects found") { return [] }
        try #require(listed.status == 0, "p11tool --list-all-certs \(uri): \(listed.stderrText)")
        return Set(SoftHSM.parseP11ToolListing(listed.stdoutText).map { SoftHSM.uriAttributes($0.url) })
    }

    @Test(
        "A URI without a token part searches every token; library- attributes, percent-encoding and vendor query attributes as p11tool reads them"
    )
    func withoutTokenPart() throws {
        _ = prepared()
        let sandbox = try Sandbox("p11tool-uris")
        defer { sandbox.remove() }
        let every = try Self.ours("pkcs11:type=cert")
        // PIV Card and Export Card hold certificates (the PIN card holds none).
        #expect(every.count == 9)
        for uri in [
            "pkcs11:", "pkcs11:type=cert", "pkcs11:library-manufacturer=SoftHSM", "pkcs11:library-version=2",
            "pkcs11:library-manufacturer=Nobody", "pkcs11:library-version=1.0",
            "pkcs11:library-description=Implementation%20of%20PKCS11;type=cert",
            "pkcs11:token=%50%49%56%20%43%61%72%64",
            "pkcs11:token=PIV%20Card;object=Certificate%20for%20PIV%20Authentication",
        ] {
            #expect(try Self.ours(uri) == (try Self.p11tools(uri, in: sandbox)), "\(uri)")
        }
        #expect(try Self.ours("pkcs11:library-manufacturer=Nobody").isEmpty)
        #expect(try Self.ours("pkcs11:library-manufacturer=SoftHSM") == every)
        // Vendor query attributes are ignored (RFC 7512 section 2.4), and may repeat.
        #expect(
            try Self.ours("pkcs11:token=PIV%20Card?x-vendor=1&x-vendor=2") == (try Self.ours("pkcs11:token=PIV%20Card"))
        )
    }

    @Test("slot-id, slot-description and slot-manufacturer select the slot, as pkcs11-tool --slot reads them")
    func slotAttributes() throws {
        _ = prepared()
        let module = try PKCS11Discovery.tokens(modules: ["softhsm2"]).filter(\.initialized)
        #expect(module.count == 3)
        for token in module {
            let listing = try SoftHSM.pkcs11Tool(["--slot", String(token.slot), "--list-objects", "--type", "cert"])
            let theirs = Self.pkcs11ToolObjects(listing.stdoutText)
            let bySlot = try PKCS11Discovery.certificates(
                matching: "pkcs11:slot-id=\(token.slot)", modules: ["softhsm2"])
            #expect(
                bySlot.map { [$0.object.id, $0.object.label] }.sorted { $0[0] < $1[0] } == theirs, "\(token.label)")
            #expect(bySlot.allSatisfy { $0.object.uri.contains("serial=\(token.serialNumber)") })
            // SoftHSM describes each slot by its id in hex.
            let description = "SoftHSM%20slot%20ID%200x" + String(token.slot, radix: 16)
            #expect(
                try Self.ours("pkcs11:slot-description=\(description)")
                    == Set(bySlot.map { SoftHSM.uriAttributes($0.object.uri) }))
        }
        #expect(try Self.ours("pkcs11:slot-manufacturer=SoftHSM%20project") == (try Self.ours("pkcs11:")))
        #expect(try Self.ours("pkcs11:slot-manufacturer=Nobody").isEmpty)
        #expect(try Self.ours("pkcs11:slot-id=\(UInt32.max)").isEmpty)
    }

    @Test("module-name and module-path (query attributes) name the module; given modules are narrowed to it")
    func moduleAttributes() throws {
        _ = prepared()
        let piv = try Self.ours("pkcs11:token=PIV%20Card")
        #expect(piv.count == 4)
        #expect(try Self.ours("pkcs11:token=PIV%20Card?module-path=\(SoftHSM.module)", modules: nil) == piv)
        #expect(try Self.ours("pkcs11:token=PIV%20Card?module-name=softhsm2", modules: nil) == piv)
        #expect(try Self.ours("pkcs11:token=PIV%20Card?module-name=softhsm2", modules: ["softhsm2"]) == piv)
        #expect(try Self.ours("pkcs11:token=PIV%20Card?module-name=opensc-pkcs11", modules: ["softhsm2"]).isEmpty)
        #expect(throws: DCError.self) { try Self.ours("pkcs11:?module-name=no-such-module", modules: nil) }
    }
}
