import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The session bus through `libdbus-1.so.3`, loaded on first use: nothing of D-Bus is needed to
/// build, and a machine without it posts no notification. Only the few non-variadic calls that
/// ``DesktopNotifications`` makes (a variadic C function cannot be called from Swift through a
/// pointer).
enum DBus {
    // dbus_bool_t is a 32-bit unsigned int; connections and messages are opaque pointers.
    typealias ErrorInit = @convention(c) (UnsafeMutableRawPointer) -> Void
    typealias ErrorIsSet = @convention(c) (UnsafeRawPointer) -> UInt32
    typealias OpenPrivate = @convention(c) (UnsafePointer<CChar>, UnsafeMutableRawPointer) -> OpaquePointer?
    typealias Register = @convention(c) (OpaquePointer, UnsafeMutableRawPointer) -> UInt32
    typealias SetExitOnDisconnect = @convention(c) (OpaquePointer, UInt32) -> Void
    typealias ConnectionCall = @convention(c) (OpaquePointer) -> Void
    typealias NewMethodCall =
        @convention(c) (
            UnsafePointer<CChar>?, UnsafePointer<CChar>, UnsafePointer<CChar>?, UnsafePointer<CChar>
        ) -> OpaquePointer?
    typealias MessageUnref = @convention(c) (OpaquePointer) -> Void
    typealias IterInit = @convention(c) (OpaquePointer, UnsafeMutableRawPointer) -> UInt32
    typealias IterInitAppend = @convention(c) (OpaquePointer, UnsafeMutableRawPointer) -> Void
    typealias AppendBasic = @convention(c) (UnsafeMutableRawPointer, Int32, UnsafeRawPointer) -> UInt32
    typealias OpenContainer =
        @convention(c) (UnsafeMutableRawPointer, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer) -> UInt32
    typealias CloseContainer = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> UInt32
    typealias SendAndBlock =
        @convention(c) (OpaquePointer, OpaquePointer, Int32, UnsafeMutableRawPointer) -> OpaquePointer?
    typealias ArgType = @convention(c) (UnsafeMutableRawPointer) -> Int32
    typealias GetBasic = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> Void
    typealias IterNext = @convention(c) (UnsafeMutableRawPointer) -> UInt32
    typealias Recurse = @convention(c) (UnsafeMutableRawPointer, UnsafeMutableRawPointer) -> Void
    typealias AddMatch = @convention(c) (OpaquePointer, UnsafePointer<CChar>, UnsafeMutableRawPointer?) -> Void
    typealias ReadWrite = @convention(c) (OpaquePointer, Int32) -> UInt32
    typealias PopMessage = @convention(c) (OpaquePointer) -> OpaquePointer?
    typealias IsSignal = @convention(c) (OpaquePointer, UnsafePointer<CChar>, UnsafePointer<CChar>) -> UInt32
    typealias GetSender = @convention(c) (OpaquePointer) -> UnsafePointer<CChar>?

    /// D-Bus type codes (the signature characters).
    static let typeByte: Int32 = 0x79  // y
    static let typeInt32: Int32 = 0x69  // i
    static let typeUInt32: Int32 = 0x75  // u
    static let typeString: Int32 = 0x73  // s
    static let typeArray: Int32 = 0x61  // a
    static let typeVariant: Int32 = 0x76  // v
    static let typeDictEntry: Int32 = 0x65  // e

    /// Room for a `DBusMessageIter` (72 bytes on x86_64 and aarch64) and a `DBusError` (32):
    /// both are allocated here as raw buffers, with room to spare, since no header is read.
    static let iterSize = 128
    static let errorSize = 64

