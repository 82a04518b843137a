// libFuzzer entry point: any bytes as the query of a `delegation` message (docs/PROTOCOL.md).
import FuzzMessageHarness

/// The entry point libFuzzer calls with each input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt { fuzzMessage(path: "delegation", start, count) }
