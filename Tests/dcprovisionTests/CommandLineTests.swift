import CommandLineSupport
import Foundation
import TestSupport
import Testing

/// A sandbox whose `PATH` starts with the built tools, and runs them by name.
struct Tools {
    let sandbox: Sandbox

    init(_ label: String, extra: [String: String] = [:]) throws {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        sandbox = try Sandbox(label, extra: extra.merging(["PATH": Binaries.directory + ":" + path]) { $1 })
    }

    /// Runs dcprovision or dcclient from the sandbox's directory.
    @discardableResult
    func run(_ tool: String, _ arguments: [String]) throws -> ProcessResult {
        try sandbox.run(Binaries.directory + "/" + tool, arguments, timeout: 120)
    }

    /// Runs, and records an issue naming the command unless it exits 0.
    @discardableResult
    func check(_ tool: String, _ arguments: [String], _ location: SourceLocation = #_sourceLocation) throws
        -> ProcessResult
    {
        let result = try run(tool, arguments)
        #expect(
            result.status == 0, "\(tool) \(arguments.joined(separator: " ")): \(result.stdoutText)\(result.stderrText)",
            sourceLocation: location)
        return result
    }

    /// A client set up and registered for org.example.dcclient, talking to org.example.provider.
    func setUpClient() throws {
        try sandbox.write("pass.txt", "correct horse\n")
        try check(
            "dcclient",
            [
                "init", "--client-scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ])
        try check("dcclient", ["register"])
    }

    /// A provider for org.example.provider, issuing from a test CA in `ca`, registered (not paired).
    func setUpProvider() throws {
        try check("dcprovision", ["testca", "init", "ca"])
        try check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
    }

    /// ``setUpClient()``, then a provider (a test CA in `ca`) registered and paired with it, and
    /// the client authorized: ready for secure files and the pasteboard.
    func setUpManagedClient() throws {
        try setUpClient()
        try setUpProvider()
        try check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        try check("dcprovision", ["authorize", "--client-scheme", "org.example.dcclient"])
    }
}

@Suite("The delivery answers the `new` that asked, through the real handlers", .ownThreads, .timeLimit(.minutes(3)))
struct RequestIdCommandTests {
    @Test(
        "dcclient request: the delivery carries the request id of the new; the same new again exits 77, issuing nothing"
    )
    func requestIdAndReplay() throws {
        let tools = try Tools("request-id")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check("dcprovision", ["testca", "issue", "ca", "--format", "pem", "--out-dir", "issued"])
        // The sample exec provider, behind a wrapper that counts how often it is asked to provide.
        // Both sit in a directory of their own, and the count goes into the directory the provider
        // is given: a plug-in reads its own directory and writes only where its options point.
        let log = tools.sandbox.file("issued/provides.log")
        try FileManager.default.createDirectory(
            atPath: tools.sandbox.file("plugins"), withIntermediateDirectories: true)
        let sample = try tools.sandbox.write(
            "plugins/dcprovider-sample", try readText(Repository.root + "/Samples/exec-provider/dcprovider-sample"))
        let wrapper = try tools.sandbox.write(
            "plugins/dcprovider-counted", "#!/bin/sh\necho provide >> '\(log)'\nexec /usr/bin/python3 '\(sample)'\n")
        chmod(wrapper, 0o755)
        try tools.setUpClient()
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--provider",
                "exec:" + wrapper, "--option", "dir=" + tools.sandbox.file("issued"),
            ])

        // Not paired yet: the client's genuine request is refused by the provider (exit 77 in its
        // handler), and the source is never asked.
        let unpaired = try tools.run("dcclient", ["request"])
        #expect(unpaired.status != 0)
        #expect(unpaired.stderrText.contains("is not paired with this provider"), "\(unpaired.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: log))
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        // Anyone on the machine can open a provider URL: a `new` with a made-up signature is exit 77,
        // and nothing is issued or sent.
        let forged =
            "org.example.provider:/new?v=2&client=dcclient&request=\(String(repeating: "ab", count: 16))&time=\(Int(Date().timeIntervalSince1970))&sig=\(String(repeating: "5a", count: 64))"
        let refused = try tools.run("dcprovision", ["handle-url", forged])
        #expect(refused.status == 77, "\(refused.stderrText)")
        #expect(refused.stderrText.contains("not signed by the paired client"), "\(refused.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: log))

        let requested = try tools.check("dcclient", ["request"])
        let lines = requested.stdoutText.split(separator: "\n").map(String.init)
        let newURL = try #require(lines.first { $0.hasPrefix("requesting: ") }?.dropFirst("requesting: ".count))
        let request = try #require(
            newURL.split(separator: "&").first { $0.hasPrefix("request=") }.map { String($0.dropFirst(8)) })
        #expect(request.count == 32)
        // What the provider's handler opened, and what the client's handler received.
        #expect(
            lines.contains {
                $0.contains("opening org.example.dcclient:/deliver?v=2&client=dcclient&request=\(request)&")
            },
            "\(requested.stdoutText)")
        #expect(lines.contains("dcclient: received request \(request): installed \"Sample credential\""))
        #expect(lines.contains("dcprovision: result for request \(request): ok (MAC verified)"))
        #expect(try readText(log) == "provide\n")

        // The same new URL again: refused before the provider is asked.
        let replayed = try tools.run("dcprovision", ["handle-url", String(newURL)])
        #expect(replayed.status == 77, "\(replayed.stderrText)")
        #expect(
            replayed.stderrText
                == "dcprovision: \(request): a replayed request: this request id was used already; "
                + "a client asks again with a new request id (dcclient request)\n")
        #expect(try readText(log) == "provide\n")
        let status = try tools.check("dcprovision", ["status"])
        #expect(status.stdoutText.split(separator: "\n").count == 2)
        #expect(status.stdoutText.contains("client dcclient (org.example.dcclient:)  authorized"))
        #expect(status.stdoutText.contains("\(request)  org.example.dcclient  Sample credential  ok"))
    }
}

