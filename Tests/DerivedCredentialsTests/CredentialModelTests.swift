import DerivedCredentials
import Foundation
import TestSupport
import Testing

/// Stand-in bytes: the core does not parse certificates or keys, so any bytes do here.
private func pair(_ seed: UInt8) -> (Certificate, PrivateKey) {
    (Certificate(derBytes: [0x30, 0x03, 0x02, 0x01, seed]), PrivateKey(pkcs8DER: SecretBytes([0x30, 0x01, seed])))
}

private func entry(_ tag: CredentialTag, seed: UInt8 = 1, history: Int = 0) throws -> CredentialEntry {
    let (certificate, key) = pair(seed)
    let retired = (0..<history).map { index -> CertifiedKey in
        let (c, k) = pair(UInt8(100 + index))
        return CertifiedKey(certificate: c, privateKey: k)
    }
    return try CredentialEntry(tag: tag, certificate: certificate, privateKey: key, keyHistory: retired)
}

private func code(of body: () throws -> Void) -> DCError.Code? {
    do {
        try body()
        return nil
    } catch let error as DCError {
        return error.code
    } catch {
        return nil
    }
}

@Suite("Credential model", .ownThreads, .timeLimit(.minutes(3)))
struct CredentialModelTests {
    @Test("Tag wire names are stable lowercase strings")
    func tagWireNames() {
        #expect(CredentialTag.allCases.map(\.rawValue) == ["authentication", "signing", "encryption", "escrow"])
        #expect(CredentialTag(wireName: "Signing") == .signing)
        #expect(CredentialTag(wireName: "sign") == nil)
    }

    @Test("A well-formed credential keeps its entries, ordered by tag")
    func wellFormed() throws {
        let credential = try Credential(
            name: "Alice", serialNumber: "42", expirationDate: Date(timeIntervalSince1970: 2_000_000_000),
            entries: [entry(.escrow, history: 3), entry(.authentication), entry(.signing)])
        #expect(credential.tags == [.authentication, .signing, .escrow])
        #expect(credential[.escrow]?.keyHistory.count == 3)
        #expect(credential[.encryption] == nil)
    }

    @Test(
        "Creation fails with a typed error on the AppConnect rules",
        arguments: [
            ("", "1", true, [CredentialTag.authentication], DCError.Code.emptyName),
            ("  ", "1", true, [.authentication], .emptyName),
            ("Alice", "", true, [.authentication], .emptySerialNumber),
            ("Alice", "1", false, [.authentication], .missingExpirationDate),
            ("Alice", "1", true, [], .noEntries),
            ("Alice", "1", true, [.signing, .authentication, .signing], .duplicateTag),
        ])
    func creationRules(name: String, serial: String, hasDate: Bool, tags: [CredentialTag], expected: DCError.Code)
        throws
    {
        let entries = try tags.map { try entry($0) }
        let failure = code {
            _ = try Credential(
                name: name, serialNumber: serial, expirationDate: hasDate ? Date() : nil, entries: entries)
        }
        #expect(failure == expected)
        #expect(expected.appConnectValue == AppConnectSendError.invalid.rawValue)
    }

    @Test("Only escrow may carry a key history, and at most twenty pairs")
    func keyHistoryRules() throws {
        #expect(code { _ = try entry(.encryption, history: 1) } == .keyHistoryNotAllowed)
        #expect(code { _ = try entry(.escrow, history: 20) } == nil)
        #expect(code { _ = try entry(.escrow, history: 21) } == .keyHistoryTooLong)
    }
}

