import DerivedCredentials
import Foundation

/// A PIV card in a PC/SC reader, spoken to directly for what PKCS#11 does not say or do: how many
/// tries the PIN has left, changing the PIN or the PUK, and unblocking the PIN with the PUK
/// (NIST SP 800-73-4 VERIFY, CHANGE REFERENCE DATA and RESET RETRY COUNTER).
///
/// Everything else, certificates and keys, goes through PKCS#11 (OpenSC) as before. PC/SC is
/// reached through `libpcsclite.so.1`, loaded when first needed, so a machine without pcsc-lite
/// builds and runs everything but these chores. Every command is one APDU of at most 21 bytes
/// after the SELECT; the PIN and PUK bytes live in wiped buffers and never in an error.
public struct PIVCard: Sendable {
    /// The PC/SC reader the card is in, as `pcscd` names it (OpenSC's slot description).
    public let reader: String

    /// The card in `reader`.
    public init(reader: String) { self.reader = reader }

    /// What a PIN or a PUK has left.
    public enum Counter: Sendable, Equatable, CustomStringConvertible {
        /// The PIN was verified in this card session (no count is given then).
        case verified
        /// Wrong tries left before it blocks.
        case triesLeft(Int)
        /// Blocked: the card refuses it without checking it.
        case blocked

        /// "3 tries left", "1 try left", "blocked", "verified".
        public var description: String {
            switch self {
            case .verified: "verified"
            case .triesLeft(let n): n == 1 ? "1 try left" : "\(n) tries left"
            case .blocked: "blocked"
            }
        }
    }

    /// The PC/SC readers pcscd knows, in its order; none is an empty list.
    public static func readers() throws -> [String] {
        try PCSC.library().withContext { context in try context.readers() }
    }

    /// The readers pcscd sees, and the PIV cards in them (those that answer the PIV application's
    /// SELECT and the PIN counter), in pcscd's order.
    public static func inReaders() throws -> (readers: [String], cards: [PIVCard]) {
        let readers = try readers()
        return (readers, readers.map(PIVCard.init(reader:)).filter { (try? $0.pinCounter()) != nil })
    }

    /// The readers that hold a card now; nil when PC/SC cannot say (no pcscd, or the readers
    /// changed while they were being listed), which is not the same as "no card anywhere".
    public static func readersWithCard() -> Set<String>? {
        try? PCSC.library().withContext { try $0.readersWithCard() }
    }

