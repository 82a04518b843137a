// swift-tools-version: 6.1
import PackageDescription

// The targets the PKCS#11 module links in: each public function in its own section, and none
// marked used. On ELF swiftc marks every public symbol used (SHF_GNU_RETAIN), so the module's
// `--gc-sections` keeps each public function of these targets whether the module calls it or not
// (AuthTokens, the command paths of ManagedClient). Every product links these targets statically
// and the module exports only the PKCS#11 entry points, so no caller is outside the link.
let moduleGraph: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-function-sections", "-Xfrontend", "-internalize-at-link"])
]

let package = Package(
    name: "DerivedCredentials",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "DerivedCredentials", targets: ["DerivedCredentials"]),
        .library(name: "SystemSupport", targets: ["SystemSupport"]),
        .library(name: "CredentialCoding", targets: ["CredentialCoding"]),
        .library(name: "PEMFileProvider", targets: ["PEMFileProvider"]),
        .library(name: "TestCAProvider", targets: ["TestCAProvider"]),
        .library(name: "ExecProvider", targets: ["ExecProvider"]),
        .library(name: "PKCS11Provider", targets: ["PKCS11Provider"]),
        .library(name: "CMPClient", targets: ["CMPClient"]),
        .library(name: "CMPProvider", targets: ["CMPProvider"]),
        .library(name: "DerivedCredentialsTesting", targets: ["DerivedCredentialsTesting"]),
        .library(name: "CredentialDelivery", targets: ["CredentialDelivery"]),
        .library(name: "ProviderService", targets: ["ProviderService"]),
        .library(name: "SchemeHandlers", targets: ["SchemeHandlers"]),
        .library(name: "ManagedClient", targets: ["ManagedClient"]),
        .executable(name: "dcclient", targets: ["dcclient"]),
        .executable(name: "dcprovision", targets: ["dcprovision"]),
        .library(name: "AuthTokens", targets: ["AuthTokens"]),
        .library(name: "IdentityTokens", targets: ["IdentityTokens"]),
        .library(name: "VerificationService", targets: ["VerificationService"]),
        .executable(name: "dcverify", targets: ["dcverify"]),
        // The PKCS#11 module that presents the installed credential as a token: libdcclient-pkcs11.so.
        .library(name: "dcclient-pkcs11", type: .dynamic, targets: ["ClientPKCS11"]),
        .plugin(name: "DCTestCredentials", targets: ["DCTestCredentials"]),
        // Tests only: a PKCS#11 module that wraps SoftHSM2 and injects PIN states and faults.
        .library(name: "DCFaultPKCS11", type: .dynamic, targets: ["DCFaultPKCS11"]),
    ],
    traits: [
        .default(enabledTraits: ["DemoCompanions"]),
        .trait(
            name: "DemoCompanions",
            description: """
                dcprovision depends on the dcclient executable, so that `swift run dcprovision demo` on a fresh \
                clone builds it next to it. A dependency on an executable links its modules into dcprovision, \
                which costs every dcprovision process time at start; scripts/install and the benchmarks build \
                the products one by one without this trait instead. Not dcverify: its HTTP stack (Hummingbird, \
                SwiftNIO) would double the first build, so the demo verifies auth tokens in its own process \
                when no dcverify is built next to it.
                """),
        .trait(
            name: "TLS",
            description: """
                dcverify can serve HTTPS itself (--tls-certificate), through swift-nio-ssl, and fetch its trust \
                from a URL (--trust-url) with AsyncHTTPClient, which needs swift-nio-ssl too. That package compiles \
                its own copy of BoringSSL, about 340 CPU-seconds, which would add two thirds to a fresh clone's \
                `swift build`, so it is off by default: without it dcverify serves HTTP (behind a \
                proxy that terminates TLS, such as nginx), reads its trust from local files, and refuses \
                --tls-certificate and --trust-url with one line each (exit 69). \
                scripts/install and scripts/test build with it.
                """),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // Documentation only: `swift package generate-documentation` (scripts/test builds the DocC catalogs).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // The verification service (dcverify): HTTP, TLS and graceful shutdown.
        // FullFoundation only: the default traits would add swift-configuration, which we do not use.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // dcverify's metrics: recorded through swift-metrics, exposed in Prometheus' text format.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // dcverify serve --trust-url: fetching the provider's signed trust list (with the TLS trait:
        // AsyncHTTPClient needs swift-nio-ssl).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // C engines, as system libraries. Nothing outside CredentialCoding, CMPClient and the
        // PKCS#11 code imports them, and no C type appears in a public API.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // libssl, for the CMP client's https transfer alone: the PKCS#11 module never maps it.
        .systemLibrary(
            name: "COpenSSLTLS",
            pkgConfig: "libssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CP11Kit",
            pkgConfig: "p11-kit-1",
            providers: [.apt(["libp11-kit-dev"])]
        ),
        // p11-kit's PKCS#11 header alone, for the module: types, nothing linked.
        .systemLibrary(name: "CPKCS11Types", providers: [.apt(["libp11-kit-dev"])]),

        // glibc calls Swift does not import (close-on-exec pipes, descriptors closed in a spawned
        // child); header-only, nothing to link. Not `CSystem`: swift-system (through NIO) has a target of that name.
        .systemLibrary(name: "CSystemShims"),

        // Core: what a credential is: tags, credential, errors, verdicts, secret values, the
        // provider protocols. No C, no operating-system machinery.
        .target(name: "DerivedCredentials", swiftSettings: moduleGraph),

        // What is about the operating system: child processes, all-or-nothing file writes,
        // reading PINs and passphrases, the XDG base directories. Errors are the core's DCError.
        .target(
            name: "SystemSupport", dependencies: ["DerivedCredentials", "CSystemShims"], swiftSettings: moduleGraph),

        // OpenSSL-backed parsing, conversion and validation.
        .target(
            name: "CredentialCoding",
            dependencies: [
                "DerivedCredentials",
                "SystemSupport",
                "COpenSSL",
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: moduleGraph),

        // Delivery, the wire protocol both sides speak: the URL messages, the sealed canonical
        // payload, the spool, registrations, pairing, the provider's ledger. No token code.
        .target(
            name: "CredentialDelivery", dependencies: ["DerivedCredentials", "SystemSupport", "CredentialCoding"],
            swiftSettings: moduleGraph),

        // The provider's runtime over that protocol: the send pipeline, client policies, auth-token
        // delegations, identity JWTs and the files a verification service trusts.
        .target(
            name: "ProviderService",
            dependencies: [
                "CredentialDelivery", "DerivedCredentials", "SystemSupport", "CredentialCoding", "AuthTokens",
                "IdentityTokens",
            ]),

        // freedesktop x-scheme-handler registration, resolution and launch.
        .target(
            name: "SchemeHandlers", dependencies: ["DerivedCredentials", "SystemSupport"], swiftSettings: moduleGraph),

        // What both command-line tools share: the version, the table of renamed flags, the error and
        // exit-status mapping, the one output writer, the secret and output option groups.
        .target(
            name: "CommandLineSupport",
            dependencies: [
                "DerivedCredentials", "SystemSupport", "CredentialCoding",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The reference managed client, and its thin CLI.
        .target(
            name: "ManagedClient",
            dependencies: [
                "DerivedCredentials", "SystemSupport", "CredentialCoding", "CredentialDelivery", "CSystemShims",
                "AuthTokens", "SchemeHandlers", "IdentityTokens",
            ], swiftSettings: moduleGraph),
        .executableTarget(
            name: "dcclient",
            dependencies: [
                "ManagedClient", "CredentialDelivery", "SchemeHandlers", "DerivedCredentials", "SystemSupport",
                "CredentialCoding", "AuthTokens", "IdentityTokens",
                "CommandLineSupport", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // The PKCS#11 module over the client's store (the dcclient-pkcs11 product): every program that
        // finds keys through p11-kit uses the installed credential with it.
        .target(
            name: "ClientPKCS11",
            dependencies: [
                "ManagedClient", "CredentialDelivery", "DerivedCredentials", "SystemSupport", "CredentialCoding",
                "CPKCS11Types", "CModuleAllocator", "CModuleImage",
            ],
            // -z nodelete: the module stays mapped after dlclose, as the Swift runtime cannot be
            // unloaded and a thread may still be leaving the module when C_Finalize returns. The
            // Swift runtime and FoundationEssentials are linked in, and only the PKCS#11 entry points
            // are exported (exports.map), so a program loading the module maps no shared Swift
            // runtime. The module's targets import FoundationEssentials, never Foundation: Foundation,
            // CoreFoundation and ICU would add megabytes to every program that loads it.
            // --wrap: the allocation functions the code linked in calls go through CModuleAllocator.
            exclude: ["exports.map"],
            swiftSettings: moduleGraph,
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-Xlinker", "-z", "-Xlinker", "nodelete", "-Xlinker", "-z", "-Xlinker", "defs",
                        "-static-stdlib",
                        "-Xlinker", "--start-group", "-lFoundationEssentials", "-l_FoundationCShims",
                        "-l_FoundationCollections", "-Xlinker", "--end-group", "-Xlinker",
                        "--version-script=\(Context.packageDirectory)/Sources/ClientPKCS11/exports.map",
                    ]
                        + ["malloc", "calloc", "realloc", "posix_memalign", "malloc_usable_size"].flatMap {
                            ["-Xlinker", "--wrap=\($0)"]
                        })
            ]),
        // The module's allocation wrappers: sizes asked rounded up to 8, usable sizes heard rounded
        // down to 8, so the Swift code inside stays clear of a host allocator's bookkeeping.
        .target(name: "CModuleAllocator"),
        // The module gives back the pages of its relocations once the dynamic linker has read them.
        .target(name: "CModuleImage", publicHeadersPath: "."),

        // Auth tokens: the issuing key's delegations, the client's tokens bound to a challenge, the
        // revocation list, and the stateless verifier. OpenSSL does the cryptography.
        .target(
            name: "AuthTokens", dependencies: ["DerivedCredentials", "SystemSupport", "CredentialCoding"],
            swiftSettings: moduleGraph),
        // Identity JWTs: signed by the provider, cached by the client; the same ES256 JWS as auth
        // tokens (AuthTokens' CompactJWS over OpenSSL).
        .target(
            name: "IdentityTokens", dependencies: ["AuthTokens", "DerivedCredentials", "CredentialCoding"],
            swiftSettings: moduleGraph),

        // The verification service app servers call: HTTP(S) on Hummingbird, limits, reloads, logs.
        .target(
            name: "VerificationService",
            dependencies: [
                "AuthTokens", "DerivedCredentials", "SystemSupport", "CredentialCoding",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird", condition: .when(traits: ["TLS"])),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(traits: ["TLS"])),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(traits: ["TLS"])),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]),
        .executableTarget(
            name: "dcverify",
            dependencies: [
                "VerificationService", "AuthTokens", "DerivedCredentials", "SystemSupport", "CommandLineSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]),

        // The provider conformance kit, for the built-in providers and vendors' alike.
        .target(name: "DerivedCredentialsTesting", dependencies: ["DerivedCredentials", "CredentialCoding"]),

        // Provider plug-ins, one target each.
        .target(
            name: "PEMFileProvider",
            dependencies: ["DerivedCredentials", "CredentialCoding"],
            path: "Plugins/PEMFileProvider"
        ),
        .target(
            name: "TestCAProvider",
            dependencies: ["DerivedCredentials", "SystemSupport", "CredentialCoding"],
            path: "Plugins/TestCAProvider"
        ),

        .target(
            name: "PKCS11Provider",
            dependencies: ["DerivedCredentials", "CredentialCoding", "SystemSupport", "CP11Kit"],
            path: "Plugins/PKCS11Provider"
        ),
        .target(
            name: "ExecProvider",
            dependencies: ["DerivedCredentials", "SystemSupport", "CredentialCoding"],
            path: "Plugins/ExecProvider"
        ),

        // A CA's CMP client over OpenSSL's OSSL_CMP_* (its https transfer is the one user of
        // libssl), for the CMP provider.
        .target(
            name: "CMPClient",
            dependencies: ["DerivedCredentials", "CredentialCoding", "COpenSSL", "COpenSSLTLS"],
            swiftSettings: moduleGraph),
        .target(
            name: "CMPProvider",
            dependencies: ["DerivedCredentials", "SystemSupport", "CredentialCoding", "CMPClient"],
            path: "Plugins/CMPProvider"
        ),

        // swift package --allow-writing-to-package-directory dc-test-credentials --out-dir Fixtures
        .plugin(
            name: "DCTestCredentials",
            capability: .command(
                intent: .custom(
                    verb: "dc-test-credentials", description: "Mint a test credential from a test CA into a folder"),
                permissions: [
                    .writeToPackageDirectory(reason: "writes the test credential into the folder given by --out-dir")
                ]
            ),
            // No `dependencies: ["dcprovision"]`: SwiftPM builds a plug-in's tools for the host, a
            // second copy of dcprovision and everything it links, on every `swift build`. The
            // plug-in asks for the product itself (`packageManager.build`) when it runs.
            path: "Plugins/DCTestCredentials"
        ),

        // Thin CLI. It depends on the dcclient executable only so that `swift run dcprovision demo`
        // on a fresh clone builds it next to it: the demo launches it.
        .executableTarget(
            name: "dcprovision",
            dependencies: [
                // The demo runs it (see the DemoCompanions trait).
                .target(name: "dcclient", condition: .when(traits: ["DemoCompanions"])),
                "AuthTokens",
                "DerivedCredentials",
                "SystemSupport",
                "CredentialCoding",
                "PEMFileProvider",
                "TestCAProvider",
                "ExecProvider",
                "CredentialDelivery",
                "ProviderService",
                "SchemeHandlers",
                "PKCS11Provider",
                "CMPProvider",
                "CommandLineSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        .target(
            name: "DCFaultPKCS11", dependencies: ["CP11Kit"], path: "Tests/DCFaultPKCS11",
            linkerSettings: [.linkedLibrary("dl")]),

        // Test helpers: a process runner and fixtures made by the openssl CLI (keys are never committed).
        .target(
            name: "TestSupport",
            dependencies: [
                "DerivedCredentials", "SystemSupport", "ManagedClient", "COpenSSL", "CP11Kit", "CSystemShims",
            ],
            path: "Tests/TestSupport"),
        // A CA over CMP that certifies whatever key it is asked to (OpenSSL's generic CMP server
        // and a CA made by the openssl CLI): the mock server answers one fixed certificate only.
        .target(name: "CMPTestServer", dependencies: ["COpenSSL"], path: "Tests/CMPTestServer"),
        // The benchmark runner (dcbench) is a package of its own, Benchmarks/Package.swift, so that it
        // builds only when a benchmark asks for it.

        .testTarget(name: "DerivedCredentialsTests", dependencies: ["DerivedCredentials", "TestSupport"]),
        .testTarget(name: "SystemSupportTests", dependencies: ["SystemSupport", "DerivedCredentials", "TestSupport"]),
        .testTarget(
            name: "CredentialCodingTests",
            dependencies: ["CredentialCoding", "DerivedCredentials", "TestSupport", "COpenSSL"]
        ),
        .testTarget(
            name: "CredentialDeliveryTests",
            dependencies: ["CredentialDelivery", "CredentialCoding", "TestCAProvider", "TestSupport"]
        ),
        // Test helpers: a sandboxed provider and managed client, in-process (`World`).
        .target(
            name: "ClientWorld",
            dependencies: [
                "ManagedClient", "ProviderService", "CredentialDelivery", "CredentialCoding", "DerivedCredentials",
                "SystemSupport", "TestCAProvider", "TestSupport",
            ],
            path: "Tests/ClientWorld"),
        .testTarget(
            name: "ManagedClientTests",
            dependencies: [
                "ManagedClient", "CredentialDelivery", "ProviderService", "CredentialCoding", "SystemSupport",
                "TestCAProvider", "TestSupport", "AuthTokens", "ClientWorld",
            ],
            // Run by the tests with python3 from the source tree: the secure-file format's oracle.
            exclude: ["secure_file_oracle.py"]
        ),
        // The dcclient-pkcs11 module as programs load it (built with --product dcclient-pkcs11).
        .testTarget(
            name: "ClientPKCS11Tests",
            dependencies: [
                "ManagedClient", "CredentialDelivery", "CredentialCoding", "DerivedCredentials", "TestCAProvider",
                "TestSupport", "ClientWorld", "PKCS11Probe",
            ]
        ),
        .testTarget(
            name: "AuthTokensTests",
            dependencies: ["AuthTokens", "IdentityTokens", "CredentialCoding", "DerivedCredentials", "TestSupport"],
            // Run by the tests with /usr/bin/python3: PyJWT as an independent peer.
            exclude: ["jws_oracle.py"]),
        // Tests only: the verification service with a table verifier whose verification can take
        // seconds, run as a real process by the one test that needs a request still in flight.
        .executableTarget(
            name: "VerificationServiceFixture",
            dependencies: [
                "VerificationService", "AuthTokens", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/VerificationServiceFixture"),
        // A PKCS#11 consumer that loads a module with dlopen and runs steps in one process, for the
        // tests of the dcclient-pkcs11 module (state changes between two calls of one session).
        .executableTarget(name: "PKCS11Probe", dependencies: ["CP11Kit"], path: "Tests/PKCS11Probe"),
        // Test helpers: raw HTTP requests, real auth tokens and the files dcverify trusts them with.
        .target(
            name: "ServiceHarness", dependencies: ["AuthTokens", "CredentialCoding", "TestSupport"],
            path: "Tests/ServiceHarness"),
        .testTarget(
            name: "VerificationServiceTests",
            dependencies: [
                "VerificationService", "AuthTokens", "CredentialCoding", "TestSupport", "ServiceHarness", "dcverify",
                "VerificationServiceFixture",
            ]),
        .testTarget(
            name: "dcverifyTests",
            dependencies: ["dcverify", "AuthTokens", "CredentialCoding", "TestSupport", "ServiceHarness"]),
        .testTarget(name: "SchemeHandlersTests", dependencies: ["SchemeHandlers", "SystemSupport", "TestSupport"]),
        .testTarget(
            name: "TestCAProviderTests",
            dependencies: ["TestCAProvider", "CredentialCoding", "SystemSupport", "TestSupport"]),
        // The CMP provider against `openssl cmp`'s mock server, and the openssl CLI as a client.
        .testTarget(
            name: "CMPProviderTests",
            dependencies: [
                "CMPProvider", "CMPClient", "CredentialCoding", "DerivedCredentials", "SystemSupport", "TestSupport",
            ]),
        .testTarget(
            name: "ProviderTests",
            dependencies: [
                "PEMFileProvider", "TestCAProvider", "ExecProvider", "PKCS11Provider", "CMPProvider", "CMPTestServer",
                "DerivedCredentialsTesting", "CredentialCoding", "SystemSupport", "TestSupport",
            ]
        ),
        .testTarget(
            name: "CommandLineSupportTests",
            dependencies: [
                "CommandLineSupport", "dcprovision", "dcclient", "dcverify", "TestSupport", "DerivedCredentials",
                "CredentialCoding", "SystemSupport",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "dcprovisionTests",
            dependencies: [
                "dcprovision", "dcclient", "dcverify", "TestSupport", "DerivedCredentials", "CredentialCoding",
                "CredentialDelivery", "ProviderService", "CommandLineSupport", "SystemSupport",
                "ManagedClient", "TestCAProvider", "AuthTokens", "ServiceHarness", "CMPTestServer",
            ]
        ),
    ]
)
