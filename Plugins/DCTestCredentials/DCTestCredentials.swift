import Foundation
import PackagePlugin

/// `swift package --allow-writing-to-package-directory dc-test-credentials --out-dir Fixtures`
///
/// Mints a four-tag test credential into a folder of the package, from a test CA: one
/// `<tag>.pem` per entry (certificate + PKCS#8 key, 0600), `chain.pem` and `manifest.json` (read
/// it back with `dcprovision inspect --manifest Fixtures/manifest.json`). The CA lives in the
/// plug-in's work directory unless `--ca DIR` names a persistent one.
///
/// Options: `--out-dir DIR` (default `Fixtures/credential`), `--ca DIR`, `--key-algorithm p256|p384|
/// rsa2048|rsa3072`, `--common-name NAME`, `--escrow-history N`, `--format pem|der` (default pem).
/// The names are those of `dcprovision testca issue`; `--output` and `--algorithm`, the former
/// names, still work.
@main
struct DCTestCredentials: CommandPlugin {
    func performCommand(context: PluginContext, arguments: [String]) async throws {
        var extractor = ArgumentExtractor(arguments)
        // Each value under its name or its former name (--output, --algorithm), the last one given.
        let output =
            (extractor.extractOption(named: "output") + extractor.extractOption(named: "out-dir")).last
            ?? "Fixtures/credential"
        let caOption = extractor.extractOption(named: "ca").last
        let algorithm =
            (extractor.extractOption(named: "algorithm") + extractor.extractOption(named: "key-algorithm")).last
        let commonName = extractor.extractOption(named: "common-name").last
        let escrowHistory = extractor.extractOption(named: "escrow-history").last
        let format = extractor.extractOption(named: "format").last ?? "pem"
        guard extractor.remainingArguments.isEmpty else {
            throw PluginError("unknown arguments: \(extractor.remainingArguments.joined(separator: " "))")
        }

        let tool = try buildDCProvision()
        let packageDirectory = context.package.directoryURL
        let outputURL =
            output.hasPrefix("/") ? URL(fileURLWithPath: output) : packageDirectory.appendingPathComponent(output)
        let caURL =
            caOption.map { $0.hasPrefix("/") ? URL(fileURLWithPath: $0) : packageDirectory.appendingPathComponent($0) }
            ?? context.pluginWorkDirectoryURL.appendingPathComponent("testca")

        if !FileManager.default.fileExists(atPath: caURL.appendingPathComponent("testca.json").path) {
            var initArguments = ["testca", "init", caURL.path]
            if let algorithm { initArguments += ["--key-algorithm", algorithm] }
            try run(tool, initArguments)
        }
        var issueArguments = [
            "testca", "issue", caURL.path, "--out-dir", outputURL.path, "--format", format, "--force",
        ]
        if let algorithm { issueArguments += ["--key-algorithm", algorithm] }
        if let commonName { issueArguments += ["--common-name", commonName] }
        if let escrowHistory { issueArguments += ["--escrow-history", escrowHistory] }
        try run(tool, issueArguments)
        print("test credential written to \(outputURL.path) (test CA: \(caURL.path))")
    }

    /// Builds the dcprovision product (debug) and returns its path. The plug-in asks for it here,
    /// when it runs, rather than declaring it as a tool: a declared tool is built for the host as a
    /// second copy of dcprovision and all it links, on every `swift build` of the package.
    func buildDCProvision() throws -> URL {
        let result = try packageManager.build(
            .product("dcprovision"), parameters: .init(configuration: .debug, logging: .concise))
        guard result.succeeded,
            let artifact = result.builtArtifacts.first(where: {
                $0.kind == .executable && $0.url.lastPathComponent == "dcprovision"
            })
        else {
            throw PluginError("building dcprovision failed:\n\(result.logText)")
        }
        return artifact.url
    }

    func run(_ tool: URL, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = tool
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw PluginError(
                "dcprovision \(arguments.prefix(2).joined(separator: " ")) exited with status \(process.terminationStatus)"
            )
        }
    }
}

struct PluginError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
