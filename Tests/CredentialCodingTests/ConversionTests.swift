import DerivedCredentials
import Foundation
import TestSupport
import Testing

@testable import CredentialCoding

/// One accepted input form: how to make it with the openssl CLI, and what the openssl CLI says its
/// DER certificate and PKCS#8 key are.
struct AcceptedForm: Sendable, CustomTestStringConvertible {
    var name: String
    /// Writes the input; returns its path.
    var make: @Sendable (TemporaryDirectory) throws -> String
    /// The expected outputs, computed by the openssl CLI from the same input.
    var expected: @Sendable (TemporaryDirectory, String) throws -> (certificates: [[UInt8]], key: [UInt8]?)
    var needsPassphrase = false
    var testDescription: String { name }
}

private let f = OpenSSLFixtures.shared
private func openssl(_ arguments: [String]) throws -> [UInt8] { try OpenSSLFixtures.openssl(arguments) }
private func passFile(_ dir: TemporaryDirectory) throws -> String {
    try dir.write("pw-\(UUID().uuidString)", fixturePassphrase + "\n")
}
private func certDER(_ path: String, _ inform: String = "PEM") throws -> [UInt8] {
    try openssl(["x509", "-in", path, "-inform", inform, "-outform", "DER"])
}
private func keyDER(_ path: String, _ dir: TemporaryDirectory, inform: String = "PEM", encrypted: Bool = false) throws
    -> [UInt8]
{
    var arguments = ["pkcs8", "-topk8", "-nocrypt", "-in", path, "-inform", inform, "-outform", "DER"]
    if encrypted { arguments += ["-passin", "file:\(try passFile(dir))"] }
    return try openssl(arguments)
}
/// For PKCS#12: the openssl CLI's certificates (leaf first) and key, through PEM.
private func pkcs12Expected(_ dir: TemporaryDirectory, _ path: String, legacy: Bool = false) throws
    -> (certificates: [[UInt8]], key: [UInt8]?)
{
    let pass = try passFile(dir)
    let extra = legacy ? ["-legacy"] : []
    let keyPEM = try dir.write(
        "p12key-\(UUID().uuidString).pem",
        try openssl(["pkcs12", "-in", path, "-nocerts", "-nodes", "-passin", "file:\(pass)"] + extra))
    let leafPEM = try dir.write(
        "p12leaf-\(UUID().uuidString).pem",
        try openssl(["pkcs12", "-in", path, "-clcerts", "-nokeys", "-passin", "file:\(pass)"] + extra))
    let caText = String(
        decoding: try openssl(["pkcs12", "-in", path, "-cacerts", "-nokeys", "-passin", "file:\(pass)"] + extra),
        as: UTF8.self)
    var certificates = [try certDER(leafPEM)]
    if caText.contains("BEGIN CERTIFICATE") {
        certificates.append(try certDER(try dir.write("p12ca-\(UUID().uuidString).pem", caText)))
    }
    return (certificates, try keyDER(keyPEM, dir))
}

extension AcceptedForm {
    static func certificate(_ name: String, _ make: @escaping @Sendable (TemporaryDirectory) throws -> String)
        -> AcceptedForm
    {
        AcceptedForm(name: name, make: make, expected: { _, _ in ([try certDER(f.authentication.certificate)], nil) })
    }
    static func key(
        _ name: String, source: String, encrypted: Bool = false,
        _ make: @escaping @Sendable (TemporaryDirectory) throws -> String
    ) -> AcceptedForm {
        AcceptedForm(
            name: name, make: make,
            expected: { dir, input in
                // Compare with openssl's conversion of the same input file.
                ([], try keyDER(input, dir, inform: input.hasSuffix(".der") ? "DER" : "PEM", encrypted: encrypted))
            }, needsPassphrase: encrypted)
    }

