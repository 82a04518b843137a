// swift-tools-version: 6.0
// A vendor's in-process provider, as its own package depending on the toolkit.
import PackageDescription

let package = Package(
    name: "VendorProvider",
    platforms: [.macOS(.v13)],
    products: [.library(name: "AcmeVaultProvider", targets: ["AcmeVaultProvider"])],
    dependencies: [
        // A vendor would write .package(url: "https://github.com/…/derived-credentials", from: "…").
        // The name keeps the identity stable whatever the checkout's folder is called.
        .package(name: "DerivedCredentials", path: "../..")
    ],
    targets: [
        .target(
            name: "AcmeVaultProvider",
            dependencies: [
                .product(name: "DerivedCredentials", package: "DerivedCredentials"),
                .product(name: "CredentialCoding", package: "DerivedCredentials"),
            ]
        ),
        .testTarget(
            name: "AcmeVaultProviderTests",
            dependencies: [
                "AcmeVaultProvider",
                .product(name: "DerivedCredentialsTesting", package: "DerivedCredentials"),
                .product(name: "TestCAProvider", package: "DerivedCredentials"),
                .product(name: "CredentialCoding", package: "DerivedCredentials"),
            ]
        ),
    ]
)