    /// Resets the cards in `readers` (connect, then disconnect with SCARD_RESET_CARD), which ends
    /// every verification on them; best effort, for a process about to end in the middle of a
    /// card call. A card another program holds in a transaction is reset by pcscd when this
    /// process ends, if the transaction was this process's.
    /// At most `limit` is spent: a reader that does not answer in time is left to pcscd.
    public static func reset(_ readers: Set<String>, within limit: Duration = .seconds(1)) {
        guard !readers.isEmpty else { return }
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = try? PCSC.library().withContext { context in
                for reader in readers {
                    try? context.withCard(reader: reader, transaction: false, disposition: 1) { _ in }
                }
            }
            done.signal()
        }.start()
        _ = done.wait(timeout: .now() + .milliseconds(Int(limit.components.seconds * 1000)))
    }

    /// The PIN's tries left, asked with a VERIFY that carries no PIN (it costs no try).
    public func pinCounter() throws -> Counter {
        try withCard { card in try Self.counter(card.transmit(Self.verify(nil)), what: "PIN") }
    }

    /// Ends the PIN's verification on the card (VERIFY with P1 FF, SP 800-73-4 part 2, 3.2.1):
    /// OpenSC's logout from a PIV card sends nothing, and pcscd leaves a card as it is when a
    /// program lets go of it, so without this the next program would find the PIN verified.
    public func logOut() throws {
        let ended = try withCard { card in try Self.endVerification(card) }
        // A card older than SP 800-73-4 may not know P1 FF: a reset ends the verification instead.
        if !ended { Self.reset([reader]) }
    }

    /// VERIFY P1 FF on a connected card; false when the card does not take it.
    static func endVerification(_ card: PCSC.Card) throws -> Bool {
        var apdu: [UInt8] = [0x00, 0x20, 0xFF, 0x80]
        let status = try card.transmit(SecretBytes(consuming: &apdu))
        // 6A88: no verification to end (a card that keeps none), which is what was wanted.
        return status == 0x9000 || status == 0x6A88
    }

    /// Checks `pin` against the card (one try at most; none when the PIN is blocked, or on its
    /// final try without `allowFinalTry`).
    public func verifyPIN(_ pin: SecretBytes, allowFinalTry: Bool) throws {
        try withCard { card in
            try Self.refuseUnsafeTry(try Self.counter(card.transmit(Self.verify(nil)), what: "PIN"), allowFinalTry)
            try Self.check(card.transmit(try Self.verify(pin)), what: "PIN")
        }
    }

    /// Replaces the PIN: `old` is one try against its counter, as for a login.
    public func changePIN(old: SecretBytes, new: SecretBytes, allowFinalTry: Bool) throws {
        try withCard { card in
            try Self.refuseUnsafeTry(try Self.counter(card.transmit(Self.verify(nil)), what: "PIN"), allowFinalTry)
            try Self.check(card.transmit(try Self.twoSecrets(0x24, 0x80, old, new, what: "PIN")), what: "PIN")
            // A successful CHANGE REFERENCE DATA leaves the PIN verified (SP 800-73-4 part 2, 3.2.2).
            if try !Self.endVerification(card) { Self.reset([reader]) }
        }
    }

    /// Replaces the PUK: `old` is one try against the PUK's counter (which a PIV card does not
    /// tell in advance).
    public func changePUK(old: SecretBytes, new: SecretBytes) throws {
        try withCard { card in
            try Self.check(card.transmit(try Self.twoSecrets(0x24, 0x81, old, new, what: "PUK")), what: "PUK")
        }
    }

    /// Unblocks the PIN with the PUK and sets it to `newPIN`, whatever its counter was.
    public func unblockPIN(puk: SecretBytes, newPIN: SecretBytes) throws {
        try withCard { card in
            try Self.check(
                card.transmit(try Self.twoSecrets(0x2C, 0x80, puk, newPIN, what: "PUK")), what: "PUK", new: "PIN")
            if try !Self.endVerification(card) { Self.reset([reader]) }
        }
    }

    // MARK: - APDUs

    /// The PIV application's identifier, without its version (SP 800-73-4 part 1, 2.2).
    static let application: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08, 0x00, 0x00, 0x10, 0x00]

    /// A PIV PIN or PUK as the card wants it: 6 to 8 bytes padded with FF to 8. Checked here, so
    /// a malformed one never costs a try.
    static func padded(_ secret: SecretBytes, what: String, into buffer: inout [UInt8]) throws {
        guard (6...8).contains(secret.count) else {
            throw DCError(.usage, "a PIV \(what) is 6 to 8 characters; nothing was sent to the card")
        }
        // Padding (FF), spaces and control characters are never part of one: a file with a stray
        // byte must not cost a try.
        guard secret.withUnsafeBytes({ $0.allSatisfy { (0x21...0x7E).contains($0) } }) else {
            throw DCError(
                .usage, "a PIV \(what) is printable characters only (digits, normally); nothing was sent to the card")
        }
        secret.withUnsafeBytes { bytes in
            buffer.append(contentsOf: bytes)
            buffer.append(contentsOf: repeatElement(0xFF, count: 8 - bytes.count))
        }
    }

    /// VERIFY of the PIN (key reference 80): with no data it asks for the tries left.
    static func verify(_ pin: SecretBytes?) throws -> SecretBytes {
        var apdu: [UInt8] = [0x00, 0x20, 0x00, 0x80]
        // Room for the whole APDU up front: a reallocation would leave a copy of the PIN behind.
        apdu.reserveCapacity(13)
        if let pin {
            apdu.append(8)
            try padded(pin, what: "PIN", into: &apdu)
        }
        return SecretBytes(consuming: &apdu)
    }

    /// CHANGE REFERENCE DATA (24) or RESET RETRY COUNTER (2C): two padded secrets.
    static func twoSecrets(_ ins: UInt8, _ reference: UInt8, _ first: SecretBytes, _ second: SecretBytes, what: String)
        throws -> SecretBytes
    {
        var apdu: [UInt8] = [0x00, ins, 0x00, reference, 16]
        // Room for the whole APDU up front: a reallocation would leave a copy of a secret behind.
        apdu.reserveCapacity(21)
        do {
            try padded(first, what: what, into: &apdu)
            try padded(second, what: ins == 0x2C || reference == 0x80 ? "PIN" : "PUK", into: &apdu)
        } catch {
            apdu.withUnsafeMutableBytes { SecretBytes.wipe($0) }
            throw error
        }
        return SecretBytes(consuming: &apdu)
    }

    /// A VERIFY-without-data answer as a counter.
    static func counter(_ status: UInt16, what: String) throws -> Counter {
        switch status {
        case 0x9000: return .verified
        case 0x6983: return .blocked
        case 0x63C0...0x63CF: return status == 0x63C0 ? .blocked : .triesLeft(Int(status & 0x0F))
        default:
            throw DCError(
                .pkcs11Failure, String(format: "the card answered %04X when asked for its \(what) counter", status))
        }
    }

    /// No try on a blocked PIN; the final one only when allowed.
    static func refuseUnsafeTry(_ counter: Counter, _ allowFinalTry: Bool) throws {
        switch counter {
        case .blocked:
            throw DCError(.pinLocked, "the card's PIN is blocked; nothing was sent", remedy: .unblockUserPIN)
        case .triesLeft(1) where !allowFinalTry:
            throw DCError(
                .pinFinalTry, "one more wrong PIN will block the card; refusing to try", remedy: .confirmFinalPINTry)
        default: return
        }
    }

    /// The answer to a command that carried a secret: success, or a distinct error with the tries left.
    static func check(_ status: UInt16, what: String, new: String? = nil) throws {
        switch status {
        case 0x9000: return
        case 0x63C0...0x63CF where status != 0x63C0:
            let left = Counter.triesLeft(Int(status & 0x0F))
            throw DCError(
                .wrongPIN, "the card refused the \(what) (not retried); \(left)",
                hint: "check the \(what) before trying again: the card counts wrong tries")
        case 0x63C0, 0x6983:
            throw DCError(
                .pinLocked, "the card's \(what) is blocked",
                remedy: what == "PIN" ? .unblockUserPIN : nil)
        case 0x6A80:
            throw DCError(.usage, "the card refused the new \(new ?? what)'s format (6 to 8 digits)")
        default:
            throw DCError(.pkcs11Failure, String(format: "the card answered %04X", status))
        }
    }

    /// Connects (shared), selects the PIV application and runs `body`; a card that is not a PIV
    /// card is refused before any secret is sent.
    private func withCard<R>(_ body: (PCSC.Card) throws -> R) throws -> R {
        try PCSC.library().withContext { context in
            try context.withCard(reader: reader) { card in
                var select: [UInt8] =
                    [0x00, 0xA4, 0x04, 0x00, UInt8(Self.application.count)] + Self.application + [0x00]
                let status = try card.transmit(SecretBytes(consuming: &select))
                // 61xx: the answer waits for GET RESPONSE, which we do not need.
                guard status == 0x9000 || status >> 8 == 0x61 else {
                    throw DCError(
                        .noSuchObject, "the card in the reader is not a PIV card",
                        subject: reader.escapingControlCharacters)
                }
                return try body(card)
            }
        }
    }
}