@Suite("One name per idea on the command line (docs/CLI.md)", .ownThreads, .timeLimit(.minutes(3)))
struct VocabularyTests {
    @Test("Former names are rewritten for their command only, as --old VALUE and --old=VALUE, never after --")
    func rewriting() {
        let names = FormerNames([
            "register": ["scheme": "provider-scheme"], "testca init": ["algorithm": "key-algorithm"],
        ])
        #expect(
            names.rewrite(["register", "--scheme", "a.b", "--brand=X"]) == [
                "register", "--provider-scheme", "a.b", "--brand=X",
            ])
        #expect(names.rewrite(["register", "--scheme=a.b"]) == ["register", "--provider-scheme=a.b"])
        #expect(names.rewrite(["send", "--scheme", "a.b"]) == ["send", "--scheme", "a.b"])
        #expect(
            names.rewrite(["testca", "init", "ca", "--algorithm", "p384"]) == [
                "testca", "init", "ca", "--key-algorithm", "p384",
            ])
        #expect(
            names.rewrite(["testca", "issue", "--algorithm", "p384"]) == ["testca", "issue", "--algorithm", "p384"])
        #expect(names.rewrite(["register", "--", "--scheme"]) == ["register", "--", "--scheme"])
        #expect(names.rewrite(["register", "--schemes"]) == ["register", "--schemes"])
    }

    @Test("The old names still work, and no --help shows them")
    func formerNamesWorkHidden() throws {
        let tools = try Tools("former-names")
        defer { tools.sandbox.remove() }
        try tools.sandbox.write("pass.txt", "correct horse\n")
        try tools.check("dcprovision", ["testca", "init", "ca", "--algorithm", "p384"])
        let issued = try tools.check(
            "dcprovision", ["testca", "issue", "ca", "--algorithm", "p256", "--out-dir", "out"])
        #expect(issued.stderrText.isEmpty)
        try tools.check(
            "dcclient",
            [
                "init", "--scheme", "org.example.dcclient", "--provider-scheme", "org.example.provider",
                "--passphrase-file", "pass.txt",
            ])
        try tools.check("dcclient", ["register"])
        try tools.check(
            "dcprovision", ["register", "--scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        // A send goes only to a client the operator paired.
        try tools.check("dcprovision", ["pair", "--client-scheme", "org.example.dcclient"])
        let sent = try tools.check(
            "dcprovision",
            [
                "send", "--testca", "ca", "--brand", "Example", "--callback-scheme", "org.example.provider",
                "--client-scheme", "org.example.dcclient",
            ])
        #expect(sent.stdoutText.contains("result: the client installed the credential and confirmed"))
        let inspected = try tools.check("dcprovision", ["inspect", "--manifest", "out/manifest.json", "--json"])
        #expect(inspected.stdoutText.contains("EC P-256"))
        let serialled = try tools.check(
            "dcprovision", ["send", "--testca", "ca", "--client-scheme", "org.example.dcclient", "--serial", "0042"])
        #expect(serialled.stdoutText.contains("result: the client installed the credential and confirmed"))
        #expect(try tools.check("dcclient", ["list"]).stdoutText.contains("serial 0042"))
        #expect(
            try tools.check("dcclient", ["show", "signing", "--pem"]).stdoutText.hasPrefix("-----BEGIN CERTIFICATE"))

        for (tool, command, old) in [
            ("dcprovision", ["register"], "--scheme "), ("dcprovision", ["send"], "--callback-scheme"),
            ("dcprovision", ["send"], "--pkcs11-module"), ("dcprovision", ["inspect"], "--pkcs11-module"),
            ("dcprovision", ["testca", "init"], "--algorithm"), ("dcprovision", ["testca", "issue"], "--algorithm"),
            ("dcclient", ["init"], "--scheme "), ("dcprovision", ["send"], "--serial"),
            ("dcclient", ["jwt"], "--client-id"), ("dcclient", ["show"], "--pem"),
        ] {
            let help = try tools.check(tool, command + ["--help"])
            #expect(!help.stdoutText.contains(old), "\(tool) \(command) --help shows \(old)")
        }
    }

    /// Each long flag a tool's commands show, with the command paths that take it, from
    /// swift-argument-parser's own description of the parsers (`--experimental-dump-help`):
    /// hidden flags (former names are not even declared) and `--help`/`--version` left out.
    static func flagsByCommand(_ tool: String) throws -> [String: Set<String>] {
        let dumped = try run(Binaries.directory + "/" + tool, ["--experimental-dump-help"], timeout: 30)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(dumped.stdout)) as? [String: Any])
        var flags: [String: Set<String>] = [:]
        func walk(_ command: [String: Any], _ path: [String]) {
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                guard argument["kind"] as? String != "positional", argument["shouldDisplay"] as? Bool != false else {
                    continue
                }
                for name in argument["names"] as? [[String: Any]] ?? [] where name["kind"] as? String == "long" {
                    guard let long = name["name"] as? String, long != "help", long != "version" else { continue }
                    flags["--" + long, default: []].insert(path.joined(separator: " "))
                }
            }
            for child in command["subcommands"] as? [[String: Any]] ?? []
            where child["shouldDisplay"] as? Bool != false {
                guard let name = child["commandName"] as? String, name != "help" else { continue }
                walk(child, path + [name])
            }
        }
        walk(try #require(document["command"] as? [String: Any]), [])
        return flags
    }

    /// The rows of the flag table under `heading` in docs/CLI.md: the flags each row's first cell
    /// names, its commands cell and its meaning.
    static func flagRows(under heading: String) throws -> [(flags: Set<String>, commands: String, meaning: String)] {
        let text = try readText(Repository.root + "/docs/CLI.md")
        let section = try #require(text.components(separatedBy: "\n## ").first { $0.hasPrefix(heading) })
        let flag = try NSRegularExpression(pattern: "--[a-z0-9][a-z0-9-]*")
        return section.split(separator: "\n").filter { $0.hasPrefix("| `-") }.map { line in
            let cells = line.replacingOccurrences(of: "\\|", with: "/").split(separator: "|").map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            let names = flag.matches(in: cells[0], range: NSRange(cells[0].startIndex..., in: cells[0])).map {
                String(cells[0][Range($0.range, in: cells[0])!])
            }
            return (Set(names), cells.count > 2 ? cells[1] : "", cells.last ?? "")
        }
    }

    @Test(
        "One flag name, one meaning: every flag --help shows on dcprovision and dcclient has exactly one row in docs/CLI.md's flag table, which names every command that takes it and says one meaning before any detail per command; dcverify's table likewise"
    )
    func oneMeaningPerFlag() throws {
        let rows = try Self.flagRows(under: "Every flag")
        // What a commands cell may say for several commands at once.
        let source = ["convert", "inspect", "send", "register"]
        for tool in ["dcprovision", "dcclient"] {
            for (flag, commands) in try Self.flagsByCommand(tool).sorted(by: { $0.key < $1.key }) {
                let matching = rows.filter { $0.flags.contains(flag) }
                #expect(matching.count == 1, "\(tool) \(flag): \(matching.count) rows in docs/CLI.md's flag table")
                guard let row = matching.first else { continue }
                #expect(
                    row.meaning.range(of: "^`[^`]+`:", options: .regularExpression) == nil,
                    "\(flag): the meaning starts with a command, as if it meant something else elsewhere: \(row.meaning)"
                )
                for command in commands {
                    let named =
                        row.commands.contains("every command")
                        || (tool == "dcclient" && row.commands.contains("every `dcclient` command"))
                        || (tool == "dcprovision" && source.contains(command) && row.commands.contains("source¹"))
                        || row.commands.contains("`\(tool) \(command)`")
                        || (tool == "dcprovision" && row.commands.contains("`\(command)`"))
                    #expect(named, "\(tool) \(command) takes \(flag), but its row names only: \(row.commands)")
                }
            }
        }
        let service = try Self.flagRows(under: "dcverify, the verification service")
        for flag in try Self.flagsByCommand("dcverify").keys.sorted() {
            #expect(service.filter { $0.flags.contains(flag) }.count == 1, "dcverify \(flag): not one row")
        }
    }

    @Test(
        "send takes the brand and provider scheme from the provider's registration, and --trust-anchor as inspect does: a credential that chains to another CA is exit 65 and nothing is sent; --tag TAG=ID is refused for --object"
    )
    func sendDefaultsAndTrustAnchor() throws {
        let tools = try Tools("send-defaults")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcprovision", ["testca", "init", "other"])
        let send = ["send", "--testca", "ca", "--client-scheme", "org.example.dcclient"]
        let before = try tools.check("dcclient", ["list"]).stdoutText
        let refused = try tools.run("dcprovision", send + ["--trust-anchor", "other/root.pem"])
        #expect(refused.status == 65, "\(refused.stdoutText)\(refused.stderrText)")
        #expect(!refused.stdoutText.contains("result:"), "\(refused.stdoutText)")
        #expect(try tools.check("dcclient", ["list"]).stdoutText == before, "a refused send installed something")
        let sent = try tools.check("dcprovision", send + ["--trust-anchor", "ca/root.pem"])
        #expect(sent.stdoutText.contains("result: the client installed the credential and confirmed"))
        // The registration's brand reached the client: the sends are the provider's own.
        #expect(try tools.check("dcprovision", ["status", "--json"]).stdoutText.contains("org.example.dcclient"))
        let tagged = try tools.run(
            "dcprovision", ["inspect", "--pkcs11", "pkcs11:token=Card", "--tag", "authentication=01"])
        #expect(tagged.status == 64 && tagged.stderrText.contains("--object"), "\(tagged.stderrText)")
        let unregistered = try Tools("send-unregistered")
        defer { unregistered.sandbox.remove() }
        try unregistered.check("dcprovision", ["testca", "init", "ca"])
        let missing = try unregistered.run("dcprovision", send)
        #expect(missing.status == 66, "\(missing.stderrText)")
        #expect(missing.stderrText.contains("--brand and --provider-scheme"), "\(missing.stderrText)")
    }

    @Test("--version on both tools prints the one version")
    func version() throws {
        let tools = try Tools("version")
        defer { tools.sandbox.remove() }
        for tool in ["dcprovision", "dcclient"] {
            let result = try tools.check(tool, ["--version"])
            #expect(result.stdoutText == Toolkit.version + "\n")
        }
    }

    @Test("register --help offers only the PIN options it takes; the others are refused with what to do")
    func registerPINOptions() throws {
        let tools = try Tools("register-pin")
        defer { tools.sandbox.remove() }
        let help = try tools.check("dcprovision", ["register", "--help"])
        #expect(help.stdoutText.contains("--pin-file"))
        #expect(help.stdoutText.contains("--allow-final-pin-try"))
        for refused in ["--pin-fd", "--pin-env", "--pin-prompt"] {
            #expect(!help.stdoutText.contains(refused))
        }
        let refused = try tools.run(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "B", "--pkcs11",
                "pkcs11:token=Card", "--layout", "piv", "--pin-env", "CARD_PIN",
            ])
        #expect(refused.status == 64)
        #expect(refused.stderrText.contains("give --pin-file FILE (its path is kept, not the PIN)"))
    }

    @Test("dcclient unregister removes the handler and the registration file; register brings both back")
    func unregister() throws {
        let tools = try Tools("unregister")
        defer { tools.sandbox.remove() }
        try tools.setUpClient()
        let registration = tools.sandbox.dataHome + "/derived-credentials/clients/org.example.dcclient.json"
        let desktop = tools.sandbox.dataHome + "/applications/dc-org.example.dcclient.desktop"
        #expect(FileManager.default.fileExists(atPath: registration))
        #expect(FileManager.default.fileExists(atPath: desktop))
        try tools.check("dcclient", ["unregister"])
        #expect(!FileManager.default.fileExists(atPath: registration))
        #expect(!FileManager.default.fileExists(atPath: desktop))
        try tools.check("dcclient", ["register"])
        #expect(FileManager.default.fileExists(atPath: registration))
        #expect(FileManager.default.fileExists(atPath: desktop))
    }
}

