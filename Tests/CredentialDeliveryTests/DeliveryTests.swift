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

@Suite("Delivery URLs", .timeLimit(.minutes(3)))
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

@Suite("Delivery URL forms (docs/PROTOCOL.md: scheme:/path, no authority)", .timeLimit(.minutes(3)))
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

@Suite("Delivery payload and spool", .timeLimit(.minutes(3)))
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
                keyUsage: .keyAgreement), for: clientKey)
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

    @Test("A spool file that is a symlink, world-readable, oversized or missing is refused")
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
        try #require(chmod(target, 0o600) == 0)
        try check("a", { try #require(symlink(target, $0) == 0) }, .invalid)
        try check(
            "b",
            { path in
                _ = try dir.write((path as NSString).lastPathComponent, sealed)
                try #require(chmod(path, 0o644) == 0)
            }, .invalid)
        try check(
            "d",
            { path in
                _ = try dir.write(
                    (path as NSString).lastPathComponent, [UInt8](repeating: 0, count: Spool.maximumFileSize + 1))
                try #require(chmod(path, 0o600) == 0)
            }, .inputTooLarge)
        try check("e", { _ in }, .notReady)
    }

    /// Only root can give a file to another user: an ordinary user cannot put someone else's file
    /// into a directory of its own (chown is refused, and protected_hardlinks forbids linking one
    /// in), so as an ordinary user this case cannot be made, and is not pretended.
    @Test(
        "A spool file that belongs to another user is refused",
        .enabled(if: geteuid() == 0, "only root can make a file that belongs to another user"))
    func anotherUsersSpoolFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let spool = Spool(directory: dir.path)
        let sealed: [UInt8] = Array(repeating: 7, count: 100)
        let id = String(repeating: "c", count: 32)
        let path = try dir.write((spool.path(request: id) as NSString).lastPathComponent, sealed)
        try #require(chmod(path, 0o600) == 0)
        // nobody:nogroup; everything else about the file is right (regular, 0600, digest).
        try #require(chown(path, 65534, 65534) == 0, "chown: \(String(cString: strerror(errno)))")
        var info = stat()
        try #require(stat(path, &info) == 0 && info.st_uid == 65534)
        do {
            _ = try spool.read(request: id, digest: Digests.hex(Digests.sha256(sealed)))
            Issue.record("accepted another user's spool file")
        } catch let error as DCError {
            #expect(error.code == .invalid, "\(error)")
            #expect(error.description.contains("belongs to another user"), "\(error)")
        }
        // The same file given back to us is read: the owner was the only thing wrong.
        try #require(chown(path, geteuid(), getegid()) == 0)
        #expect(try spool.read(request: id, digest: Digests.hex(Digests.sha256(sealed))) == sealed)
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
