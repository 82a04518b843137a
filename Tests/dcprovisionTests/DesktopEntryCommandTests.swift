import Foundation
import TestSupport
import Testing

/// The files under `sandbox`'s HOME (every XDG directory is there): regular files and links.
private func filesUnderHome(_ sandbox: Sandbox) -> [String] {
    let enumerator = FileManager.default.enumerator(atPath: sandbox.home)
    var found: [String] = []
    while let name = enumerator?.nextObject() as? String {
        var status = stat()
        if lstat(sandbox.home + "/" + name, &status) == 0 && (status.st_mode & S_IFMT) != S_IFDIR { found.append(name) }
    }
    return found.sorted()
}

@Suite("The desktop entries dcprovision and dcclient write", .ownThreads, .timeLimit(.minutes(3)))
struct DesktopEntryCommandTests {
    @Test(
        "register and init write desktop entries desktop-file-validate accepts without a word, with an unquoted Exec")
    func entriesValidate() throws {
        let tools = try Tools("desktop-validate")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            [
                "register", "--provider-scheme", "org.example.provider", "--brand", "Example \\ Provider", "--testca",
                "ca",
            ])
        try tools.setUpClient()
        let applications = tools.sandbox.dataHome + "/applications"
        let entries = try FileManager.default.contentsOfDirectory(atPath: applications).sorted()
        #expect(entries == ["dc-org.example.dcclient.desktop", "dc-org.example.provider.desktop"])
        for entry in entries {
            let validated = try tools.sandbox.run("desktop-file-validate", [applications + "/" + entry])
            #expect(
                validated.status == 0 && validated.stdoutText.isEmpty && validated.stderrText.isEmpty,
                "\(entry): \(validated.stdoutText)\(validated.stderrText)")
            let text = try readText(applications + "/" + entry)
            #expect(!text.contains("\""), "\(text)")
        }
        #expect(
            try readText(applications + "/dc-org.example.provider.desktop").contains(
                "\nName=dcprovision (Example \\\\ Provider)\n"))
    }

    @Test(
        "A brand with a newline, a control character or edge spaces is exit 64 in one line, before anything is written",
        arguments: [
            "Evil\nExec=/bin/sh -c id", "Tab\there", "Bell\u{07}", "Delete\u{7F}", "C1\u{85}", "Line\u{2028}separator",
            "", " padded", "padded ",
        ])
    func hostileBrand(brand: String) throws {
        let tools = try Tools("desktop-brand")
        defer { tools.sandbox.remove() }
        try tools.check("dcprovision", ["testca", "init", "ca"])
        let result = try tools.run(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", brand, "--testca", "ca"])
        #expect(result.status == 64, "\(result.stderrText)")
        #expect(result.stderrText.hasPrefix("dcprovision: ") && result.stderrText.filter { $0 == "\n" }.count == 1)
        #expect(result.stderrText.hasSuffix("\n"))
        #expect(filesUnderHome(tools.sandbox) == [])
    }

    @Test(
        "A client id outside the delivery grammar, or a scheme outside RFC 3986's, is exit 64 in one line, before anything is written",
        arguments: [
            ["--app", "Upper"], ["--app=-lead"], ["--app", "under_score"],
            ["--app", String(repeating: "a", count: 65)], ["--app", "new\nline"],
            ["--client-scheme", "1digit.first"], ["--client-scheme", "org.example\ncl"],
        ])
    func hostileClientValues(values: [String]) throws {
        let tools = try Tools("desktop-client")
        defer { tools.sandbox.remove() }
        try tools.sandbox.write("pass.txt", "correct horse\n")
        var arguments = ["init", "--provider-scheme", "org.example.provider", "--passphrase-file", "pass.txt"]
        if values[0] != "--client-scheme" { arguments += ["--client-scheme", "org.example.dcclient"] }
        let result = try tools.run("dcclient", arguments + values)
        #expect(result.status == 64, "\(result.stderrText)")
        #expect(result.stderrText.hasPrefix("dcclient: ") && result.stderrText.filter { $0 == "\n" }.count == 1)
        #expect(filesUnderHome(tools.sandbox) == [])
    }
}
