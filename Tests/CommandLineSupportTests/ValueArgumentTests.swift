import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import Logging
import SystemSupport
import TestSupport
import Testing

/// The values options take, each checked by its type as the command line is parsed: the types
/// alone, then a bad value given to the real tools (docs/CLI.md, exit status 64).
@Suite("Option values are checked as the command line is parsed", .ownThreads, .timeLimit(.minutes(3)))
struct ValueArgumentTests {
    @Test("A tag in any case; a tag and the object it names after the first =; nothing else")
    func tags() {
        #expect(CredentialTag(argument: "Signing") == .signing)
        #expect(CredentialTag(argument: "sign") == nil)
        let plain = TagArgument(argument: "ESCROW")
        #expect(plain?.tag == .escrow && plain?.object == nil && plain?.text == "ESCROW")
        let named = TagArgument(argument: "authentication=pkcs11:id=%01")
        #expect(named?.tag == .authentication && named?.object == "pkcs11:id=%01")
        #expect(named?.text == "authentication=pkcs11:id=%01")
        #expect(TagArgument(argument: "encryption=")?.object == "")
        for text in ["", "=01", "nonsense=01", "auth", " signing"] {
            #expect(TagArgument(argument: text) == nil, "\(text)")
        }
    }

    @Test("Words from a list, as the formats spell them: key algorithms, formats, reasons, layouts, log levels")
    func words() {
        #expect(KeyAlgorithm(argument: "rsa3072") == .rsa3072)
        #expect(KeyAlgorithm(argument: "P256") == nil)
        #expect(ConversionOutputs.Format(argument: "pem") == .pem)
        #expect(ConversionOutputs.Format(argument: "p12") == nil)
        #expect(RevocationReason(argument: "CACompromise") == .caCompromise)
        #expect(RevocationReason(argument: "caCompromise") == nil)
        #expect(CardLayout(argument: "piv") == .piv)
        #expect(CardLayout(argument: "PIV") == nil)
        #expect(LogLevelArgument(argument: "trace")?.level == .trace)
        #expect(LogLevelArgument(argument: "loud") == nil)
        #expect(KeyAlgorithm.p256.defaultValueDescription == "p256")
    }

    @Test("Revocation URLs are http:// (or aia for --ocsp); PKCS#11 URIs start with pkcs11: in any case")
    func urls() {
        #expect(HTTPURLArgument(argument: "http://ocsp.example/")?.text == "http://ocsp.example/")
        for text in ["https://ocsp.example/", "http://", "ftp://x", "http://a b", "http://a,b", "aia"] {
            #expect(HTTPURLArgument(argument: text) == nil, "\(text)")
        }
        #expect(OCSPSourceArgument(argument: "aia") == .certificateURLs)
        #expect(OCSPSourceArgument(argument: "http://127.0.0.1:1/")?.text == "http://127.0.0.1:1/")
        #expect(OCSPSourceArgument(argument: "AIA") == nil)
        #expect(PKCS11URIArgument(argument: "PKCS11:token=Card")?.text == "PKCS11:token=Card")
        for text in ["token=Card", "pkcs11", "", "pkcs12:token=Card"] {
            #expect(PKCS11URIArgument(argument: text) == nil, "\(text)")
        }
    }

    @Test("Listen addresses: HOST:PORT, [IPv6]:PORT and :PORT (every address), ports 0 to 65535")
    func listenAddresses() {
        #expect(ListenAddress(argument: "127.0.0.1:8080") == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(ListenAddress(argument: "[::1]:0") == ListenAddress(host: "::1", port: 0))
        #expect(ListenAddress(argument: ":8090") == ListenAddress(host: "0.0.0.0", port: 8090))
        for text in ["nonsense", "::1:80", "127.0.0.1:65536", "127.0.0.1:", "127.0.0.1:x", "a b:80"] {
            #expect(ListenAddress(argument: text) == nil, "\(text)")
        }
        #expect(ListenAddress(host: "127.0.0.1", port: 8090).defaultValueDescription == "127.0.0.1:8090")
    }

    /// A command line with one bad value, and what its one line of error must say after
    /// `TOOL: The value 'VALUE' is invalid for '`.
    struct Refusal: Sendable, CustomTestStringConvertible {
        var tool: String
        var arguments: [String]
        var value: String
        var rest: String
        var testDescription: String { "\(tool) \(arguments.joined(separator: " "))" }
    }

