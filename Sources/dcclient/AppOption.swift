import ArgumentParser
import DerivedCredentials
import ManagedClient

/// `--app ID`: the managed app (its container) a command acts for. Without it, the
/// `DCCLIENT_APP` environment variable names the app; with neither, the only app set up is
/// meant (several are a usage error listing them), except by `check`, which then checks each.
struct AppOption: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The managed app to act for (default: $DCCLIENT_APP, else the only app set up; check: every app).",
            valueName: "id"))
    var app: ClientID?

    /// The client of the app the options name.
    func client() throws -> ManagedClient { try ManagedApps().choose(app) }

    /// The clients of the apps a command that serves each in turn acts for: the app the options
    /// name, else every app set up.
    func clients() throws -> [ManagedClient] { try ManagedApps().chooseEvery(app) }
}
