import Foundation
import TestSupport
import Testing

/// A fenced block of a Markdown file: its info string (`sh`, `text`, …), its text, where it starts.
struct FencedBlock: Sendable, CustomStringConvertible {
    var file: String
    /// The line of the opening fence, 1-based.
    var line: Int
    var info: String
    var body: String

    var description: String { "\(file):\(line) (```\(info))" }

    /// The blocks of a Markdown file, in order. A fence is a line that starts with three
    /// backticks; its info string is the rest of that line.
    static func blocks(in file: String) throws -> [FencedBlock] {
        let lines = try readText(Repository.root + "/" + file).split(separator: "\n", omittingEmptySubsequences: false)
        var blocks: [FencedBlock] = []
        var open: (line: Int, info: String, body: [Substring])?
        for (index, line) in lines.enumerated() {
            if line.hasPrefix("```") {
                if let current = open {
                    blocks.append(
                        FencedBlock(
                            file: file, line: current.line, info: current.info,
                            body: current.body.joined(separator: "\n") + "\n"))
                    open = nil
                } else {
                    open = (index + 1, line.dropFirst(3).trimmingCharacters(in: .whitespaces), [])
                }
            } else {
                open?.body.append(line)
            }
        }
        if let open { throw ReadmeFailure("\(file):\(open.line): a fence that is never closed") }
        return blocks
    }
}

struct ReadmeFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The Markdown files whose blocks are checked. Fences: ```sh blocks run (this suite); ```sh
/// scripts-test blocks are run by scripts/test, because they build a package and cannot run
/// inside the suite, which holds the build; ```text and ```json blocks show no command.
enum Documents {
    /// Every Markdown file of the repository a reader meets first, and the references.
    static let all: [String] = {
        var files = ["README.md", "Plugins/README.md"]
        for folder in ["Samples", "docs"] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: Repository.root + "/" + folder)) ?? []
            for name in names.sorted() {
                if name.hasSuffix(".md") { files.append("\(folder)/\(name)") }
                if FileManager.default.fileExists(atPath: Repository.root + "/\(folder)/\(name)/README.md") {
                    files.append("\(folder)/\(name)/README.md")
                }
            }
        }
        return files
    }()

    /// The front door, run by scripts/test: `swift run` would build inside the suite.
    static let frontDoor = "swift run dcprovision demo\nscripts/test\n"

    static let allowedInfo: Set<String> = ["sh", "sh scripts-test", "text", "json", "mermaid"]

    /// The blocks this suite runs: every ```sh block but README.md's first.
    static func runnable(_ file: String) throws -> [FencedBlock] {
        let blocks = try FencedBlock.blocks(in: file).filter { $0.info == "sh" }
        return file == "README.md" ? Array(blocks.dropFirst()) : blocks
    }
}

/// A view of the checkout for the blocks: every top-level entry of the repository as a symbolic
/// link, and `.build/debug` pointing at the executables this test run built, so that the blocks'
/// `export PATH="$PWD/.build/debug:$PATH"` finds them whatever the scratch path.
func checkoutView(in sandbox: Sandbox) throws -> String {
    let view = sandbox.file("checkout")
    try FileManager.default.createDirectory(atPath: view + "/.build", withIntermediateDirectories: true)
    for name in try FileManager.default.contentsOfDirectory(atPath: Repository.root) where !name.hasPrefix(".") {
        try FileManager.default.createSymbolicLink(
            atPath: view + "/" + name, withDestinationPath: Repository.root + "/" + name)
    }
    try FileManager.default.createSymbolicLink(atPath: view + "/.build/debug", withDestinationPath: Binaries.directory)
    return view
}

@Suite("Docs that run as written", .ownThreads, .timeLimit(.minutes(10)))
struct ReadmeTests {
    @Test("Every fence is sh, sh scripts-test, text, json or mermaid; README.md opens with the front door")
    func fences() throws {
        for file in Documents.all {
            for block in try FencedBlock.blocks(in: file) {
                #expect(Documents.allowedInfo.contains(block.info), "\(block)")
            }
        }
        let first = try #require(try FencedBlock.blocks(in: "README.md").first)
        #expect(first.info == "sh" && first.body == Documents.frontDoor, "\(first.body)")
        // Blocks that cannot run here are few and named: the vendor package's test, the plug-in.
        let deferred = try Documents.all.flatMap { try FencedBlock.blocks(in: $0) }.filter {
            $0.info == "sh scripts-test"
        }
        #expect(deferred.map(\.file) == ["README.md", "Samples/VendorProvider/README.md"], "\(deferred)")
    }

    @Test(
        "The ```sh blocks run top to bottom in one shell, from the checkout, in a fresh sandbox",
        arguments: Documents.all.filter { ((try? Documents.runnable($0)) ?? []).isEmpty == false })
    func runs(file: String) throws { try Self.runBlocks(file, session: true) }