/// PC/SC through `libpcsclite.so.1`, loaded on first use. Only the few calls `PIVCard` makes.
enum PCSC {
    // pcsc-lite's types on Linux: LONG is `long`, DWORD `unsigned long`, handles are LONGs.
    typealias Establish = @convention(c) (UInt, UnsafeRawPointer?, UnsafeRawPointer?, UnsafeMutablePointer<Int>) -> Int
    typealias Release = @convention(c) (Int) -> Int
    typealias ListReaders =
        @convention(c) (
            Int, UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<UInt>
        ) -> Int
    typealias Connect =
        @convention(c) (
            Int, UnsafePointer<CChar>, UInt, UInt, UnsafeMutablePointer<Int>, UnsafeMutablePointer<UInt>
        ) -> Int
    typealias Disconnect = @convention(c) (Int, UInt) -> Int
    typealias GetStatusChange = @convention(c) (Int, UInt, UnsafeMutableRawPointer, UInt) -> Int
    typealias BeginTransaction = @convention(c) (Int) -> Int
    typealias EndTransaction = @convention(c) (Int, UInt) -> Int
    typealias Transmit =
        @convention(c) (
            Int, UnsafeRawPointer, UnsafePointer<UInt8>, UInt, UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>,
            UnsafeMutablePointer<UInt>
        ) -> Int

