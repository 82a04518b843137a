import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import TestCAProvider
import TestSupport
import Testing

private let request = "0123456789abcdef0123456789abcdef"
private let digest = String(repeating: "ab", count: 32)
private let signature = String(repeating: "5a", count: 64)

private let issued: (ca: TestCA, credential: Credential, dir: TemporaryDirectory) = {
    let dir = try! TemporaryDirectory("delivery")
    let ca = try! TestCA.initialize(at: dir.file("ca"))
    return (ca, try! ca.issue(TestCAIssueRequest(escrowHistory: 2)).credential(), dir)
}()

@Suite("Delivery URLs", .ownThreads, .timeLimit(.minutes(3)))
struct DeliveryURLTests {
    @Test("The four messages round-trip, and carry no secret")
    func roundTrip() throws {
        let client = try ClientID("dcclient")
        let requestID = try RequestID(request)
        let signatureHex = try SignatureHex(signature)
        let messages: [DeliveryMessage] = [
            .new(CredentialRequest(client: client, request: requestID, time: 1_795_000_000, signature: signatureHex)),
            .available(AvailabilityNotice(client: client, time: 1_795_000_000, signature: signatureHex)),
            .deliver(
                DeliveryNotice(
                    client: client, request: requestID, digest: try SHA256Hex(digest), sequence: 42,
                    signature: signatureHex)),
            .result(DeliveryResult(request: requestID, status: .ok, mac: try SHA256Hex(digest))),
        ]
        for message in messages {
            let url = message.url(scheme: try URLScheme("org.example.dc"))
            #expect(try DeliveryMessage.parse(url, scheme: try URLScheme("org.example.dc")) == message)
        }
        #expect(
            DeliveryMessage.new(
                CredentialRequest(client: try ClientID("c"), request: requestID, time: 7, signature: signatureHex)
            ).url(scheme: try URLScheme("x.y"))
                == "x.y:/new?v=2&client=c&request=\(request)&time=7&sig=\(signature)")
    }

    @Test("A signature covers the scheme, the path and every value; a change to any of them fails it")
    func signatures() throws {
        let key = try MessageSigningKey.generate()
        let scheme = try URLScheme("org.example.dc")
        let message = try DeliveryNotice(
            client: try ClientID("dcclient"), request: try RequestID(request), digest: try SHA256Hex(digest),
            sequence: 42
        ).signed(with: key, scheme: scheme)
        #expect(message.isSigned(by: key.publicKey, scheme: scheme))
        #expect(!message.isSigned(by: key.publicKey, scheme: try URLScheme("org.example.other")))
        #expect(!message.isSigned(by: try MessageSigningKey.generate().publicKey, scheme: scheme))
        let url = message.url(scheme: scheme)
        for (from, to) in [("seq=42", "seq=43"), ("client=dcclient", "client=dcclienu"), ("digest=ab", "digest=ac")] {
            let changed = try DeliveryNotice.parse(url.replacingOccurrences(of: from, with: to), scheme: scheme)
            #expect(!changed.isSigned(by: key.publicKey, scheme: scheme), "\(from) → \(to)")
        }
        #expect(String(describing: key).contains("redacted"))
        var dumped = ""
        dump(key, to: &dumped)
        #expect(!dumped.contains(Digests.hex(key.privateKey.withPKCS8DER { Array($0) })))
    }

    @Test("An old-version message gets a clear error naming both versions")
    func oldVersion() throws {
        let error = try #require(throws: DCError.self) {
            try DeliveryMessage.parse(
                "org.example.dc:/new?v=1&client=dcclient&request=\(request)", scheme: try URLScheme("org.example.dc"))
        }
        #expect(error.code == .refusedMessage)
        #expect(error.code.category.exitStatus == 77)
        #expect(error.description.contains("protocol version '1'") && error.description.contains("version 2"))
    }

    static let deliver: String =
        "org.example.dc:/deliver?v=2&client=dcclient&request=\(request)&digest=\(digest)&seq=1&sig=\(signature)"

    @Test(
        "Hostile URLs are refused",
        arguments: hostileURLs)
    func hostile(url: String) {
        #expect(throws: DCError.self) { try DeliveryMessage.parse(url, scheme: try URLScheme("org.example.dc")) }
    }

    static let newWithEncodedClient: String =
        "org.example.dc:/new?v=2&client=d%63client&request=\(request)&time=1&sig=\(signature)"
    static let padded: String = deliver + "&pad=" + String(repeating: "a", count: 200_000)

    static let hostileURLs: [String] = [
        deliver + "&extra=1",
        deliver.replacingOccurrences(of: "client=dcclient", with: "client=dcclient&client=evil"),
        deliver.replacingOccurrences(of: "client=dcclient", with: "client=dc client"),
        deliver.replacingOccurrences(of: "client=dcclient", with: "client=$(reboot)"),
        deliver.replacingOccurrences(of: "client=dcclient", with: "client=--help"),
        "--help",
        deliver + "#frag",
        deliver.replacingOccurrences(of: "org.example.dc:/", with: "org.example.dc://host/"),
        deliver.replacingOccurrences(of: "v=2", with: "v=3"),
        deliver.replacingOccurrences(of: request, with: request.uppercased()),
        deliver.replacingOccurrences(of: "&sig=\(signature)", with: ""),
        deliver.replacingOccurrences(of: "seq=1", with: "seq=01"),
        deliver.replacingOccurrences(of: "seq=1", with: "seq=-1"),
        deliver.replacingOccurrences(of: "seq=1", with: "seq=1234567890123456789"),
        deliver.replacingOccurrences(of: signature, with: String(signature.dropLast(2))),
        // The same parameters in another order: one spelling only, so what is signed is what is sent.
        "org.example.dc:/deliver?client=dcclient&v=2&request=\(request)&digest=\(digest)&seq=1&sig=\(signature)",
        deliver.replacingOccurrences(of: "/deliver", with: "/../deliver"),
        deliver.replacingOccurrences(of: "org.example.dc:", with: "other.scheme:"),
        padded,
        newWithEncodedClient,
        deliver + "\u{0}",
    ]
}

