import Foundation

/// Virtual PIV cards in virtual readers of a real `pcscd`, for the card path as a real card takes
/// it: OpenSC's PIV driver, APDUs, a PIN counter kept by the card, a card pulled out.
///
/// `Tests/VirtualPIVCard/virtual-card` starts a `pcscd` of our own (in its own mount namespace, so
/// a system `pcscd` is neither used nor disturbed; that needs root) with `vpcd` readers, and one
/// emulator per card (`virtual_piv_card.py`, our NIST SP 800-73-4 card). Programs reach that
/// `pcscd` through `PCSCLITE_CSOCK_NAME` in ``environment``. The cards are provisioned with
/// OpenSC's own tools (`piv-tool`), the keys made on the card, the certificates issued by the
/// fixtures' test CA. Each instance is its own set of readers and cards, so tests that break a card
/// (a blocked PIN, a card pulled out) run in parallel with the rest.
public final class VirtualCards: Sendable {
    /// The directory holding pcscd's socket, the cards' state and control sockets, and the logs.
    public let directory: TemporaryDirectory
    /// The `PCSCLITE_CSOCK_NAME` that reaches this instance's pcscd.
    public let socket: String
    /// How many readers hold a card (cards 1…`cards`; readers come in pairs).
    public let cards: Int

    /// The script that starts, provisions and stops the readers and cards.
    public static let script = Repository.root + "/Tests/VirtualPIVCard/virtual-card"
    /// The user PIN the cards are made with.
    public static let pin = "123456"
    /// The PUK the cards are made with.
    public static let puk = "12345678"
    /// The token label OpenSC gives these cards: the cardholder's name, from the common name of
    /// the PIV authentication certificate `provision` loads.
    public static let label = "PIV Cardholder"
    /// The manufacturer OpenSC reports for every PIV card: a URI for "the PIV card".
    public static let manufacturer = "piv_II"

    /// Starts pcscd and `cards` emulators (each answer delayed by `delayMilliseconds`).
    public init(_ label: String = "cards", cards: Int = 1, delayMilliseconds: Int? = nil) throws {
        directory = try TemporaryDirectory(label)
        directory.removeAtExit()
        self.cards = cards
        socket = directory.file("run/pcscd/pcscd.comm")
        var arguments = ["start", directory.path, "--readers", String(cards)]
        if let delayMilliseconds { arguments += ["--delay-ms", String(delayMilliseconds)] }
        try Self.script(arguments, timeout: 60)
    }

    deinit { stop() }

    /// The variables a child needs to reach this pcscd (and nothing else of the card).
    public var environment: [String: String] { ["PCSCLITE_CSOCK_NAME": socket] }

    /// Makes keys on card `card` with piv-tool and loads certificates for them issued by the
    /// fixtures' CA: `slots` as the script takes them (`9a:p256,9c:p384,…`), or its default set.
    public func provision(card: Int = 1, slots: String? = nil) throws {
        let ca = OpenSSLFixtures.shared.ca
        var arguments = [
            "provision", directory.path, "--card", String(card), "--ca-cert", ca.certificate, "--ca-key", ca.key,
        ]
        if let slots { arguments += ["--slots", slots] }
        try Self.script(arguments, timeout: 240)
    }

    /// Sends one line to card `card`'s emulator and returns its one-line answer: `remove`,
    /// `insert`, `delay MS`, `remove-on INS [SKIP] [lc=N]`, `stats`, `reset-stats`.
    @discardableResult
    public func control(_ command: String, card: Int = 1) throws -> String {
        let path = directory.file("card-\(card).control")
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw Failure(description: "connect \(path): errno \(errno)") }
        let line = Array((command + "\n").utf8)
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1, byte != 0x0A { answer.append(byte) }
        let text = String(decoding: answer, as: UTF8.self)
        guard !text.hasPrefix("error") else { throw Failure(description: "card \(card): \(command): \(text)") }
        return text
    }

    /// Takes card `card` out of its reader and waits until pcscd sees the reader empty.
    public func remove(card: Int = 1) throws {
        try control("remove", card: card)
        try waitForCards(present: cards - 1)
    }

    /// Puts card `card` back and waits until pcscd sees it (about a third of a second).
    public func insert(card: Int = 1) throws {
        try control("insert", card: card)
        try waitForCards(present: cards)
    }

    /// Waits, at most 15 s, until `opensc-tool -l` shows `present` readers holding a card.
    public func waitForCards(present: Int) throws {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            let listed = try run(
                "opensc-tool", ["-l"], environment: environment.merging(["HOME": directory.path]) { $1 })
            let holding = listed.stdoutText.split(separator: "\n").filter { $0.contains(" Yes ") }.count
            if holding == present { return }
            usleep(100_000)
        }
        throw Failure(description: "pcscd does not show \(present) card(s) in its readers")
    }

    /// The APDUs card `card` answered since the last `reset-stats`: the total and by INS (hex).
    public func apduCount(card: Int = 1) throws -> (total: Int, byINS: [String: Int]) {
        let answer = try control("stats", card: card)
        let json = answer.hasPrefix("ok ") ? String(answer.dropFirst(3)) : answer
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] ?? [:]
        guard let total = object["total"] as? Int, let byINS = object["by_ins"] as? [String: Int] else {
            throw Failure(description: "card \(card): stats: not the emulator's counts: \(answer)")
        }
        return (total, byINS)
    }

    /// The emulator's APDU log for card `card` (headers and status words, never secret data).
    public func apduLog(card: Int = 1) -> String {
        (try? String(contentsOfFile: directory.file("card-\(card).apdu.log"), encoding: .utf8)) ?? ""
    }

    /// Stops the emulators and pcscd and waits for them.
    public func stop() {
        _ = try? Self.script(["stop", directory.path], timeout: 30)
    }

    /// A failure of the fixture itself (not of the code under test).
    public struct Failure: Error, CustomStringConvertible {
        /// What went wrong.
        public var description: String
    }

    @discardableResult
    static func script(_ arguments: [String], timeout: TimeInterval) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment.filter { ["PATH", "LANG", "TMPDIR"].contains($0.key) }
        // OpenSC and piv-tool keep their caches under HOME: the instance's own directory.
        environment["HOME"] = arguments.count > 1 ? arguments[1] : NSTemporaryDirectory()
        let result = try run("/bin/bash", [script] + arguments, environment: environment, timeout: timeout)
        guard result.status == 0 else {
            throw Failure(
                description: "virtual-card \(arguments.first ?? ""): exit \(result.status): \(result.stderrText)")
        }
        return result
    }
}