    static let all: [AcceptedForm] = [
        .certificate("certificate PEM") { _ in f.authentication.certificate },
        .certificate("certificate DER") { dir in try dir.write("c.der", try certDER(f.authentication.certificate)) },
        .certificate("certificate PEM with CRLF line endings") { dir in
            try dir.write(
                "crlf.pem", try readText(f.authentication.certificate).replacingOccurrences(of: "\n", with: "\r\n"))
        },
        .certificate("certificate PEM with Bag Attributes and a comment") { dir in
            try dir.write(
                "bag.pem",
                "Bag Attributes\n    localKeyID: 01 02 03\n    friendlyName: alice\nsubject=/CN=Alice\n\n"
                    + (try readText(f.authentication.certificate)))
        },
        .key("PKCS#8 PEM (EC)", source: "ec") { _ in f.authentication.key },
        .key("PKCS#8 PEM (RSA)", source: "rsa") { _ in f.encryption.key },
        .key("PKCS#8 DER", source: "ec") { dir in try dir.write("k.der", try keyDER(f.signing.key, dir)) },
        .key("PKCS#1 RSA PRIVATE KEY PEM", source: "rsa") { dir in
            try dir.write("rsa.pem", try openssl(["rsa", "-in", f.encryption.key, "-traditional"]))
        },
        .key("PKCS#1 DER", source: "rsa") { dir in
            try dir.write("rsa.der", try openssl(["rsa", "-in", f.encryption.key, "-traditional", "-outform", "DER"]))
        },
        .key("SEC1 EC PRIVATE KEY PEM", source: "ec") { dir in
            try dir.write("sec1.pem", try openssl(["ec", "-in", f.signing.key]))
        },
        .key("SEC1 DER", source: "ec") { dir in
            try dir.write("sec1.der", try openssl(["ec", "-in", f.signing.key, "-outform", "DER"]))
        },
        .key("SEC1 with an EC PARAMETERS block", source: "ec") { dir in
            try dir.write("ecparam.pem", try openssl(["ecparam", "-name", "prime256v1", "-genkey"]))
        },
        .key("encrypted PKCS#8 PEM (AES-256, PBKDF2)", source: "ec", encrypted: true) { dir in
            try dir.write(
                "enc.pem",
                try openssl(["pkcs8", "-topk8", "-in", f.authentication.key, "-passout", "file:\(try passFile(dir))"]))
        },
        .key("encrypted PKCS#8 DER", source: "rsa", encrypted: true) { dir in
            try dir.write(
                "enc.der",
                try openssl([
                    "pkcs8", "-topk8", "-in", f.encryption.key, "-outform", "DER", "-passout",
                    "file:\(try passFile(dir))",
                ]))
        },
        .key("encrypted PKCS#8 PEM (PBES1 3DES)", source: "ec", encrypted: true) { dir in
            try dir.write(
                "enc3des.pem",
                try openssl(
                    [
                        "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", f.authentication.key, "-passout",
                        "file:\(try passFile(dir))",
                    ]))
        },
        .key("legacy Proc-Type encrypted RSA (AES-256)", source: "rsa", encrypted: true) { dir in
            try dir.write(
                "legacy-rsa.pem",
                try openssl([
                    "rsa", "-in", f.encryption.key, "-aes256", "-traditional", "-passout", "file:\(try passFile(dir))",
                ]))
        },
        .key("legacy Proc-Type encrypted EC (DES-EDE3-CBC)", source: "ec", encrypted: true) { dir in
            try dir.write(
                "legacy-ec.pem",
                try openssl(["ec", "-in", f.signing.key, "-des3", "-passout", "file:\(try passFile(dir))"]))
        },
        AcceptedForm(
            name: "PKCS#12 (AES-256, PBKDF2) with a CA certificate",
            make: { dir in
                try dir.write(
                    "modern.p12",
                    try openssl([
                        "pkcs12", "-export", "-inkey", f.authentication.key, "-in", f.authentication.certificate,
                        "-certfile", f.ca.certificate, "-name", "alice", "-passout", "file:\(try passFile(dir))",
                    ]))
            }, expected: { dir, input in try pkcs12Expected(dir, input) }, needsPassphrase: true),
        AcceptedForm(
            name: "PKCS#12 legacy (RC2-40 and 3DES)",
            make: { dir in
                try dir.write(
                    "legacy.p12",
                    try openssl([
                        "pkcs12", "-export", "-legacy", "-inkey", f.encryption.key, "-in", f.encryption.certificate,
                        "-passout", "file:\(try passFile(dir))",
                    ]))
            }, expected: { dir, input in try pkcs12Expected(dir, input, legacy: true) }, needsPassphrase: true),
        AcceptedForm(
            name: "PKCS#12 with 3DES for keys and certificates",
            make: { dir in
                try dir.write(
                    "3des.p12",
                    try openssl([
                        "pkcs12", "-export", "-keypbe", "PBE-SHA1-3DES", "-certpbe", "PBE-SHA1-3DES", "-inkey",
                        f.signing.key, "-in", f.signing.certificate, "-passout", "file:\(try passFile(dir))",
                    ]))
            }, expected: { dir, input in try pkcs12Expected(dir, input) }, needsPassphrase: true),
        AcceptedForm(
            name: "PEM bundle: CA certificate, key, leaf certificate",
            make: { dir in
                try dir.write(
                    "bundle.pem",
                    try readText(f.ca.certificate) + readText(f.signing.key) + readText(f.signing.certificate))
            },
            expected: { dir, _ in
                ([try certDER(f.signing.certificate), try certDER(f.ca.certificate)], try keyDER(f.signing.key, dir))
            }),
    ]
}