@Suite("Errors", .ownThreads, .timeLimit(.minutes(3)))
struct ErrorTests {
    @Test("The AppConnect send errors keep their numeric values")
    func appConnectValues() {
        let codes: [(DCError.Code, Int)] = [
            (.unknown, -1000), (.invalid, -1001), (.serviceUnavailable, -1002), (.missingClient, -1003),
            (.oldClient, -1004), (.notReady, -1005),
        ]
        for (code, value) in codes { #expect(code.appConnectValue == value) }
        #expect(ClientSupport.present.rawValue == 0)
        #expect(ClientSupport.oldClient.rawValue == 1)
        #expect(ClientSupport.missingClient.rawValue == 2)
    }

    @Test("Categories exit with the sysexits statuses of docs/CLI.md")
    func exitStatuses() {
        let expected: [(DCError.Category, Int32)] = [
            (.usage, 64), (.dataError, 65), (.inputMissing, 66), (.unavailable, 69), (.internalError, 70),
            (.cannotCreate, 73), (.ioError, 74), (.refused, 77), (.configuration, 78),
        ]
        for (category, status) in expected { #expect(category.exitStatus == status) }
        #expect(DCError.Code.wrongPassphrase.category.exitStatus == 77)
        #expect(DCError.Code.passphraseRequired.category.exitStatus == 77)
        #expect(DCError.Code.fileNotFound.category.exitStatus == 66)
        #expect(DCError.Code.outputExists.category.exitStatus == 73)
    }

    @Test("Errors compare by code and print one line with control characters escaped")
    func oneLine() {
        let error = DCError(
            .malformedInput, "bad base64", subject: "evil\u{1B}[2J\nname.pem", hint: "fix the file")
        #expect(error.description == "evil\\u{1b}[2J\\u{a}name.pem: bad base64; fix the file")
        #expect(!error.description.contains("\n"))
        #expect(DCError.Code.malformedInput ~= error)
        #expect(!(DCError.Code.notDER ~= error))
        #expect(error.code.category == .dataError)
    }

    @Test("Control-character escaping covers C0, C1, DEL and bidi overrides")
    func escaping() {
        #expect("a\u{7}b".escapingControlCharacters == "a\\u{7}b")
        #expect("x\u{9B}31m".escapingControlCharacters == "x\\u{9b}31m")
        #expect("\u{7F}".escapingControlCharacters == "\\u{7f}")
        #expect("abc\u{202E}fdp.exe".escapingControlCharacters == "abc\\u{202e}fdp.exe")
        #expect("Zoë Müller".escapingControlCharacters == "Zoë Müller")
    }

    @Test("Escaping agrees with its definition for every scalar to U+3000: the fast path for clean text misses none")
    func escapingEveryScalar() {
        func escapes(_ value: UInt32) -> Bool {
            switch value {
            case 0x00...0x1F, 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
            default: false
            }
        }
        var wrong: [UInt32] = []
        for value in UInt32(0)...0x3000 where !(0xD800...0xDFFF).contains(value) {
            let scalar = Unicode.Scalar(value)!
            let expected = escapes(value) ? "a\\u{\(String(value, radix: 16))}b" : "a\(Character(scalar))b"
            let text = "a" + String(Character(scalar)) + "b"
            if text.escapingControlCharacters != expected || text.dropFirst(0).escapingControlCharacters != expected {
                wrong.append(value)
            }
        }
        #expect(wrong.isEmpty)
        #expect("\u{1F600} ok".escapingControlCharacters == "\u{1F600} ok")
    }
}

@Suite("Secret redaction", .ownThreads, .timeLimit(.minutes(3)))
struct RedactionTests {
    static let marker: [UInt8] = Array("TOPSECRET-KEY-MATERIAL".utf8)

    private func everyRendering(_ value: Any) -> String {
        var dumped = ""
        dump(value, to: &dumped)
        return [String(describing: value), String(reflecting: value), dumped, "\(value)"].joined(separator: "\n")
    }

    @Test("SecretBytes, PrivateKey, entries and credentials never print key bytes")
    func redacted() throws {
        let secret = SecretBytes(Self.marker)
        let key = PrivateKey(pkcs8DER: secret)
        let entry = try CredentialEntry(
            tag: .escrow, certificate: Certificate(derBytes: [1, 2, 3]), privateKey: key,
            keyHistory: [CertifiedKey(certificate: Certificate(derBytes: [4]), privateKey: key)])
        let credential = try Credential(name: "n", serialNumber: "s", expirationDate: Date(), entries: [entry])
        let markerText = String(decoding: Self.marker, as: UTF8.self)
        let markerDecimal = Self.marker.prefix(4).map(String.init).joined(separator: ", ")
        for value: Any in [secret, key, entry, credential, entry.certifiedKey] {
            let text = everyRendering(value)
            #expect(!text.contains(markerText))
            #expect(!text.contains(markerDecimal))
            #expect(text.contains("redacted"))
        }
    }

    @Test("SecretBytes compares by content and lends its bytes")
    func secretBytes() {
        var source: [UInt8] = [1, 2, 3]
        let secret = SecretBytes(consuming: &source)
        #expect(source.isEmpty)
        #expect(secret == SecretBytes([1, 2, 3]))
        #expect(secret != SecretBytes([1, 2, 4]))
        #expect(secret.withUnsafeBytes { Array($0) } == [1, 2, 3])
    }
}

@Suite("Verdicts", .ownThreads, .timeLimit(.minutes(3)))
struct VerdictTests {
    @Test("Errors always fail; warnings fail only when strict")
    func strictness() {
        var verdict = Verdict()
        #expect(verdict.passes())
        verdict.append(Finding("expires-soon", .warning, tag: .signing, "soon"))
        verdict.append(Finding("expired", .info, tag: .escrow, "old"))
        #expect(verdict.passes())
        #expect(!verdict.passes(strict: true))
        verdict.append(Finding("key-mismatch", .error, tag: .authentication, "no"))
        #expect(!verdict.passes())
        #expect(verdict.findings(for: .signing).count == 1)
        #expect(verdict.findings[0].description == "warning [signing] expires-soon: soon")
    }
}

@Suite("The one hex rule", .ownThreads, .timeLimit(.minutes(1)))
struct LowercaseHexTests {
    @Test("Exactly N digits 0-9 a-f: no capitals, no other length, no look-alikes; random request ids follow it")
    func rule() {
        #expect(LowercaseHex.matches("0123456789abcdef", count: 16))
        #expect(LowercaseHex.matches("", count: 0))
        for text in [
            "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0123456789abcdeg", "0123456789abcde\u{FF10}",
        ] {
            #expect(!LowercaseHex.matches(text, count: 16), "\(text)")
        }
        #expect(RequestID(validating: String(repeating: "A", count: 32)) == nil)
        for _ in 0..<100 {
            #expect(LowercaseHex.matches(RequestID.random().text, count: 32))
        }
    }
}