    /// A login with no desktop session (SSH without systemd-logind, a container, CI): no
    /// `XDG_RUNTIME_DIR`, no `XDG_*` at all, no D-Bus; only what the test's own session keyring
    /// gives. `TMPDIR` is kept so that `mktemp` stays inside the sandbox (the issue's `env -i
    /// HOME=$HOME PATH=$PATH bash --norc`, plus that).
    @Test("README.md's blocks run as written in env -i HOME=$HOME PATH=$PATH bash --norc (no runtime directory)")
    func runsWithoutSession() throws { try Self.runBlocks("README.md", session: false) }

    static func runBlocks(_ file: String, session: Bool) throws {
        let blocks = try Documents.runnable(file)
        var sandbox = try Sandbox("readme")
        defer { sandbox.remove() }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        try FileManager.default.createDirectory(atPath: sandbox.file("tmp"), withIntermediateDirectories: true)
        // mktemp -d stays inside the sandbox; the tools are found even before the blocks set PATH.
        sandbox.extra = ["TMPDIR": sandbox.file("tmp"), "PATH": Binaries.directory + ":" + path]
        let checkout = try checkoutView(in: sandbox)
        var script = "exec 2>&1\n"
        for (index, block) in blocks.enumerated() {
            script += "printf '\\n@@@ block %d\\n' \(index)\n" + block.body
        }
        let scriptFile = try sandbox.write("blocks.sh", script)
        let result =
            session
            ? try sandbox.run(
                "/bin/bash", ["-euo", "pipefail", scriptFile], currentDirectory: checkout, timeout: 480)
            : try sandbox.run(
                "/usr/bin/env",
                [
                    "-i", "HOME=" + sandbox.home, "PATH=" + Binaries.directory + ":" + path,
                    "TMPDIR=" + sandbox.file("tmp"), "/bin/bash", "--norc", "-euo", "pipefail", scriptFile,
                ], currentDirectory: checkout, timeout: 480)
        if result.status != 0 {
            // The block that failed is the last one that started; its output follows its marker.
            let output = result.stdoutText + result.stderrText
            let marker = output.range(of: "\n@@@ block ", options: .backwards)
            let failed = marker.flatMap { Int(output[$0.upperBound...].prefix { $0.isNumber }) } ?? 0
            let blockOutput = marker.map { String(output[$0.upperBound...].drop { $0 != "\n" }) } ?? output
            Issue.record(
                """
                \(blocks[failed]) failed with exit status \(result.status)\(result.timedOut ? " (timed out)" : ""):
                \(blocks[failed].body)
                ---- its output:
                \(blockOutput)
                """)
        }
    }

    /// The subcommands and flags `--help` shows, for a command path, recursively.
    static func helpSurface(_ tool: String, _ path: [String] = []) throws -> (commands: [[String]], flags: Set<String>)
    {
        let result = try run(Binaries.directory + "/" + tool, path + ["--help"], timeout: 30)
        guard result.status == 0 else { throw ProcessFailure(command: [tool] + path + ["--help"], result: result) }
        var commands: [[String]] = [path]
        var flags = Set<String>()
        var section = ""
        for line in result.stdoutText.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty { section = "" }
            if let first = line.first, first.isUppercase, line.hasSuffix(":") {
                section = String(line)
                continue
            }
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { continue }
            let words = line.dropFirst(2).split(separator: " ", omittingEmptySubsequences: true)
            guard let word = words.first else { continue }
            if section == "SUBCOMMANDS:" {
                // ArgumentParser's own `help` command is not ours to document.
                guard word != "help" else { continue }
                let child = try helpSurface(tool, path + [String(word)])
                commands += child.commands
                flags.formUnion(child.flags)
            } else if word.hasPrefix("-") {
                for name in words.prefix(2) where name.hasPrefix("-") {
                    flags.insert(String(name.trimmingCharacters(in: CharacterSet(charactersIn: ","))))
                }
            }
        }
        return (commands, flags)
    }

    @Test("Every command and every flag that --help shows, on every tool, is in docs/CLI.md or README.md")
    func helpIsDocumented() throws {
        let docs = try readText(Repository.root + "/docs/CLI.md") + readText(Repository.root + "/README.md")
        func documented(_ text: String) throws -> Bool {
            let escaped = NSRegularExpression.escapedPattern(for: text)
            let pattern = try NSRegularExpression(pattern: "(?<![A-Za-z0-9-])\(escaped)(?![A-Za-z0-9-])")
            return pattern.firstMatch(in: docs, range: NSRange(docs.startIndex..., in: docs)) != nil
        }
        for (tool, least) in [("dcprovision", 9), ("dcclient", 9), ("dcverify", 2)] {
            let surface = try Self.helpSurface(tool)
            #expect(surface.commands.count >= least, "\(tool): \(surface.commands)")
            for command in surface.commands {
                let name = ([tool] + command).joined(separator: " ")
                #expect(try documented(name), "\(name) is not in docs/CLI.md or README.md")
            }
            #expect(surface.flags.contains("--version") && surface.flags.contains("--help"))
            for flag in surface.flags.sorted() {
                #expect(try documented(flag), "\(tool): \(flag) is not in docs/CLI.md or README.md")
            }
        }
    }
}