    static let refusals: [Refusal] = [
        Refusal(
            tool: "dcclient", arguments: ["show", "nonsense"], value: "nonsense",
            rest: "<tag>'. Please provide one of 'authentication', 'signing', 'encryption' or 'escrow'"),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "init", "ca", "--key-algorithm", "p521"], value: "p521",
            rest: "--key-algorithm <algorithm>'. Please provide one of 'p256', 'p384', 'rsa2048' or 'rsa3072'"),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "init", "ca", "--ocsp-url", "https://ocsp.example/"],
            value: "https://ocsp.example/", rest: "--ocsp-url <url>'"),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "issue", "ca", "--out-dir", "out", "--format", "p12"],
            value: "p12", rest: "--format <format>'. Please provide one of 'der' and 'pem'"),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "issue", "ca", "--out-dir", "out", "--negative", "broken"],
            value: "broken",
            rest:
                "--negative <negative>'. Please provide one of 'expired', 'wrong-key-usage', 'mismatched-key' or 'ca-certificate'"
        ),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "revoke", "ca", "--serial", "01", "--reason", "lunch"],
            value: "lunch",
            rest:
                "--reason <reason>'. Please provide one of the following: unspecified, keyCompromise, CACompromise, affiliationChanged, superseded, cessationOfOperation"
        ),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "crl", "ca", "--out", "crl.pem", "--format", "txt"],
            value: "txt", rest: "--format <format>'. Please provide one of 'pem' and 'der'"),
        Refusal(
            tool: "dcprovision", arguments: ["testca", "ocsp", "ca", "--listen", "127.0.0.1"], value: "127.0.0.1",
            rest: "--listen <host:port>'"),
        Refusal(
            tool: "dcprovision", arguments: ["inspect", "--testca", "ca", "--ocsp", "ftp://ocsp.example/"],
            value: "ftp://ocsp.example/", rest: "--ocsp <url>'"),
        Refusal(
            tool: "dcprovision", arguments: ["inspect", "--pkcs11", "token=Card"], value: "token=Card",
            rest: "--pkcs11 <uri>'"),
        Refusal(
            tool: "dcprovision", arguments: ["inspect", "--pkcs11", "pkcs11:token=Card", "--layout", "cac"],
            value: "cac", rest: "--layout <layout>'. Please provide one of 'piv'"),
        Refusal(
            tool: "dcprovision", arguments: ["inspect", "--pkcs12", "a.p12", "--tag", "nonsense"], value: "nonsense",
            rest: "--tag <tag>'"),
        Refusal(
            tool: "dcprovision", arguments: ["inspect", "--testca", "ca", "--key-algorithm", "ed25519"],
            value: "ed25519",
            rest: "--key-algorithm <algorithm>'. Please provide one of 'p256', 'p384', 'rsa2048' or 'rsa3072'"),
        Refusal(
            tool: "dcprovision", arguments: ["objects", "token=Card"], value: "token=Card", rest: "<uri>'"),
        Refusal(
            tool: "dcprovision",
            arguments: ["policy", "--client-scheme", "org.example.client", "--token-login", "always"],
            value: "always", rest: "--token-login <login>'. Please provide one of 'passphrase' and 'secure-services'"),
        Refusal(
            tool: "dcverify", arguments: ["serve", "--log-level", "loud"], value: "loud",
            rest:
                "--log-level <level>'. Please provide one of the following: trace, debug, info, notice, warning, error, critical"
        ),
        Refusal(
            tool: "dcverify", arguments: ["serve", "--listen", "::1:80"], value: "::1:80",
            rest: "--listen <host:port>'"),
    ]

    @Test(
        "A bad value is one line naming the value and the option, with the allowed words where there is a list; exit 64",
        arguments: refusals)
    func refused(_ refusal: Refusal) throws {
        let sandbox = try Sandbox("value-refused")
        defer { sandbox.remove() }
        let result = try sandbox.runTool(refusal.tool, refusal.arguments, expect: 64)
        #expect(
            result.stderrText
                == "\(refusal.tool): The value '\(refusal.value)' is invalid for '\(refusal.rest); see '\(refusal.tool) --help'\n"
        )
        #expect(result.stdout.isEmpty)
    }

    @Test("A refused value that carries a PIN is not repeated: one line that says why, exit 64")
    func pinNotRepeated() throws {
        let sandbox = try Sandbox("value-pin")
        defer { sandbox.remove() }
        let result = try sandbox.runTool(
            "dcprovision",
            ["inspect", "--pkcs11", "pkcs11:token=Card", "--object", "nonsense=pkcs11:id=%01;pin-value=123456"],
            expect: 64)
        #expect(!result.stderrText.contains("123456"))
        #expect(
            result.stderrText.hasPrefix(
                "dcprovision: a value on the command line carries a PIN (pin-value / pin-source); command lines are visible to every user; "
            ), "\(result.stderrText)")
        #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
    }
}
