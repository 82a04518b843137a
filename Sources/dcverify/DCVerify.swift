import ArgumentParser
import CommandLineSupport

@main
struct DCVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcverify",
        abstract: "The auth-token verification service that application servers call.",
        discussion: """
            An app server sends GET /verifyGDAuthToken with the token in the X-Good-GD-AuthToken header and \
            reads X-Good-GD-AuthResponseCode (100 OK for a genuine token) and the identity headers. \
            How do I run it: dcverify serve --issuers FILE --revocations FILE (the provider keeps both under \
            $XDG_STATE_HOME/dcprovision/verifier/) [--listen HOST:PORT], or dcverify serve --config FILE; \
            installed, the dcverify systemd unit runs it with /etc/dcverify/config.json \
            (PREFIX/share/dcverify/config.example.json is an example). \
            \(exitStatuses)
            """,
        version: Toolkit.version,
        subcommands: [Serve.self]
    )

    static let exitStatuses = """
        Exit status: 0 stopped by SIGTERM or SIGINT after the requests in flight finished, 64 usage (a bad \
        flag or configuration file), 65 a file that cannot be used (a certificate, key or JWKS), 66 a file \
        missing, 69 cannot listen (the address is in use or not this host's), 74 I/O error, 77 a file not \
        readable. \(Toolkit.documentation)/docs/CLI.md says more.
        """

    static func main() async {
        await Tool.main(Self.self, name: "dcverify", formerNames: FormerNames([:]))
    }
}