    /// The loaded library's functions.
    struct Library: @unchecked Sendable {
        let establish: Establish
        let release: Release
        let listReaders: ListReaders
        let connect: Connect
        let disconnect: Disconnect
        let transmit: Transmit
        let getStatusChange: GetStatusChange
        let beginTransaction: BeginTransaction
        let endTransaction: EndTransaction

        func withContext<R>(_ body: (Context) throws -> R) throws -> R {
            var handle = 0
            // SCARD_SCOPE_SYSTEM.
            let result = establish(2, nil, nil, &handle)
            guard result == 0 else { throw PCSC.error("SCardEstablishContext", result, subject: nil) }
            defer { _ = release(handle) }
            return try body(Context(library: self, handle: handle))
        }
    }

    /// An established context.
    struct Context {
        let library: Library
        let handle: Int

        func readers() throws -> [String] {
            var length: UInt = 0
            var result = library.listReaders(handle, nil, nil, &length)
            if result == Self.noReaders { return [] }
            guard result == 0 else { throw PCSC.error("SCardListReaders", result, subject: nil) }
            var buffer = [CChar](repeating: 0, count: Int(length))
            result = library.listReaders(handle, nil, &buffer, &length)
            if result == Self.noReaders { return [] }
            guard result == 0 else { throw PCSC.error("SCardListReaders", result, subject: nil) }
            // A multi-string: names separated by NUL, ended by an empty one.
            return buffer.split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        }

        /// Connects (shared: other programs, OpenSC, use the card too), holds a transaction for
        /// the whole of `body` (no other program's APDU comes between a counter read and the
        /// command it guards), then disconnects with `disposition` (0 leave, 1 reset).
        func withCard<R>(reader: String, transaction: Bool = true, disposition: UInt = 0, _ body: (Card) throws -> R)
            throws -> R
        {
            var card = 0
            var protocolInUse: UInt = 0
            let result = library.connect(handle, reader, 2, 3, &card, &protocolInUse)
            guard result == 0 else { throw PCSC.error("SCardConnect", result, subject: reader) }
            defer { _ = library.disconnect(card, disposition) }
            guard transaction else {
                return try body(Card(library: library, handle: card, protocolInUse: protocolInUse, reader: reader))
            }
            let began = library.beginTransaction(card)
            guard began == 0 else { throw PCSC.error("SCardBeginTransaction", began, subject: reader) }
            // SCARD_LEAVE_CARD.
            defer { _ = library.endTransaction(card, 0) }
            return try body(Card(library: library, handle: card, protocolInUse: protocolInUse, reader: reader))
        }

        static let noReaders = 0x8010_002E

        /// The readers that hold a card now (SCardGetStatusChange with no wait: it never waits for
        /// a program that holds the card in a transaction).
        func readersWithCard() throws -> Set<String> {
            let names = try readers()
            guard !names.isEmpty else { return [] }
            // SCARD_READERSTATE on 64-bit Linux: szReader, pvUserData, then the DWORDs
            // dwCurrentState, dwEventState, cbAtr (8 bytes each), rgbAtr[33]; 80 bytes with padding.
            let stride = 80
            let cNames = names.map { strdup($0) }
            defer { cNames.forEach { free($0) } }
            var states = [UInt8](repeating: 0, count: stride * names.count)
            let result = states.withUnsafeMutableBytes { raw -> Int in
                for (index, name) in cNames.enumerated() {
                    raw.storeBytes(of: UnsafeRawPointer(name), toByteOffset: index * stride, as: UnsafeRawPointer?.self)
                }
                // cannot fail: `states` holds 80 bytes for each of at least one reader.
                return library.getStatusChange(handle, 0, raw.baseAddress!, UInt(names.count))
            }
            // SCARD_E_TIMEOUT is the normal answer to a wait of 0 when nothing changed.
            guard result == 0 || result == 0x8010_000A else {
                throw PCSC.error("SCardGetStatusChange", result, subject: nil)
            }
            return Set(
                names.enumerated().compactMap { index, name in
                    let event = states.withUnsafeBytes { $0.load(fromByteOffset: index * stride + 24, as: UInt.self) }
                    // SCARD_STATE_PRESENT.
                    return event & 0x20 != 0 ? name : nil
                })
        }
    }

