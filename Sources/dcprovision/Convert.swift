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
            output directory. Every input is read and checked first: if any is refused, nothing is written.
            """
    )

    @Argument(help: ArgumentHelp("Certificate, key or PKCS#12 files.", valueName: "input"))
    var inputs: [String] = []

    @OptionGroup(title: "Or a source (writes <tag>.cert.der, <tag>.key.der, chain.pem, manifest.json)")
    var source: SourceOptions<PINOptions>

    @Option(help: ArgumentHelp("Directory to write into (created with mode 0700 if missing).", valueName: "dir"))
    var outDir: String

    @Flag(help: "Replace output files that already exist.")
    var force = false

    @OptionGroup var passphrase: PromptingPassphraseOptions
    @OptionGroup var global: GlobalOptions

    func validate() throws {
        if inputs.isEmpty == source.isEmpty { throw ValidationError("give input files or a source, not both") }
        try source.requireRevocationFlagsOnlyWithDerive("convert")
    }

    @OptionGroup var output: OutputOptions

    func run() async throws {
        global.bootstrapLogging()
        var outputs = AtomicFileSet(directory: outDir)
        if source.isEmpty {
            let reader = CredentialReader(passphrase: try passphrase.source())
            for (index, input) in inputs.enumerated() {
                Console.progress("reading \(index + 1)/\(inputs.count): \(input)")
                let material = try reader.read(file: input)
                try ConversionOutputs.add(material, stem: ConversionOutputs.stem(of: input), to: &outputs)
            }
        } else {
            try ConversionOutputs.add(
                try await source.provide(passphrase: passphrase), format: .der, to: &outputs)
        }
        try outputs.commitCreatingDirectory(replacingExisting: force)
        // One write for every path, not one per file.
        if !outputs.names.isEmpty {
            Console.print(
                outputs.names.map { (outDir as NSString).appendingPathComponent($0).escapingControlCharacters }
                    .joined(separator: "\n"))
        }
    }
}
