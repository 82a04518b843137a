internal import COpenSSL
import DerivedCredentials

/// OpenSSL's error queue, drained into a value. Carried as a `DCError`'s `underlying` cause.
public struct OpenSSLError: Error, Sendable, CustomStringConvertible {
    /// Reason strings, oldest first, e.g. `error:1C800064:Provider routines::bad decrypt`.
    public let reasons: [String]

    /// The reasons joined with `; `, or `no OpenSSL reason` when the queue was empty.
    public var description: String {
        reasons.isEmpty ? "no OpenSSL reason" : reasons.joined(separator: "; ")
    }

    /// An error of `reasons` gathered by the caller (the CMP client adds its log's lines).
    package init(reasons: [String]) { self.reasons = reasons }

    /// Drains the calling thread's queue. OpenSSL keeps one queue per thread; every failed call we
    /// make is followed by a drain, so a stale entry never attaches itself to a later error.
    package static func drain() -> OpenSSLError { OpenSSLError(reasons: drainEntries().map(\.text)) }

    /// One entry of the error queue: its packed code, which names the library and the reason,
    /// and OpenSSL's text for it.
    package struct Entry {
        package let code: UInt
        package let text: String
        /// The library that raised it (`ERR_LIB_CMP`, `ERR_LIB_SSL`…).
        package var library: Int32 { dc_err_lib(code) }
        /// The reason within that library (`CMP_R_WRONG_PBM_VALUE`…).
        package var reason: Int32 { dc_err_reason(code) }
    }

    /// Drains the calling thread's queue, oldest first, for a caller that decides by the codes
    /// (the CMP client) as well as keeping the text; ``drain()`` keeps the text alone.
    package static func drainEntries() -> [Entry] {
        var entries: [Entry] = []
        while true {
            let code = ERR_get_error_all(nil, nil, nil, nil, nil)
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            entries.append(Entry(code: code, text: String(nulTerminated: buffer)))
        }
        return entries
    }

    /// Forgets whatever an earlier, handled failure left behind.
    package static func clear() { ERR_clear_error() }
}

/// An OpenSSL context waiting in a pool (`Mutex<[PooledContext]>`): the pool hands each to one
/// thread at a time, which uses it alone until it gives it back.
struct PooledContext: @unchecked Sendable {
    let pointer: OpaquePointer
}

package enum OpenSSL {
    /// Loads the `default` provider once per process. Loading a provider by name turns off the
    /// `default` OpenSSL would otherwise load by itself, so `legacy` needs it loaded first.
    static let initialized: Bool = {
        let defaultProvider = OSSL_PROVIDER_load(nil, "default")
        OpenSSLError.clear()
        return defaultProvider != nil
    }()

    /// Loads `legacy` too, once per process, for the files that may use its ciphers: a PKCS#12 file
    /// (RC2-40), a key encrypted with DES. Only their readers load it: it is another library
    /// (`ossl-modules/legacy.so`, 0.1 MiB resident) in every process that does, the PKCS#11
    /// module's host programs among them.
    static let legacyInitialized: Bool = {
        ensureInitialized()
        let legacyProvider = OSSL_PROVIDER_load(nil, "legacy")
        OpenSSLError.clear()
        return legacyProvider != nil
    }()

    package static func ensureInitialized() {
        _ = initialized
    }

    static func ensureLegacyInitialized() {
        _ = legacyInitialized
    }

    /// An internal failure: an OpenSSL call that no input should make fail.
    package static func failure(_ what: String, fileID: String = #fileID, line: Int = #line) -> DCError {
        DCError(.cryptoFailure, "\(what) failed", underlying: OpenSSLError.drain(), fileID: fileID, line: line)
    }

    /// C copies of `texts`, for OpenSSL calls that keep the pointers they are given; the caller
    /// frees each. Throws `cryptoFailure` when memory runs out, having freed the copies made.
    static func cStrings(_ texts: [String]) throws -> [UnsafeMutablePointer<CChar>] {
        var copies: [UnsafeMutablePointer<CChar>] = []
        for text in texts {
            guard let copy = strdup(text) else {
                copies.forEach { free($0) }
                throw failure("strdup")
            }
            copies.append(copy)
        }
        return copies
    }

    /// Runs `body` with a fresh memory BIO and returns what was written to it.
    static func withMemoryBIO(_ body: (OpaquePointer) throws -> Void) throws -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw failure("BIO_new") }
        defer { BIO_free(bio) }
        try body(bio)
        var pointer: UnsafeMutablePointer<CChar>?
        let length = dc_BIO_get_mem_data(bio, &pointer)
        guard let pointer, length > 0 else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            Array(UnsafeBufferPointer(start: $0, count: length))
        }
    }

    static func string(fromBIO body: (OpaquePointer) throws -> Void) throws -> String {
        String(decoding: try withMemoryBIO(body), as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    /// Calls an OpenSSL `d2i_*` function and insists that it consumed every byte; an object
    /// parsed from fewer bytes is freed with `free` (its `*_free`) and nil is returned.
    package func decodeDER<T>(
        _ d2i: (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> T?, free: (T) -> Void
    ) -> T? {
        withUnsafeBufferPointer { buffer -> T? in
            guard let base = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = base
            guard let value = d2i(&cursor, buffer.count) else { return nil }
            guard cursor == base + buffer.count else {
                free(value)
                return nil
            }
            return value
        }
    }
}

/// Calls an OpenSSL `i2d_*` function twice (length, then bytes).
package func encodeDER(_ i2d: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) -> [UInt8]? {
    let length = i2d(nil)
    guard length > 0 else { return nil }
    var bytes = [UInt8](repeating: 0, count: Int(length))
    let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
        return i2d(&cursor)
    }
    return written == length ? bytes : nil
}

extension String {
    /// A string from a NUL-terminated C buffer that OpenSSL filled.
    package init(nulTerminated buffer: [CChar]) {
        self = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
