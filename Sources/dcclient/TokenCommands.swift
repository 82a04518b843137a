import ArgumentParser
import AuthTokens
import CommandLineSupport
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// `dcclient token`: an auth token for an application server's challenge.
    struct Token: AsyncParsableCommand, OutputCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print an auth token bound to an application server's challenge.",
            discussion: """
                The app sends the token to its application server, which asks a verification \
                service (dcverify) whether it is genuine and gets back the challenge, the server \
                name and the user. Only for an authorized app whose secure services are available \
                (exit 77 when not authorized, 69 when locked). The challenge and the server name \
                may be empty and must be printable ASCII (codes 32-126).
                """)
        @Option(help: "The challenge the application server chose (may be empty).") var challenge: String
        @Option(help: "The name of the server the token is for (may be empty).") var server: String = ""
        @OptionGroup var format: JSONOutputOptions
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
            let token = try await ManagedClient().authToken(challenge: challenge, serverName: server)
            guard format.json else { return StandardStream.output.write(token.compact + "\n") }
            let identity = token.delegation.claims
            try printJSON(
                "authToken",
                View(
                    token: token.compact, challenge: token.claims.challenge, serverName: token.claims.serverName,
                    userID: identity.userID, appID: identity.appID, containerID: identity.containerID,
                    version: token.claims.version, creationTime: token.claims.issuedAt,
                    expires: token.claims.expires))
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
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let client = ManagedClient()
            _ = try client.setUpScheme()
            StandardStream.output.write(client.sharedUserID() + "\n")
        }
    }
}
