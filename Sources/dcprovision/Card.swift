import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import Foundation
import PKCS11Provider

/// `dcprovision card`: a PIV card's own chores, spoken to through PC/SC (the rest of the card path
/// goes through PKCS#11): the PIN's tries left, a new PIN or PUK, the PIN unblocked with the PUK.
struct Card: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "card",
        abstract: "A PIV card's PIN and PUK through PC/SC: tries left, change, unblock.",
        subcommands: [CardStatus.self, ChangePIN.self, ChangePUK.self, UnblockPIN.self])
}

/// `--reader NAME`, or the one reader that holds a PIV card.
struct ReaderOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The PC/SC reader (default: the one holding a PIV card).", valueName: "name"))
    var reader: String?

    /// The card the options name; with none, the only PIV card in any reader.
    func card() throws -> PIVCard {
        if let reader { return PIVCard(reader: reader) }
        let (readers, cards) = try PIVCard.inReaders()
        guard !readers.isEmpty else { throw DCError(.noCard, "no PC/SC reader is connected (pcscd sees none)") }
        guard let first = cards.first else {
            throw DCError(.noCard, "no PIV card in any of the \(readers.count) reader\(readers.count == 1 ? "" : "s")")
        }
        guard cards.count == 1 else {
            throw DCError(
                .multipleObjects,
                "\(cards.count) readers hold a PIV card: "
                    + cards.map { "'\($0.reader.escapingControlCharacters)'" }.joined(separator: ", "),
                hint: "name one with --reader NAME")
        }
        return first
    }
}

struct CardStatus: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Each reader: its card, and the PIN's tries left (asked without using one).")
    @OptionGroup var readerOptions: ReaderOptions
    @OptionGroup var format: JSONOutputOptions
    @OptionGroup var output: OutputOptions

    /// One reader, as `--json` shows it.
    struct Reader: Codable {
        var reader: String
        /// `piv`, `not-piv` or `empty`.
        var card: String
        var pinTriesLeft: Int?
        var pinBlocked: Bool?
        var pinVerified: Bool?
        /// Why the card's state is `unknown`.
        var problem: String?
    }

    func run() async throws {
        let readers = try readerOptions.reader.map { [$0] } ?? PIVCard.readers()
        guard !readers.isEmpty else { throw DCError(.noCard, "no PC/SC reader is connected (pcscd sees none)") }
        let states = try readers.map { name -> Reader in
            do {
                let counter = try PIVCard(reader: name).pinCounter()
                var state = Reader(reader: name, card: "piv")
                switch counter {
                case .triesLeft(let n): state.pinTriesLeft = n
                case .blocked: (state.pinTriesLeft, state.pinBlocked) = (0, true)
                case .verified: state.pinVerified = true
                }
                return state
            } catch let error as DCError where error.code == .noCard {
                return Reader(reader: name, card: "empty")
            } catch let error as DCError where error.code == .noSuchObject && readerOptions.reader == nil {
                return Reader(reader: name, card: "not-piv")
            } catch let error as DCError where readerOptions.reader == nil {
                // One odd card does not hide the others.
                var state = Reader(reader: name, card: "unknown")
                state.problem = error.message
                return state
            }
        }
        if format.json { return try printJSON("card-status", states) }
        Console.print(
            states.map { state in
                let what: String
                switch state.card {
                case "empty": what = "no card"
                case "not-piv": what = "a card that is not a PIV card"
                case "unknown": what = "a card whose state is unknown (\(state.problem ?? "no answer"))"
                default:
                    let pin =
                        state.pinBlocked == true
                        ? "PIN blocked (unblock it with the PUK)"
                        : state.pinVerified == true
                            ? "PIN verified" : "PIN \(PIVCard.Counter.triesLeft(state.pinTriesLeft ?? 0))"
                    what = "PIV card; \(pin); the PUK's tries show only when it is used"
                }
                return "\(state.reader): \(what)"
            }.joined(separator: "\n"))
        if !states.contains(where: { $0.card == "piv" }) {
            throw DCError(.noCard, "no PIV card in any of the \(states.count) reader\(states.count == 1 ? "" : "s")")
        }
    }
}

struct ChangePIN: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "change-pin", abstract: "Change the PIN: the current one (one try) and the new one.")
    @OptionGroup var readerOptions: ReaderOptions
    @OptionGroup(title: "PIN") var pin: PINOptions
    @OptionGroup(title: "New secrets") var secrets: CardSecretOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let card = try readerOptions.card()
        let subject = card.reader
        guard let current = try pin.pinSource().passphrase(for: subject) else {
            throw DCError(.passphraseRequired, "the current PIN is needed", subject: subject, remedy: .givePIN)
        }
        let new = try secrets.newPIN(for: subject)
        let allowFinalTry = pin.allowFinalPinTry
        try await TokenThread.run(distrustingRemoval: false) {
            try card.changePIN(old: current, new: new, allowFinalTry: allowFinalTry)
        }
        Console.say("\(subject): the PIN was changed")
    }
}

struct ChangePUK: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "change-puk", abstract: "Change the PUK: the current one (one try) and the new one.")
    @OptionGroup var readerOptions: ReaderOptions
    @OptionGroup(title: "New secrets") var secrets: CardSecretOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let card = try readerOptions.card()
        let (old, new) = (try secrets.puk(for: card.reader), try secrets.newPUK(for: card.reader))
        try await TokenThread.run(distrustingRemoval: false) { try card.changePUK(old: old, new: new) }
        Console.say("\(card.reader): the PUK was changed")
    }
}

struct UnblockPIN: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "unblock", abstract: "Unblock the PIN with the PUK (one PUK try) and set a new PIN.")
    @OptionGroup var readerOptions: ReaderOptions
    @OptionGroup(title: "New secrets") var secrets: CardSecretOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let card = try readerOptions.card()
        let (puk, new) = (try secrets.puk(for: card.reader), try secrets.newPIN(for: card.reader))
        try await TokenThread.run(distrustingRemoval: false) { try card.unblockPIN(puk: puk, newPIN: new) }
        Console.say("\(card.reader): the PIN was unblocked and set")
    }
}
