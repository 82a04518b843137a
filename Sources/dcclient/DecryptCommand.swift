import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// `dcclient decrypt`: opens a message encrypted to the client's credential, with its current
    /// encryption keys and the key history a renewal kept.
    struct Decrypt: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "decrypt",
            abstract: "Decrypt a message encrypted to this client's credential, to standard output.",
            discussion: """
                Reads CMS EnvelopedData or AuthEnvelopedData (DER, PEM or S/MIME, as \
                'openssl cms -encrypt' and mail clients make them) from FILE or standard input, \
                and opens it with the installed encryption key, the escrow key, or a retired \
                encryption key kept when a renewal replaced the credential. Only while secure \
                services are available (exit 69 when locked, 77 when not authorized); exit 65 \
                when no key opens it. On an error nothing is written.
                """)
        @Argument(help: "The encrypted message (default: standard input).") var file: String?
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let message = try BoundedInput.read(file, limit: EnvelopedMessage.defaultMaximumSize)
            let plaintext = try app.client().decrypt(message)
            _ = plaintext.withUnsafeBytes { StandardStream.output.write(bytes: $0) }
        }
    }
}
