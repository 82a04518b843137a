// swift-tools-version:5.4
// Tools version 5.4: newer ones rename an executable's main for testability, which libFuzzer's main breaks.
// libFuzzer harnesses for the parsers that read hostile input (as swift-protobuf's FuzzTesting).
// Build and run with FuzzTesting/fuzz.sh; each target is built with -sanitize=fuzzer,address.
import PackageDescription

let package = Package(
    name: "FuzzTesting",
    dependencies: [.package(name: "DerivedCredentials", path: "..")],
    targets: [
        .executableTarget(
            name: "FuzzCredentialReader",
            dependencies: [.product(name: "CredentialCoding", package: "DerivedCredentials")]),
        .executableTarget(
            name: "FuzzDeliveryURL",
            dependencies: [
                .product(name: "CredentialDelivery", package: "DerivedCredentials"),
                .product(name: "DerivedCredentials", package: "DerivedCredentials"),
            ]),
        // One harness per message kind: the fuzzer spends its time on that message's query.
        .target(
            name: "FuzzMessageHarness",
            dependencies: [
                .product(name: "CredentialDelivery", package: "DerivedCredentials"),
                .product(name: "DerivedCredentials", package: "DerivedCredentials"),
            ]),
        .executableTarget(name: "FuzzNewMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzDeliverMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzResultMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzAvailableMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzPolicyMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzAckMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(name: "FuzzDelegationMessage", dependencies: ["FuzzMessageHarness"]),
        .executableTarget(
            name: "FuzzDeliveryPayload",
            dependencies: [
                .product(name: "CredentialDelivery", package: "DerivedCredentials"),
                .product(name: "DerivedCredentials", package: "DerivedCredentials"),
            ]),
    ]
)