@Suite("Delivery URL forms (docs/PROTOCOL.md: scheme:/path, no authority)", .ownThreads, .timeLimit(.minutes(3)))
struct DeliveryURLFormTests {
    static let query = "?v=2&client=dcclient&request=\(request)&time=1&sig=\(signature)"

    @Test("scheme:/new is the one accepted form")
    func accepted() throws {
        #expect(
            try DeliveryMessage.parse("org.example.dc:/new" + Self.query, scheme: try URLScheme("org.example.dc"))
                == .new(
                    CredentialRequest(
                        client: try ClientID("dcclient"), request: try RequestID(request), time: 1,
                        signature: try SignatureHex(signature))))
    }

    @Test(
        "An authority (even an empty one) or a rootless path is refused",
        arguments: ["org.example.dc://host/new", "org.example.dc:///new", "org.example.dc:new", "org.example.dc://new"])
    func refused(prefix: String) throws {
        let error = try #require(throws: DCError.self) {
            try DeliveryMessage.parse(prefix + Self.query, scheme: try URLScheme("org.example.dc"))
        }
        #expect(error.code == .invalid)
        #expect(error.description.contains("refused URL"))
    }
}

@Suite("Delivery payload and spool", .ownThreads, .timeLimit(.minutes(3)))
struct DeliveryPayloadTests {
    private func payload() throws -> DeliveryPayload {
        DeliveryPayload(
            requestId: try RequestID(request), clientId: .exampleClient, issuedAt: Date(),
            resultKey: try Digests.random(32),
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
        let id = try RequestID(request)
        let original = try payload()
        let written = try spool.write(try Sealing.seal(try original.encode(), to: clientCertificate), request: id)
        var info = stat()
        stat(spool.path(request: id), &info)
        #expect(info.st_mode & 0o777 == 0o600)
        stat(spool.directory, &info)
        #expect(info.st_mode & 0o777 == 0o700)
        let opened = try DeliveryPayload.decode(
            try Sealing.open(
                try spool.read(request: id, digest: written), with: clientKey, certificate: clientCertificate))
        #expect(opened.credential == original.credential)
        #expect(throws: DCError.self) { try spool.read(request: id, digest: digest) }  // wrong digest
        spool.remove(request: id)
        #expect(throws: DCError.self) { try spool.read(request: id, digest: written) }  // gone: replay
    }

    @Test("A spool file that is a symlink, world-readable, oversized or missing is refused")
    func hostileSpoolFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let spool = Spool(directory: dir.path)
        let sealed: [UInt8] = Array(repeating: 7, count: 100)
        let good = Digests.hex(Digests.sha256(sealed))
        func check(_ name: String, _ prepare: (String) throws -> Void, _ expected: DCError.Code) throws {
            let id = try RequestID(String(repeating: name, count: 32))
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
        let id = try RequestID(String(repeating: "c", count: 32))
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
        let request = try RequestID(request)
        let mac = DeliveryPayload.resultMAC(key: key, request: request, status: .ok)
        #expect(mac.count == 64)
        #expect(DeliveryPayload.resultMAC(key: key, request: request, status: .ok) == mac)
        #expect(DeliveryPayload.resultMAC(key: key, request: request, status: .invalid) != mac)
        #expect(DeliveryPayload.resultMAC(key: try Digests.random(32), request: request, status: .ok) != mac)
    }
}
