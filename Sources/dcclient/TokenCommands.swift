import ArgumentParser
import AuthTokens
import CommandLineSupport
import DerivedCredentials
import Foundation
import IdentityTokens
import ManagedClient

extension DCClient {
    /// `dcclient token`: an auth token for an application server's challenge.
    struct Token: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "token",
            abstract: "Print an auth token bound to an application server's challenge.",
            discussion: """
                The app sends the token to its application server, which asks a verification \
                service (dcverify) whether it is genuine and gets back the challenge, the server \
                name and the user. Only for an authorized app whose secure services are available \
                (exit 77 when not authorized, 69 when locked). The challenge and the server name \
                may be empty and must be printable ASCII (codes 32-126).
                """)
        @Option(
            help:
                "The challenge the application server chose (may be empty; one that starts with '-' is given as --challenge=-C)."
        ) var challenge: String
        @Option(help: "The name of the server the token is for (may be empty).") var server: String = ""
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        /// What `token --json` prints.
        struct View: Encodable {
            var token: String
            var challenge: String
            var serverName: String
            var userID: String
            var appID: String
            var containerID: String
            var version: Int
            var creationTime: Int64
            var expires: Int64
        }

        func run() async throws {
            let token = try await try app.client().authToken(challenge: challenge, serverName: server)
            let identity = token.delegation.claims
            try format.printToken(token.compact, as: "authToken") {
                View(
                    token: token.compact, challenge: token.claims.challenge, serverName: token.claims.serverName,
                    userID: identity.userID, appID: identity.appID, containerID: identity.containerID,
                    version: token.claims.version, creationTime: token.claims.issuedAt,
                    expires: token.claims.expires)
            }
        }
    }

    /// `dcclient shared-user-id`: the id every managed app of this user on this device shares.
    struct SharedUserIDCommand: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "shared-user-id",
            abstract: "Print the shared user id: the same for every managed app of this user on this device.",
            discussion: """
                Not reversible to the user's name. Prints an empty line when it cannot be computed \
                (no delegation from the provider yet, or no /etc/machine-id).
                """)
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = try app.client()
            _ = try client.setUpScheme()
            StandardStream.output.write(client.sharedUserID() + "\n")
        }
    }

    /// `dcclient jwt`: an identity JWT for a relying party.
    struct JWT: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            commandName: "jwt",
            abstract: "Print an identity JWT (ES256, signed by the provider) for a relying party.",
            discussion: """
                The token names the user (sub) for the relying party --audience (aud) with --scope; \
                it is cached, sealed in the store, until it expires (an hour), and --refresh asks \
                the provider for a new one. Relying parties verify it against the JWKS dcverify \
                serves at /.well-known/jwks.json. Only for an authorized app whose secure services \
                are available (exit 77 when not authorized, 69 when locked).
                """)
        @Option(
            help: ArgumentHelp(
                "The relying party's client id (OAuth client_id): the token's audience (printable ASCII).",
                valueName: "client-id"))
        var audience: String
        @Option(help: "The scope the relying party may use (printable ASCII).") var scope: String
        @Flag(help: "Ask the provider for a new token even if a cached one is still valid.") var refresh = false
        @OptionGroup var format: JSONOutputOptions
        @OptionGroup var app: AppOption
        @OptionGroup var output: OutputOptions

        /// What `jwt --json` prints.
        struct View: Encodable {
            var token: String
            var issuer: String
            var subject: String
            var audience: String
            var scope: String
            var issuedAt: Int64
            var expires: Int64
            var keyID: String
        }

        func run() async throws {
            let token = try await try app.client().identityToken(clientID: audience, scope: scope, refresh: refresh)
            try format.printToken(token.compact, as: "identityToken") {
                View(
                    token: token.compact, issuer: token.claims.issuer, subject: token.claims.subject,
                    audience: token.claims.audience, scope: token.claims.scope,
                    issuedAt: Int64(token.claims.issuedAt.timeIntervalSince1970),
                    expires: Int64(token.claims.expires.timeIntervalSince1970), keyID: token.keyID)
            }
        }
    }
}

extension JSONOutputOptions {
    /// Prints a token: its compact form alone on a line, or, with `--json`, the document `name`
    /// that `view` makes of it.
    func printToken(_ compact: String, as name: String, _ view: () -> some Encodable) throws {
        guard json else { return StandardStream.output.write(compact + "\n") }
        try printJSON(name, view())
    }
}