@Suite("Every error says what to do next", .ownThreads, .timeLimit(.minutes(3)))
struct ErrorHintTests {
    @Test("A send to a client with no registration: exit 69, and how to register it")
    func missingClientRegistration() throws {
        let tools = try Tools("missing-client")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        let result = try tools.run(
            "dcprovision",
            [
                "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
                "--client-scheme", "org.example.nobody",
            ])
        #expect(result.status == 69)
        #expect(
            result.stderrText
                == "dcprovision: no managed client is registered for org.example.nobody:; "
                + "register the client (dcclient register, after dcclient init), then try again\n")
    }

    @Test("A provider that is not on the provider path: exit 64, naming the variable and the known ids")
    func providerNotOnPath() throws {
        let tools = try Tools("provider-path", extra: ["DCPROVISION_PROVIDER_PATH": "/nonexistent"])
        defer { tools.sandbox.remove() }
        let result = try tools.run("dcprovision", ["inspect", "--provider", "acme"])
        #expect(result.status == 64)
        #expect(
            result.stderrText
                == "dcprovision: no provider 'acme' (built in, or dcprovider-acme on the provider path; "
                + "DCPROVISION_PROVIDER_PATH=/nonexistent); put the directory that holds dcprovider-acme on "
                + "DCPROVISION_PROVIDER_PATH, give --provider exec:PATH, or use one of: cmp, derive, pem, pkcs11, testca\n"
        )
    }

    @Test("An empty token list says where to look (p11-kit-client with no server: a module without tokens)")
    func emptyTokenList() throws {
        let tools = try Tools("no-tokens")
        defer { tools.sandbox.remove() }
        let module = "/usr/lib/x86_64-linux-gnu/pkcs11/p11-kit-client.so"
        let result = try tools.run("dcprovision", ["tokens", "--module", module])
        #expect(result.status == 0, "\(result.stderrText)")
        #expect(result.stdoutText == "no tokens\n")
        #expect(
            result.stderrText
                == "dcprovision: tokens: no token in \(module); insert the card (is pcscd running?), or name its "
                + "module with --module NAME|PATH (p11-kit list-modules shows the registered ones)\n")
    }

    @Test(
        "A path attribute nobody knows is named, with the attributes that exist; an unknown query attribute is ignored (RFC 7512 2.4)"
    )
    func unknownURIAttribute() throws {
        let tools = try Tools("uri-attribute")
        defer { tools.sandbox.remove() }
        let result = try tools.run("dcprovision", ["objects", "pkcs11:token=Card;colour=red?x-vendor=1"])
        #expect(result.status == 64)
        #expect(
            result.stderrText.hasPrefix(
                "dcprovision: pkcs11:token=Card;colour=red?x-vendor=1: the URI has path attributes this toolkit does "
                    + "not understand: colour; remove or correct them (RFC 7512: an unknown path attribute, x-… "
                    + "included, matches nothing); its path attributes are token, "))
        #expect(!result.stderrText.contains("pin-value"))
    }
}