    /// The loaded library's functions.
    struct Library: @unchecked Sendable {
        let errorInit: ErrorInit
        let errorFree: ErrorInit
        let errorIsSet: ErrorIsSet
        let openPrivate: OpenPrivate
        let register: Register
        let setExitOnDisconnect: SetExitOnDisconnect
        let close: ConnectionCall
        let unref: ConnectionCall
        let newMethodCall: NewMethodCall
        let messageUnref: MessageUnref
        let iterInit: IterInit
        let iterInitAppend: IterInitAppend
        let appendBasic: AppendBasic
        let openContainer: OpenContainer
        let closeContainer: CloseContainer
        let sendAndBlock: SendAndBlock
        let argType: ArgType
        let getBasic: GetBasic
        let next: IterNext
        let recurse: Recurse
        let addMatch: AddMatch
        let readWrite: ReadWrite
        let pop: PopMessage
        let isSignal: IsSignal
        let getSender: GetSender

        /// Runs `body` with a fresh `DBusError`, freed afterwards; `body` gets the error's buffer
        /// and returns its value; the error's message (never a secret: D-Bus's own text) is passed
        /// to `failed` when the error was set.
        func withError<R>(_ body: (UnsafeMutableRawPointer) -> R) -> (R, failed: Bool) {
            let error = UnsafeMutableRawPointer.allocate(byteCount: DBus.errorSize, alignment: 16)
            error.initializeMemory(as: UInt8.self, repeating: 0, count: DBus.errorSize)
            errorInit(error)
            defer {
                errorFree(error)
                error.deallocate()
            }
            let value = body(error)
            return (value, errorIsSet(error) != 0)
        }
    }

    /// `duration` in whole milliseconds, as libdbus's timeouts take it.
    static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    /// A zeroed `DBusMessageIter` for `body`.
    static func withIter<R>(_ body: (UnsafeMutableRawPointer) -> R) -> R {
        let iter = UnsafeMutableRawPointer.allocate(byteCount: iterSize, alignment: 16)
        iter.initializeMemory(as: UInt8.self, repeating: 0, count: iterSize)
        defer { iter.deallocate() }
        return body(iter)
    }

    private static let loaded: Library? = {
        guard let handle = dlopen("libdbus-1.so.3", RTLD_NOW | RTLD_LOCAL) else { return nil }
        func symbol<T>(_ name: String, _: T.Type) -> T? {
            dlsym(handle, name).map { unsafeBitCast($0, to: T.self) }
        }
        guard let errorInit = symbol("dbus_error_init", ErrorInit.self),
            let errorFree = symbol("dbus_error_free", ErrorInit.self),
            let errorIsSet = symbol("dbus_error_is_set", ErrorIsSet.self),
            let openPrivate = symbol("dbus_connection_open_private", OpenPrivate.self),
            let register = symbol("dbus_bus_register", Register.self),
            let setExitOnDisconnect = symbol("dbus_connection_set_exit_on_disconnect", SetExitOnDisconnect.self),
            let close = symbol("dbus_connection_close", ConnectionCall.self),
            let unref = symbol("dbus_connection_unref", ConnectionCall.self),
            let newMethodCall = symbol("dbus_message_new_method_call", NewMethodCall.self),
            let messageUnref = symbol("dbus_message_unref", MessageUnref.self),
            let iterInit = symbol("dbus_message_iter_init", IterInit.self),
            let iterInitAppend = symbol("dbus_message_iter_init_append", IterInitAppend.self),
            let appendBasic = symbol("dbus_message_iter_append_basic", AppendBasic.self),
            let openContainer = symbol("dbus_message_iter_open_container", OpenContainer.self),
            let closeContainer = symbol("dbus_message_iter_close_container", CloseContainer.self),
            let sendAndBlock = symbol("dbus_connection_send_with_reply_and_block", SendAndBlock.self),
            let argType = symbol("dbus_message_iter_get_arg_type", ArgType.self),
            let getBasic = symbol("dbus_message_iter_get_basic", GetBasic.self),
            let next = symbol("dbus_message_iter_next", IterNext.self),
            let recurse = symbol("dbus_message_iter_recurse", Recurse.self),
            let addMatch = symbol("dbus_bus_add_match", AddMatch.self),
            let readWrite = symbol("dbus_connection_read_write", ReadWrite.self),
            let pop = symbol("dbus_connection_pop_message", PopMessage.self),
            let isSignal = symbol("dbus_message_is_signal", IsSignal.self),
            let getSender = symbol("dbus_message_get_sender", GetSender.self)
        else { return nil }
        return Library(
            errorInit: errorInit, errorFree: errorFree, errorIsSet: errorIsSet, openPrivate: openPrivate,
            register: register, setExitOnDisconnect: setExitOnDisconnect, close: close, unref: unref,
            newMethodCall: newMethodCall, messageUnref: messageUnref, iterInit: iterInit,
            iterInitAppend: iterInitAppend, appendBasic: appendBasic, openContainer: openContainer,
            closeContainer: closeContainer, sendAndBlock: sendAndBlock, argType: argType, getBasic: getBasic,
            next: next, recurse: recurse, addMatch: addMatch, readWrite: readWrite, pop: pop, isSignal: isSignal,
            getSender: getSender)
    }()

