import Foundation
import TestSupport
import Testing

/// The module carries its own Swift runtime (linked with `-static-stdlib`, everything but the
/// PKCS#11 entry points local), so a program that loads it maps no shared Swift runtime and a
/// Swift program that loads it keeps its own: these tests hold both halves.
@Suite("The PKCS#11 module carries its own Swift runtime", .ownThreads, .softHSM, .timeLimit(.minutes(5)))
struct ModuleRuntimeTests {
    let module = Binaries.directory + "/libdcclient-pkcs11.so"

    @Test(
        "The module loads no shared Swift runtime and exports only C_GetFunctionList, C_GetInterfaceList and C_GetInterface"
    )
    func ownRuntime() throws {
        try #require(FileManager.default.fileExists(atPath: module), "built by scripts/test: --product dcclient-pkcs11")
        let libraries = try run("ldd", [module])
        #expect(libraries.status == 0, "\(libraries.stderrText)")
        #expect(!libraries.stdoutText.contains("libswift"), "\(libraries.stdoutText)")
        #expect(!libraries.stdoutText.contains("Foundation"), "\(libraries.stdoutText)")
        #expect(!libraries.stdoutText.contains("not found"), "\(libraries.stdoutText)")
        // The dynamic symbols the module defines with global or weak binding: nm's uppercase kinds.
        let symbols = try run("nm", ["-D", "--defined-only", module])
        #expect(symbols.status == 0, "\(symbols.stderrText)")
        let exported = symbols.stdoutText.split(separator: "\n").compactMap { line -> String? in
            let fields = line.split(separator: " ")
            guard fields.count == 3, let kind = fields[1].first, kind.isUppercase, kind != "U" else { return nil }
            return String(fields[2])
        }
        #expect(exported.sorted() == ["C_GetFunctionList", "C_GetInterface", "C_GetInterfaceList"])
    }

    @Test(
        "Once loaded, the module keeps none of its relocations' pages resident: the dynamic linker has read them and nothing reads them again"
    )
    func relocationsReleased() throws {
        try #require(FileManager.default.fileExists(atPath: module), "built by scripts/test: --product dcclient-pkcs11")
        // Python loads the module (its constructor runs, Sources/CModuleImage) and counts the whole
        // pages of its .rela.dyn that /proc/self/pagemap says are present.
        let script = """
            import ctypes, os, struct, subprocess, sys
            module = os.path.realpath(sys.argv[1])
            sections = subprocess.run(["readelf", "-S", "-W", module], capture_output=True, text=True, check=True)
            for line in sections.stdout.splitlines():
                fields = line.replace("[ ", "[").split()
                if len(fields) > 5 and fields[1] == ".rela.dyn":
                    address, size = int(fields[3], 16), int(fields[5], 16)
            ctypes.CDLL(module)
            base = next(int(line.split("-")[0], 16) for line in open("/proc/self/maps")
                        if line.split()[-1] == module and int(line.split()[2], 16) == 0)
            first, last = (base + address + 4095) // 4096, (base + address + size) // 4096
            with open("/proc/self/pagemap", "rb") as pagemap:
                pagemap.seek(first * 8)
                entries = pagemap.read((last - first) * 8)
            present = sum(struct.unpack_from("<Q", entries, 8 * page)[0] >> 63 for page in range(last - first))
            print(last - first, present)
            """
        let counted = try run("/usr/bin/python3", ["-c", script, module])
        #expect(counted.status == 0, "\(counted.stderrText)")
        let numbers = counted.stdoutText.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        try #require(numbers.count == 2, "\(counted.stdoutText)")
        #expect(numbers[0] > 100, "the module's relocations fill \(numbers[0]) pages")
        #expect(numbers[1] == 0, "\(numbers[1]) of the \(numbers[0]) pages of relocations are resident")
    }

    @Test(
        "Every allocation the code inside the module makes goes through its wrappers: no allocation function it calls is left unwrapped"
    )
    func allocationsWrapped() throws {
        try #require(FileManager.default.fileExists(atPath: module), "built by scripts/test: --product dcclient-pkcs11")
        // The wrappers round sizes to 8 bytes each way (Sources/CModuleAllocator): an allocation
        // function they do not cover would hand Swift a size the host's allocator may not honour.
        let wrapped: Set = ["malloc", "calloc", "realloc", "posix_memalign", "malloc_usable_size"]
        let unwrappable: Set = ["aligned_alloc", "memalign", "valloc", "pvalloc", "reallocarray"]
        let undefined = try run("nm", ["-D", "--undefined-only", module])
        #expect(undefined.status == 0, "\(undefined.stderrText)")
        let called = Set(
            undefined.stdoutText.split(separator: "\n").compactMap { line in
                line.split(separator: " ").last.map { String($0.split(separator: "@").first ?? $0) }
            })
        #expect(called.isDisjoint(with: unwrappable), "\(called.intersection(unwrappable))")
        let listed = try run("nm", ["--defined-only", module], timeout: 120)
        let own = Set(Self.symbols(in: listed.stdoutText, kinds: nil))
        for name in wrapped.intersection(called) { #expect(own.contains("__wrap_" + name), "\(name) is not wrapped") }
    }

    @Test(
        "The module needs no library but libcrypto and the C and C++ runtimes: not libssl, not libp11-kit, whose code it does not call"
    )
    func neededLibraries() throws {
        try #require(FileManager.default.fileExists(atPath: module), "built by scripts/test: --product dcclient-pkcs11")
        // readelf -d lists DT_NEEDED: what the loader maps into every program that loads the module.
        let dynamic = try run("readelf", ["-d", "-W", module])
        #expect(dynamic.status == 0, "\(dynamic.stderrText)")
        let needed = dynamic.stdoutText.split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap {
            $0.split(separator: "[").last?.split(separator: "]").first.map(String.init)
        }
        #expect(
            Set(needed)
                == [
                    "libcrypto.so.3", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6",
                    "ld-linux-x86-64.so.2",
                ], "\(needed)")
    }

