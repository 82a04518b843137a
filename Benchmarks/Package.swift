// swift-tools-version: 6.1
import PackageDescription

// The benchmark runner, dcbench: a package of its own beside the toolkit's, so that `swift build`
// of the toolkit never builds it. The runners in this folder build it (release, or debug for a
// smoke run) with `swift build --package-path Benchmarks`.
let package = Package(
    name: "DerivedCredentialsBenchmarks",
    products: [.executable(name: "dcbench", targets: ["dcbench"])],
    dependencies: [.package(name: "DerivedCredentials", path: "..")],
    targets: [
        // p11-kit's PKCS#11 header, for `dcbench pkcs11-sign`, which loads a module with dlopen.
        .systemLibrary(name: "CPKCS11", pkgConfig: "p11-kit-1", providers: [.apt(["libp11-kit-dev"])]),
        .executableTarget(
            name: "dcbench",
            dependencies: [
                "CPKCS11",
                .product(name: "DerivedCredentials", package: "DerivedCredentials"),
                .product(name: "CredentialCoding", package: "DerivedCredentials"),
                .product(name: "TestCAProvider", package: "DerivedCredentials"),
                .product(name: "ManagedClient", package: "DerivedCredentials"),
                .product(name: "AuthTokens", package: "DerivedCredentials"),
                .product(name: "SystemSupport", package: "DerivedCredentials"),
            ]),
    ]
)