    /// The library, loaded once per process; nil when libdbus is not installed.
    static func library() -> Library? { loaded }
}

/// One private connection to the session bus; closed when released.
final class DBusConnection {
    let library: DBus.Library
    let connection: OpaquePointer

    /// Connects to the bus at `address` and says hello; nil when either fails.
    init?(address: String, library: DBus.Library) {
        self.library = library
        let (opened, failed) = library.withError { error in library.openPrivate(address, error) }
        guard let opened, !failed else { return nil }
        connection = opened
        // A bus that goes away must not end this process (libdbus's default for the shared
        // session connection is to call _exit).
        library.setExitOnDisconnect(connection, 0)
        let (registered, refused) = library.withError { error in library.register(opened, error) }
        guard registered != 0, !refused else {
            library.close(opened)
            library.unref(opened)
            return nil
        }
    }

    deinit {
        library.close(connection)
        library.unref(connection)
    }

    /// Calls `method` of `interface` on `destination`'s `path`, its arguments appended by
    /// `append`, and waits at most `timeout` for the reply; `read` gets the reply's first argument
    /// iterator. Nil when the call fails (no such service, an error reply, the timeout).
    func call<R>(
        destination: String, path: String, interface: String, method: String, timeout: Duration,
        append: (Appender) -> Bool, read: (Reader) -> R?
    ) -> R? {
        guard let message = library.newMethodCall(destination, path, interface, method) else { return nil }
        defer { library.messageUnref(message) }
        let appended = DBus.withIter { iter in
            library.iterInitAppend(message, iter)
            return append(Appender(library: library, iter: iter))
        }
        guard appended else { return nil }
        let (reply, failed) = library.withError { error in
            library.sendAndBlock(connection, message, DBus.milliseconds(timeout), error)
        }
        guard let reply else { return nil }
        defer { library.messageUnref(reply) }
        guard !failed else { return nil }
        return DBus.withIter { iter in
            guard library.iterInit(reply, iter) != 0 else { return nil }
            return read(Reader(library: library, iter: iter))
        }
    }

    /// Adds a match rule for signals (without waiting for the bus's answer).
    func addMatch(_ rule: String) { library.addMatch(connection, rule, nil) }