@Suite("The scheme handlers' command line", .ownThreads, .timeLimit(.minutes(3)))
struct HandlerCommandLineTests {
    @Test(
        "TOOL handle-url URL, as the desktop runs it, is judged as the parsed `handle-url -- URL`: same output, same status"
    )
    func directEntryMatchesParser() throws {
        let tools = try Tools("handler-entry")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let now = Int(Date().timeIntervalSince1970)
        let signature = String(repeating: "5a", count: 64)
        let hostile = [
            "org.example.provider:/new?v=2&client=dcclient&request=\(String(repeating: "ab", count: 16))&time=\(now)&sig=\(signature)",
            "org.example.provider:/result?v=2&request=\(String(repeating: "cd", count: 16))&status=ok&mac=00",
            "org.example.dcclient:/policy?v=2&client=dcclient&seq=9&state=retired&autolock=1&message=&time=\(now)&sig=\(signature)",
            "org.example.dcclient:/deliver?v=2&client=dcclient&request=\(String(repeating: "ef", count: 16))&digest=00&seq=1&sig=00",
            "org.example.other:/new?v=2", "org.example.provider:/nothing", "", "not a URL\u{1b}[31m",
            "org.example.provider:",
        ]
        for tool in ["dcprovision", "dcclient"] {
            for url in hostile {
                let direct = try tools.run(tool, ["handle-url", url])
                let parsed = try tools.run(tool, ["handle-url", "--", url])
                #expect(direct.status != 0, "\(tool) accepted \(url)")
                #expect(
                    direct.status == parsed.status && direct.stdoutText == parsed.stdoutText
                        && direct.stderrText == parsed.stderrText,
                    "\(tool) handle-url \(url): \(direct.status) \(direct.stderrText) vs \(parsed.status) \(parsed.stderrText)"
                )
            }
            // Anything more than the URL goes to the parser: help, flags, a flag-like argument.
            #expect(try tools.run(tool, ["handle-url", "--help"]).stdoutText.contains("USAGE:"))
            let flagLike = try tools.run(tool, ["handle-url", "-x"])
            #expect(flagLike.status == 64, "\(flagLike.stderrText)")
        }
    }
}

@Suite("A send that would be refused makes nothing", .ownThreads, .timeLimit(.minutes(3)))
struct RefusedSendTests {
    @Test(
        "A send to a locked client exits 69 before the source is asked: the test CA issues nothing (index.txt unchanged)"
    )
    func lockedClientIssuesNothing() throws {
        let tools = try Tools("refused-send")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.check("dcclient", ["lock"])
        let index = tools.sandbox.file("ca/index.txt")
        // The CA has issued nothing yet: no index at all.
        let before = (try? readText(index)) ?? ""
        let send = [
            "send", "--testca", "ca", "--brand", "Example", "--provider-scheme", "org.example.provider",
            "--client-scheme", "org.example.dcclient",
        ]
        let refused = try tools.run("dcprovision", send)
        #expect(refused.status == 69, "\(refused.stderrText)")
        #expect(refused.stderrText.contains("the client's secure services are locked"), "\(refused.stderrText)")
        #expect(((try? readText(index)) ?? "") == before, "the test CA issued for a send that was refused")
        // With --queue the same send issues, seals and queues.
        try tools.check("dcprovision", send + ["--queue"])
        #expect(((try? readText(index)) ?? "") != before)
    }
}