    @Test(
        "The module links FoundationEssentials and none of Foundation, FoundationInternationalization, CoreFoundation or ICU: it defines none of their symbols"
    )
    func noFoundation() throws {
        try #require(FileManager.default.fileExists(atPath: module), "built by scripts/test: --product dcclient-pkcs11")
        // The toolchain's static libraries, which the module's link line names.
        let toolchain = URL(fileURLWithPath: try which("swiftc")).resolvingSymlinksInPath()
            .deletingLastPathComponent().deletingLastPathComponent()
        let libraries = ["Foundation", "FoundationInternationalization", "CoreFoundation", "_FoundationICU"].map {
            toolchain.appendingPathComponent("lib/swift_static/linux/lib\($0).a").path
        }
        for library in libraries {
            try #require(FileManager.default.fileExists(atPath: library), "the toolchain has no \(library)")
        }
        // What those libraries define for others: their global code and data, not the weak
        // definitions every Swift module may carry a copy of.
        let archives = try run("nm", ["-g", "--defined-only"] + libraries, timeout: 120)
        #expect(archives.status == 0, "\(archives.stderrText)")
        let theirs = Set(Self.symbols(in: archives.stdoutText, kinds: "TDBR"))
        // Everything the module defines, local symbols too: what it linked in is local in it.
        let listed = try run("nm", ["--defined-only", module], timeout: 120)
        #expect(listed.status == 0, "\(listed.stderrText)")
        let own = Self.symbols(in: listed.stdoutText, kinds: nil)
        #expect(own.contains { $0.hasPrefix("$s20FoundationEssentials") }, "the module lists no symbols: stripped?")
        let linked = own.filter(theirs.contains)
        let count = linked.count
        #expect(count == 0, "symbols of Foundation's libraries, such as \(linked.prefix(5))")
    }

    /// The names in `nm` output whose kind is one of `kinds` (any kind when nil).
    static func symbols(in listing: String, kinds: String?) -> [String] {
        listing.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 3, kinds.map({ $0.contains(fields[1]) }) ?? true else { return nil }
            return String(fields[2])
        }
    }

    @Test(
        "One Swift program, two Swift-built modules: dcprovision loads the dcclient module beside the fault module over SoftHSM2 (a shared Swift runtime); tokens lists both, and objects reads the credential's certificates through the module"
    )
    func twoSwiftModulesInOneProgram() throws {
        let tokens = try TwoAppTokens("p11-runtimes", apps: ["mail"])
        defer { tokens.sandbox.remove() }
        let fault = Binaries.directory + "/libDCFaultPKCS11.so"
        try #require(FileManager.default.fileExists(atPath: fault), "built by scripts/test: --product DCFaultPKCS11")
        // The fault module forwards to SoftHSM2, which finds its tokens through this configuration.
        let environment = ["SOFTHSM2_CONF": SoftHSM.shared.configuration]
        let listed = try tokens.sandbox.run(
            Binaries.dcprovision, ["tokens", "--module", module, "--module", fault, "--json"],
            environment: environment, timeout: 60)
        #expect(listed.status == 0, "\(listed.stderrText)")
        let labels = try #require(try jsonPayload(listed.stdout, "tokens") as? [[String: Any]]).compactMap {
            $0["label"] as? String
        }
        #expect(labels.contains("dcclient mail"), "\(labels)")
        #expect(labels.contains(SoftHSM.shared.pivCard), "\(labels)")

        let objects = try tokens.sandbox.run(
            Binaries.dcprovision,
            ["objects", "pkcs11:token=dcclient%20mail;type=cert", "--module", module, "--module", fault, "--json"],
            environment: environment, timeout: 60)
        #expect(objects.status == 0, "\(objects.stderrText)")
        let ids = try #require(try jsonPayload(objects.stdout, "objects") as? [[String: Any]]).compactMap {
            $0["id"] as? String
        }
        #expect(ids.sorted() == ["01", "02", "03", "04"], "\(ids)")
    }
}
