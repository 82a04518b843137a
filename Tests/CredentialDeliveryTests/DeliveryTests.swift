import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

private let request = "0123456789abcdef0123456789abcdef"
private let digest = String(repeating: "ab", count: 32)

private let issued: (ca: TestCA, credential: Credential, dir: TemporaryDirectory) = {
    let dir = try! TemporaryDirectory("delivery")
    let ca = try! TestCA.initialize(at: dir.file("ca"))
    return (ca, try! ca.issue(TestCAIssueRequest(escrowHistory: 2)).credential(), dir)
}()

@Suite("Delivery URLs")
struct DeliveryURLTests {
    @Test("The three messages round-trip, and carry no secret")
    func roundTrip() throws {
        let messages: [DeliveryMessage] = [
            .new(client: "dcclient", request: request),
            .deliver(client: "dcclient", request: request, digest: digest),
            .result(request: request, status: "ok", mac: digest),
        ]
        for message in messages {
            let url = message.url(scheme: "org.example.dc")
            #expect(try DeliveryMessage.parse(url, scheme: "org.example.dc") == message)
        }
        #expect(
            DeliveryMessage.new(client: "c", request: request).url(scheme: "x.y")
                == "x.y:/new?v=1&client=c&request=\(request)")
    }

    @Test(
        "Hostile URLs are refused",
        arguments: [
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)&extra=1",
            "org.example.dc:/deliver?v=1&client=dcclient&client=evil&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=dc client&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=$(reboot)&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=--help&request=\(request)&digest=\(digest)",
            "--help",
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)#frag",
            "org.example.dc://host/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=2&client=dcclient&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request.uppercased())&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request)",
            "org.example.dc:/../deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)",
            "other.scheme:/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)",
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)&pad="
                + String(repeating: "a", count: 200_000),
            "org.example.dc:/new?v=1&client=d%63client&request=\(request)",
            "org.example.dc:/deliver?v=1&client=dcclient&request=\(request)&digest=\(digest)\u{0}",
        ])
    func hostile(url: String) {
        #expect(throws: DCError.self) { try DeliveryMessage.parse(url, scheme: "org.example.dc") }
    }
}

@Suite("Delivery URL forms (docs/PROTOCOL.md: scheme:/path, no authority)")
struct DeliveryURLFormTests {
    static let query = "?v=1&client=dcclient&request=\(request)"

    @Test("scheme:/new is the one accepted form")
    func accepted() throws {
        #expect(
            try DeliveryMessage.parse("org.example.dc:/new" + Self.query, scheme: "org.example.dc")
                == .new(client: "dcclient", request: request))
    }

    @Test(
        "An authority (even an empty one) or a rootless path is refused",
        arguments: ["org.example.dc://host/new", "org.example.dc:///new", "org.example.dc:new", "org.example.dc://new"])
    func refused(prefix: String) throws {
        let error = try #require(throws: DCError.self) {
            try DeliveryMessage.parse(prefix + Self.query, scheme: "org.example.dc")
        }
        #expect(error.code == .invalid)
        #expect(error.description.contains("refused URL"))
    }
}

@Suite("Delivery payload and spool")
struct DeliveryPayloadTests {
    private func payload() throws -> DeliveryPayload {
        DeliveryPayload(
            requestId: request, clientId: "dcclient", issuedAt: Date(), resultKey: try Digests.random(32),
            credential: issued.credential)
    }

    @Test("Canonical: decode then encode gives the same bytes; every entry and the history survive")
    func canonical() throws {
        let original = try payload()
        let encoded = try original.encode()
        let decoded = try DeliveryPayload.decode(encoded)
        #expect(try decoded.encode() == encoded)
        #expect(decoded.credential == original.credential)
        #expect(decoded.credential[.escrow]?.keyHistory.count == 2)
        #expect(decoded.resultKey == original.resultKey)
    }

    @Test("Sealed through the spool to the client's certificate and opened again")
    func sealedThroughSpool() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let clientKey = try KeyGeneration.generate(.p256)
        let clientCertificate = try CertificateSigner(selfSigningWith: clientKey).issue(
            CertificateProfile(
                subject: DistinguishedName([.init("CN", "dcclient")]), notBefore: Date(),
                notAfter: Date().addingTimeInterval(86400),
                keyUsage: KeyUsage.keyAgreement), for: clientKey)
        let spool = Spool(directory: dir.file("spool"))
        let original = try payload()
        let written = try spool.write(try Sealing.seal(try original.encode(), to: clientCertificate), request: request)
        var info = stat()
        stat(spool.path(request: request), &info)
        #expect(info.st_mode & 0o777 == 0o600)
        stat(spool.directory, &info)
        #expect(info.st_mode & 0o777 == 0o700)
        let opened = try DeliveryPayload.decode(
            try Sealing.open(
                try spool.read(request: request, digest: written), with: clientKey, certificate: clientCertificate))
        #expect(opened.credential == original.credential)
        #expect(throws: DCError.self) { try spool.read(request: request, digest: digest) }  // wrong digest
        spool.remove(request: request)
        #expect(throws: DCError.self) { try spool.read(request: request, digest: written) }  // gone: replay
    }

    @Test("A spool file that is a symlink, another user's, world-readable or oversized is refused")
    func hostileSpoolFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let spool = Spool(directory: dir.path)
        let sealed: [UInt8] = Array(repeating: 7, count: 100)
        let good = Digests.hex(Digests.sha256(sealed))
        func check(_ name: String, _ prepare: (String) throws -> Void, _ expected: DCError.Code) throws {
            let id = String(repeating: name, count: 32)
            try prepare(spool.path(request: id))
            do {
                _ = try spool.read(request: id, digest: good)
                Issue.record("\(name): accepted")
            } catch let error as DCError {
                #expect(error.code == expected, "\(name): \(error)")
            }
        }
        let target = try dir.write("target", sealed)
        chmod(target, 0o600)
        try check("a", { symlink(target, $0) }, .invalid)
        try check(
            "b",
            { path in
                _ = try dir.write((path as NSString).lastPathComponent, sealed)
                chmod(path, 0o644)
            }, .invalid)
        try check(
            "c",
            { path in
                _ = try dir.write((path as NSString).lastPathComponent, sealed)
                chmod(path, 0o600)
                chown(path, 65534, 65534)
            }, .invalid)
        try check(
            "d",
            { path in
                _ = try dir.write(
                    (path as NSString).lastPathComponent, [UInt8](repeating: 0, count: Spool.maximumFileSize + 1))
                chmod(path, 0o600)
            }, .inputTooLarge)
        try check("e", { _ in }, .notReady)
    }

    @Test("Result MACs verify only for the same key, request and status")
    func resultMAC() throws {
        let key = try Digests.random(32)
        let mac = DeliveryPayload.resultMAC(key: key, request: request, status: "ok")
        #expect(mac.count == 64)
        #expect(DeliveryPayload.resultMAC(key: key, request: request, status: "ok") == mac)
        #expect(DeliveryPayload.resultMAC(key: key, request: request, status: "invalid") != mac)
        #expect(DeliveryPayload.resultMAC(key: try Digests.random(32), request: request, status: "ok") != mac)
    }
}