    /// A connected card.
    struct Card {
        let library: Library
        let handle: Int
        let protocolInUse: UInt
        let reader: String

        /// Sends one APDU and returns the status word; the response data (none is needed here) is wiped.
        func transmit(_ apdu: SecretBytes) throws -> UInt16 {
            let request: [UInt] = [protocolInUse, UInt(2 * MemoryLayout<UInt>.size)]
            var response = [UInt8](repeating: 0, count: 258)
            defer { response.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
            var length = UInt(response.count)
            let result = request.withUnsafeBytes { pci in
                apdu.withUnsafeBytes { bytes in
                    library.transmit(
                        // cannot fail: the request holds two words and every APDU at least four bytes.
                        handle, pci.baseAddress!, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        UInt(bytes.count), nil, &response, &length)
                }
            }
            guard result == 0 else { throw PCSC.error("SCardTransmit", result, subject: reader) }
            guard length >= 2 else { throw DCError(.pkcs11Failure, "the card sent no status", subject: reader) }
            return UInt16(response[Int(length) - 2]) << 8 | UInt16(response[Int(length) - 1])
        }
    }

    private static let loaded: Result<Library, DCError> = {
        guard let handle = dlopen("libpcsclite.so.1", RTLD_NOW) else {
            return .failure(
                DCError(
                    .pkcs11Failure, "PC/SC is not installed (libpcsclite.so.1 was not found)",
                    hint: "install pcsc-lite (Debian: pcscd and libpcsclite1)"))
        }
        func symbol<T>(_ name: String, _: T.Type) -> T? {
            dlsym(handle, name).map { unsafeBitCast($0, to: T.self) }
        }
        guard let establish = symbol("SCardEstablishContext", Establish.self),
            let release = symbol("SCardReleaseContext", Release.self),
            let listReaders = symbol("SCardListReaders", ListReaders.self),
            let connect = symbol("SCardConnect", Connect.self),
            let disconnect = symbol("SCardDisconnect", Disconnect.self),
            let transmit = symbol("SCardTransmit", Transmit.self),
            let getStatusChange = symbol("SCardGetStatusChange", GetStatusChange.self),
            let beginTransaction = symbol("SCardBeginTransaction", BeginTransaction.self),
            let endTransaction = symbol("SCardEndTransaction", EndTransaction.self)
        else {
            return .failure(DCError(.pkcs11Failure, "libpcsclite.so.1 lacks the PC/SC functions"))
        }
        return .success(
            Library(
                establish: establish, release: release, listReaders: listReaders, connect: connect,
                disconnect: disconnect, transmit: transmit, getStatusChange: getStatusChange,
                beginTransaction: beginTransaction, endTransaction: endTransaction))
    }()

    /// The library, loaded once per process.
    static func library() throws -> Library { try loaded.get() }

    /// A PC/SC failure as one line: the card gone, no card, no pcscd, each said as such.
    static func error(_ function: String, _ result: Int, subject: String?) -> DCError {
        let subject = subject?.escapingControlCharacters
        switch UInt32(truncatingIfNeeded: result) {
        case 0x8010_001D:
            return DCError(
                .pkcs11Failure, "pcscd is not running", hint: "start pcscd (the PC/SC daemon), then try again")
        case 0x8010_000B:
            return DCError(
                .pkcs11Failure, "another program holds the card for itself", subject: subject,
                hint: "end that program (often gpg's scdaemon), then try again")
        case 0x8010_0009:
            return DCError(.noSuchObject, "no such PC/SC reader", subject: subject, remedy: .listTokensOnly)
        case 0x8010_000C:
            return DCError(.noCard, "no card in the reader", subject: subject)
        case 0x8010_0069, 0x8010_0068, 0x8010_0016, 0x8010_0017:
            return DCError(
                .cardRemoved, "the card was removed or reset during \(function)", subject: subject,
                hint: "put it back and run the command again")
        default:
            return DCError(
                .pkcs11Failure,
                "\(function) failed (" + String(format: "0x%08X", UInt32(truncatingIfNeeded: result)) + ")",
                subject: subject)
        }
    }
}