@Suite("Conversion: every accepted form, byte-for-byte against the openssl CLI", .ownThreads, .timeLimit(.minutes(3)))
struct ConversionTests {
    @Test(arguments: AcceptedForm.all)
    func matchesOpenSSL(form: AcceptedForm) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try form.make(dir)
        let passphrase: any PassphraseSource =
            form.needsPassphrase ? FixedPassphrase(SecretBytes(Array(fixturePassphrase.utf8))) : NoPassphrase()
        let material = try CredentialReader(passphrase: passphrase).read(file: input)
        let expected = try form.expected(dir, input)
        #expect(material.certificates.map(\.derBytes) == expected.certificates)
        #expect(material.privateKey?.withPKCS8DER { Array($0) } == expected.key)
    }

    @Test("SEC1 without its own curve takes it from the EC PARAMETERS block")
    func sec1WithoutCurve() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let original = try dir.write("ecparam.pem", try openssl(["ecparam", "-name", "secp384r1", "-genkey"]))
        let document = try PEMDocument(parsing: try readBytes(original))
        let parameters = document.blocks[0].der
        var key = try DERTree(parsing: document.blocks[1].der)
        guard case .constructed(let id, let children) = key else { throw DERTree.Malformed() }
        key = .constructed(id, children.filter { if case .constructed(0xA0, _) = $0 { false } else { true } })
        let stripped = try dir.write(
            "stripped.pem", pem("EC PARAMETERS", parameters) + pem("EC PRIVATE KEY", key.encoded))
        let material = try CredentialReader().read(file: stripped)
        #expect(material.privateKey?.withPKCS8DER { Array($0) } == (try keyDER(original, dir)))
        // Without the parameters block the key has no curve and is refused.
        let bare = try dir.write("bare.pem", pem("EC PRIVATE KEY", key.encoded))
        #expect(throws: DCError.self) { try CredentialReader().read(file: bare) }
    }

    @Test("PKCS#12 with an empty password opens without a passphrase source")
    func emptyPasswordPKCS12() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let empty = try dir.write("empty.txt", "\n")
        let input = try dir.write(
            "empty.p12",
            try openssl([
                "pkcs12", "-export", "-inkey", f.authentication.key, "-in", f.authentication.certificate, "-passout",
                "file:\(empty)",
            ]))
        let material = try CredentialReader().read(file: input)
        #expect(material.certificates.first?.derBytes == (try certDER(f.authentication.certificate)))
        #expect(material.privateKey != nil)
    }

    @Test("PKCS#12 friendly names are kept as found")
    func friendlyNames() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try dir.write(
            "named.p12",
            try openssl([
                "pkcs12", "-export", "-inkey", f.authentication.key, "-in", f.authentication.certificate, "-name",
                "Alice\u{1B}[31m", "-passout", "file:\(try passFile(dir))",
            ]))
        let material = try CredentialReader(passphrase: FixedPassphrase(SecretBytes(Array(fixturePassphrase.utf8))))
            .read(file: input)
        #expect(material.friendlyNames.contains("Alice\u{1B}[31m"))
        #expect(material.friendlyNames.map(\.escapingControlCharacters).contains("Alice\\u{1b}[31m"))
    }
}

@Suite("Reused OpenSSL key decoders", .ownThreads, .timeLimit(.minutes(3)))
struct KeyDecoderPoolTests {
    @Test("Keys of different types and curves decode correctly through reused decoders, also after a failure")
    func mixedAndAfterFailure() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let keys = [f.authentication.key, f.encryption.key, f.signing.key, f.escrow.key]
        let expected = try keys.map { try keyDER($0, dir) }
        // An AlgorithmIdentifier no decoder knows: strict DER, so the failure is OpenSSL's.
        var unknown = try DERTree(parsing: expected[0])
        unknown[[1, 0]] = .primitive(0x06, [0x2B, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x01])
        let unknownFile = try dir.write("unknown.der", unknown.encoded)
        let reader = CredentialReader()
        for round in 0..<3 {
            for (key, der) in zip(keys, expected) {
                #expect(try reader.read(file: key).privateKey?.withPKCS8DER { Array($0) } == der, "round \(round)")
            }
            #expect(throws: DCError.self) { try reader.read(file: unknownFile) }
        }
    }

    @Test(
        "A decoder takes exactly the bytes given: a key with a byte after it is refused where no DER check runs first")
    func exactBytes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // openssl's PKCS#8 DER, which the decoder takes as it is and refuses with one byte more.
        let der = try keyDER(f.authentication.key, dir)
        #expect(PKey.fromPKCS8(der) != nil)
        #expect(PKey.fromPKCS8(der + [0]) == nil)
        // A PrivateKey made from such bytes (a store or a plug-in's answer, not the reader) is
        // unreadable to the validator, not a key that happens to match.
        let certificate = try CredentialReader().read(file: f.authentication.certificate).certificates[0]
        let padded = try CredentialEntry(
            tag: .authentication, certificate: certificate, privateKey: PrivateKey(pkcs8DER: SecretBytes(der + [0])))
        let findings = CredentialValidator().validate(entries: [padded]).findings.map(\.code.rawValue)
        #expect(findings == ["unreadable"])
    }
}
