// swift-tools-version:6.1
import PackageDescription

/// How the two executables are linked on Linux: by lld, with relative relocations packed (DT_RELR, which glibc 2.36
/// reads) and without exporting every symbol of the packages (the static standard library's arguments export them;
/// nothing looks them up). Otherwise a static binary of this size carries a relocation entry for every pointer in its
/// metadata, which the loader reads and applies at every start, and a symbol table it reads for every lookup: all of
/// it resident memory of every run. Unexported functions can also go with `--gc-sections`. Only the executables carry
/// these flags: SwiftPM refuses unsafe flags in the products a versioned dependency uses, and a program that embeds
/// Haul uses its libraries.
let executableLinking: [LinkerSetting] = [
    .unsafeFlags(
        ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic"],
        .when(platforms: [.linux]))
]

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "HaulCore", targets: ["HaulCore"]),
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulTesting", targets: ["HaulTesting"]),
        .library(name: "HaulAPI", targets: ["HaulAPI"]),
        .library(name: "HaulWire", targets: ["HaulWire"]),
        .library(name: "HaulServer", targets: ["HaulServer"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.1.4"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/swift-openapi-hummingbird.git", from: "2.1.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-openapi-generator.git", from: "1.14.3"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/LebJe/TOMLKit.git", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        .target(name: "HaulCore"),
        // The system calls Swift cannot reach: openat2(2), which glibc 2.36 does not wrap, and copy_file_range(2) and
        // pipe2(2), which need _GNU_SOURCE.
        .target(name: "CHaulSystem"),
        .target(
            name: "Haul",
            dependencies: [
                "HaulCore",
                "CHaulSystem",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                // AES-128-CBC, for HLS segments encrypted with a key.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // Whether a tracer was bootstrapped: AsyncHTTPClient's spans only for a real one.
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // The shared store of several workers: PostgreSQL, through postgres-nio's pooled client.
        .target(
            name: "HaulPostgres",
            dependencies: [
                "Haul",
                "HaulCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "HaulTesting",
            dependencies: [
                "Haul",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .target(
            name: "HaulAPI",
            dependencies: [.product(name: "OpenAPIRuntime", package: "swift-openapi-runtime")],
            resources: [.embedInCode("openapi.yaml")],
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
        // The API's wire: its types' fast codecs, the mapping between them and the engine's, and how a command finds
        // the daemon. The daemon and the command line both import it; the command line imports no server code.
        .target(
            name: "HaulWire",
            dependencies: [
                "Haul",
                "HaulAPI",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
            ]
        ),
        .target(
            name: "HaulServer",
            dependencies: [
                "Haul",
                "HaulAPI",
                "HaulWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "OpenAPIHummingbird", package: "swift-openapi-hummingbird"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            resources: [
                .embedInCode("Web/index.html"), .embedInCode("Web/app.js"), .embedInCode("Web/app.css"),
                .embedInCode("Web/icon.svg"),
            ]
        ),
        .executableTarget(
            name: "haul",
            dependencies: [
                "Haul",
                "HaulAPI",
                "HaulWire",
                "HaulServer",
                "HaulPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ],
            linkerSettings: executableLinking
        ),
        // bench/run.sh's Swift floor: the small files through AsyncHTTPClient with the guarantees and nothing else.
        .executableTarget(
            name: "haul-floor",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            linkerSettings: executableLinking
        ),
        .testTarget(
            name: "HaulCoreTests",
            dependencies: [
                "HaulCore", .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulTesting", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulEndToEndTests",
            dependencies: [
                "Haul",
                "HaulTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulPostgresTests",
            dependencies: [
                "HaulPostgres", "Haul", "HaulTesting", .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
        .testTarget(
            name: "HaulServerTests",
            dependencies: [
                "HaulServer",
                "HaulAPI",
                "HaulWire",
                "HaulCore",
                "HaulTesting",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
            ]
        ),
    ]
)
