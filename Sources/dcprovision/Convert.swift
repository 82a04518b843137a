import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

struct Convert: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "convert",
        abstract: "Convert PEM, DER and PKCS#12 files to DER certificates and PKCS#8 DER keys.",
        discussion: """
            For each input STEM.EXT, writes STEM.cert.der (the certificate that matches the key), \
            STEM.2.cert.der… (further certificates) and STEM.key.der (PKCS#8, mode 0600) into the \
            output directory; --format pem writes .pem files instead, as openssl x509 and openssl pkey \
            print them, and --name-template changes the names ({stem}, {n}, {index}, {kind}, {format}). \
            --out FILE (or - for standard output) writes the one object the inputs hold instead; a \
            private key is never written to a terminal. Every input is read and checked first: if any \
            is refused, nothing is written.
            """
    )

    @Argument(help: ArgumentHelp("Certificate, key or PKCS#12 files.", valueName: "input"))
    var inputs: [String] = []

    @OptionGroup(title: "Or a source (writes <tag>.cert.der, <tag>.key.der, chain.pem, manifest.json)")
    var source: SourceOptions<PINOptions>

    @Option(help: ArgumentHelp("Directory to write into (created with mode 0700 if missing).", valueName: "dir"))
    var outDir: String?

    @Option(
        help: ArgumentHelp(
            "Write the one certificate or key the inputs hold to this file, or to standard output with -.",
            valueName: "file"))
    var out: String?

    @Option(help: ArgumentHelp("der (default) or pem.", valueName: "format"))
    var format: ConversionOutputs.Format?

    @Option(
        help: ArgumentHelp(
            "How input files' outputs are named (default {stem}{index}.{kind}.{format}).", valueName: "template"))
    var nameTemplate: String?

    /// `--name-template` as checked, or the default.
    private var template: ConversionOutputs.NameTemplate {
        get throws { try nameTemplate.map(ConversionOutputs.NameTemplate.init) ?? .default }
    }

    @Flag(help: "Replace output files that already exist.")
    var force = false

    @OptionGroup var passphrase: PromptingPassphraseOptions
    @OptionGroup var global: GlobalOptions

    func validate() throws {
        if inputs.isEmpty == source.isEmpty { throw ValidationError("give input files or a source, not both") }
        if (outDir == nil) == (out == nil) { throw ValidationError("give --out-dir or --out, not both") }
        if !source.isEmpty && (out != nil || nameTemplate != nil) {
            throw ValidationError("--out and --name-template are for input files; a source writes a directory")
        }
        do { _ = try template } catch let error as DCError { throw ValidationError(error.message) }
        try source.requireRevocationFlagsOnlyWithDerive("convert")
    }

    @OptionGroup var output: OutputOptions

    func run() async throws {
        global.bootstrapLogging()
        let format = format ?? .der
        var objects: [ConversionOutputs.Output] = []
        if source.isEmpty {
            let reader = CredentialReader(passphrase: try passphrase.source())
            let progress = ProgressLine("reading", total: inputs.count)
            defer { progress.finish() }
            for input in inputs {
                let material = try reader.read(file: input)
                objects += ConversionOutputs.outputs(
                    material, stem: ConversionOutputs.stem(of: input), format: format,
                    template: try template)
                progress.advance()
            }
            progress.finish()
        }
        if let out { return try write(objects, to: out) }
        let outDir = outDir ?? "."
        var outputs = AtomicFileSet(directory: outDir)
        if source.isEmpty {
            for object in objects { try outputs.add(object.name, object.contents, mode: object.mode) }
        } else {
            try ConversionOutputs.add(try await source.provide(passphrase: passphrase), format: format, to: &outputs)
        }
        try outputs.commitCreatingDirectory(replacingExisting: force)
        // A terminal gets a count when a list would scroll by; a pipe always gets every path.
        if outputs.names.count > Self.listedOnTerminal && StandardStream.output.isTerminal {
            return Console.print("\(outputs.names.count) files written into \(outDir.escapingControlCharacters)")
        }
        // One write for every path, not one per file.
        if !outputs.names.isEmpty {
            Console.print(
                outputs.names.map { (outDir as NSString).appendingPathComponent($0).escapingControlCharacters }
                    .joined(separator: "\n"))
        }
    }

    /// How many paths a terminal is shown before they are only counted.
    static let listedOnTerminal = 20

    /// `--out`: the one object, to `path` (atomically, as every output) or to standard output.
    private func write(_ objects: [ConversionOutputs.Output], to path: String) throws {
        guard objects.count == 1, let object = objects.first else {
            throw DCError(
                .usage, "--out writes one object, and the inputs hold \(objects.count)",
                hint: "give --out-dir to write them all, or one input with one certificate or key")
        }
        guard path == "-" else {
            var set = AtomicFileSet(
                directory: (path as NSString).deletingLastPathComponent.isEmpty
                    ? "." : (path as NSString).deletingLastPathComponent)
            try set.add((path as NSString).lastPathComponent, object.contents, mode: object.mode)
            try set.commitCreatingDirectory(replacingExisting: force)
            return Console.print(path.escapingControlCharacters)
        }
        if object.isPrivateKey && StandardStream.output.isTerminal {
            throw DCError(
                .secretOnTerminal, "a private key is not written to a terminal",
                hint: "redirect standard output to a file or a pipe, or give --out FILE")
        }
        switch object.contents {
        case .bytes(let bytes): _ = bytes.withUnsafeBytes { StandardStream.output.write(bytes: $0) }
        case .secret(let secret): _ = secret.withUnsafeBytes { StandardStream.output.write(bytes: $0) }
        }
    }
}