    /// Waits at most `timeout` for messages and passes each signal of `interface` sent by
    /// `sender` (a unique bus name: the bus daemon fills it in, so no other peer can claim it)
    /// to `handle` (its member name and its argument reader) until `handle` returns a value.
    /// Signals from anyone else — another program broadcasting, or sending to this connection
    /// alone — are dropped. Nil at the timeout, at once when the bus went away, or when `until`
    /// holds (asked about once a second).
    func waitForSignal<R>(
        interface: String, members: [String], sender: String, timeout: Duration, until: () -> Bool = { false },
        _ handle: (String, Reader) -> R?
    ) -> R? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if until() { return nil }
            while let message = library.pop(connection) {
                defer { library.messageUnref(message) }
                guard let from = library.getSender(message), String(cString: from) == sender else { continue }
                for member in members where library.isSignal(message, interface, member) != 0 {
                    let value = DBus.withIter { iter -> R? in
                        guard library.iterInit(message, iter) != 0 else { return nil }
                        return handle(member, Reader(library: library, iter: iter))
                    }
                    if let value { return value }
                }
            }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return nil }
            let milliseconds = min(1000, max(1, DBus.milliseconds(left)))
            // False: the connection is closed (the bus went away); nothing more can come.
            guard library.readWrite(connection, milliseconds) != 0 else { return nil }
        }
    }

    /// Appends arguments to a message through a `DBusMessageIter`.
    struct Appender {
        let library: DBus.Library
        let iter: UnsafeMutableRawPointer

        func string(_ value: String) -> Bool {
            value.withCString { text in
                var pointer: UnsafePointer<CChar>? = text
                return withUnsafePointer(to: &pointer) { library.appendBasic(iter, DBus.typeString, $0) != 0 }
            }
        }

        func uint32(_ value: UInt32) -> Bool {
            var value = value
            return withUnsafePointer(to: &value) { library.appendBasic(iter, DBus.typeUInt32, $0) != 0 }
        }

        func int32(_ value: Int32) -> Bool {
            var value = value
            return withUnsafePointer(to: &value) { library.appendBasic(iter, DBus.typeInt32, $0) != 0 }
        }

        func byte(_ value: UInt8) -> Bool {
            var value = value
            return withUnsafePointer(to: &value) { library.appendBasic(iter, DBus.typeByte, $0) != 0 }
        }

        /// A container of `type` (`signature`: what it holds, for an array or a variant), filled by `body`.
        func container(_ type: Int32, _ signature: String?, _ body: (Appender) -> Bool) -> Bool {
            DBus.withIter { sub in
                let opened =
                    signature.map { $0.withCString { library.openContainer(iter, type, $0, sub) } }
                    ?? library.openContainer(iter, type, nil, sub)
                guard opened != 0 else { return false }
                let filled = body(Appender(library: library, iter: sub))
                // Closed either way: libdbus asks every opened container to be closed (or abandoned).
                return library.closeContainer(iter, sub) != 0 && filled
            }
        }
    }

    /// Reads a message's arguments through a `DBusMessageIter`.
    struct Reader {
        let library: DBus.Library
        let iter: UnsafeMutableRawPointer

        /// The current argument as a UInt32, and moves on; nil when it is not one.
        func uint32() -> UInt32? {
            guard library.argType(iter) == DBus.typeUInt32 else { return nil }
            var value: UInt64 = 0
            // cannot fail: the buffer is 8 bytes.
            withUnsafeMutableBytes(of: &value) { library.getBasic(iter, $0.baseAddress!) }
            _ = library.next(iter)
            return UInt32(truncatingIfNeeded: value)
        }

        /// The current argument as a string, and moves on; nil when it is not one.
        func string() -> String? {
            guard library.argType(iter) == DBus.typeString else { return nil }
            var pointer: UnsafePointer<CChar>?
            // cannot fail: the buffer is a pointer's room.
            withUnsafeMutableBytes(of: &pointer) { library.getBasic(iter, $0.baseAddress!) }
            _ = library.next(iter)
            return pointer.map { String(cString: $0) }
        }

        /// The current argument as an array of strings, and moves on; nil when it is not one.
        func strings() -> [String]? {
            guard library.argType(iter) == DBus.typeArray else { return nil }
            let values = DBus.withIter { sub -> [String] in
                library.recurse(iter, sub)
                let reader = Reader(library: library, iter: sub)
                var values: [String] = []
                while let value = reader.string() { values.append(value) }
                return values
            }
            _ = library.next(iter)
            return values
        }
    }
}
