// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "HaulCore", targets: ["HaulCore"]),
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulTesting", targets: ["HaulTesting"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        .target(name: "HaulCore"),
        .target(
            name: "Haul",
            dependencies: [
                "HaulCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "HaulTesting",
            dependencies: [
                "Haul",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "haul",
            dependencies: [
                "Haul",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "HaulCoreTests", dependencies: ["HaulCore"]),
        .testTarget(
            name: "HaulTests",
            dependencies: ["Haul", "HaulTesting", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(name: "HaulEndToEndTests", dependencies: ["Haul", "HaulTesting"]),
    ]
)
