import Foundation
import Haul
import HaulCore
import HaulWire
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How `haul serve` runs.
public struct DaemonOptions: Sendable {
    /// The state folder (store, token, socket, serve.json).
    public var stateDirectory: String
    /// The TCP listener's address.
    public var listenHost = "127.0.0.1"
    /// Its port; 0 picks a free one.
    public var listenPort = 7165
    /// The default folder of downloads.
    public var downloadDirectory = DaemonConfiguration.defaultDownloadDirectory()
    /// Further folders TCP requests may write to.
    public var allowedDirectories: [String] = []
    /// Further names TCP requests may carry in `Host`.
    public var allowedHosts: [String] = []
    /// Settings given on the command line; they replace the stored ones (and are stored).
    public var maxConcurrentDownloads: Int?
    /// The global rate limit given on the command line; 0 removes it.
    public var rateLimit: Int64?
    /// The most connections to one host across all downloads (the fleet's, on a shared store); 0 removes the limit,
    /// nil leaves it as stored.
    public var maxConnectionsPerHost: Int?
    /// The most downloads of one host at once; 0 removes the limit, nil leaves it as stored.
    public var maxDownloadsPerHost: Int?
    /// The connections per download given on the command line.
    public var connections: Int?
    /// The token given with `--token-file` or `HAUL_TOKEN`; nil uses (or makes) `STATE_DIR/token`.
    public var token: String?
    /// A PEM certificate chain and key: the TCP listener speaks TLS.
    public var tlsCertificate: String?
    /// The key of `tlsCertificate`.
    public var tlsKey: String?
    /// Where log messages go.
    public var logger = Logger(label: "haul")
    /// The schedule given on the command line or in the config file (nil leaves the stored one).
    public var schedule: [String]?
    /// The sort rules given on the command line or in the config file (nil leaves the stored ones).
    public var sortRules: [String]?
    /// The hooks and webhooks told of each download's end.
    public var notices = Notices()
    /// Settings read again while the daemon runs (SIGHUP re-reads the config file): each is applied as it comes.
    public var reloads: AsyncStream<DaemonReload>?
    /// Changes to the manager's configuration (tests inject clocks).
    public var configureManager: @Sendable (inout DownloadManager.Configuration) -> Void = { _ in }

    /// Options with the defaults for `stateDirectory`.
    public init(stateDirectory: String) {
        self.stateDirectory = stateDirectory
    }
}

/// A failure to start the daemon, with a message for people.
public struct DaemonError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public var description: String
}

/// `haul serve`: the download manager as a service. It locks the state folder, serves the API over TCP and over a
/// Unix socket beside the store, writes `serve.json`, and on SIGTERM or SIGINT stops accepting requests, closes the
/// event streams, and stops running downloads with their exact offsets (they resume on the next start).
public enum Daemon {
    /// Runs until SIGTERM or SIGINT (or the task is cancelled). `onReady` gets what `serve.json` holds once both
    /// listeners are up.
    public static func run(_ options: DaemonOptions, onReady: @escaping @Sendable (ServeFile) -> Void = { _ in })
        async throws
    {
        let logger = options.logger
        let state = options.stateDirectory
        // The state folder holds the token and the socket: a real folder of this user's, 0700, checked before
        // anything in it is made or read.
        let stateFolder: StateFolder
        do {
            stateFolder = try StateFolder.open(state)
            try stateFolder.restrictToOwner()
        } catch {
            throw DaemonError(description: error.message)
        }
        let lock = try lockStateDirectory(state)
        defer { close(lock) }
        try checkListenAddress(options.listenHost, options.listenPort)
        let token = try options.token ?? storedToken(in: stateFolder)
        var managerConfiguration = DownloadManager.Configuration(stateDirectory: state)
        // Held from the start; the network door's downloads are opened beneath them.
        managerConfiguration.allowedFolders = [options.downloadDirectory] + options.allowedDirectories
        managerConfiguration.persistsSettings = true
        // The folder's lock is held until the daemon exits: no other process opens the store meanwhile.
        managerConfiguration.ownsStateDirectory = true
        managerConfiguration.origin = .api
        managerConfiguration.engine.progressInterval = .milliseconds(250)
        managerConfiguration.logger = logger
        managerConfiguration.notices = options.notices
        options.configureManager(&managerConfiguration)
        let manager: DownloadManager
        do { manager = try DownloadManager(configuration: managerConfiguration) } catch {
            throw DaemonError(description: error.message)
        }
        if !AllowedFolders.resolvesInKernel {
            logger.notice(
                """
                openat2 is not available here (an older kernel, or a seccomp filter): folders are resolved beneath \
                the allowed ones one component at a time with O_NOFOLLOW
                """)
        }
        do { try await DaemonReload(options).apply(to: manager) } catch {
            throw DaemonError(description: error.message)
        }
        let reloading = options.reloads.map { reloads in
            Task {
                for await reload in reloads {
                    do throws(DownloadError) {
                        try await reload.apply(to: manager)
                        logger.notice("the config file was read again: its settings, hooks and webhooks apply now")
                    } catch {
                        logger.error("the config file's settings cannot be applied: \(error.message)")
                    }
                }
            }
        }
        defer { reloading?.cancel() }

        let usesTLS = options.tlsCertificate != nil
        let configuration = DaemonConfiguration(
            token: token, downloadDirectory: AllowedFolders.resolved(options.downloadDirectory),
            allowedDirectories: options.allowedDirectories.map(AllowedFolders.resolved),
            allowedHosts: options.allowedHosts,
            listenHost: options.listenHost, usesTLS: usesTLS)
        let metrics = DaemonMetrics()
        let socketPath = stateFolder.path(of: "haul.sock")
        // The lock is held: a socket left here is a dead daemon's.
        stateFolder.remove("haul.sock")
        var tls: TLSConfiguration?
        if let certificate = options.tlsCertificate, let key = options.tlsKey {
            do {
                tls = TLSConfiguration.makeServerConfiguration(
                    certificateChain: try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) },
                    privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
            } catch {
                throw DaemonError(description: "cannot load the TLS certificate or key: \(error)")
            }
        } else if !isLoopback(options.listenHost) {
            logger.warning(
                "listening on \(options.listenHost) without --tls-cert: the token travels in clear text over the network"
            )
        }
        let scheme = usesTLS ? "https" : "http"
        let readiness = Readiness(count: 2) { port in
            let file = ServeFile(
                url: "\(scheme)://\(HostAndPort.shown(options.listenHost, port: port))", token: token, pid: getpid(),
                socket: socketPath)
            do {
                try writeServeFile(file, in: stateFolder)
            } catch {
                logger.error("cannot write \(stateFolder.path(of: "serve.json")): \(error)")
            }
            logger.notice("haul serve: listening on \(file.url); sign in at \(file.url)/?token=\(token)")
            onReady(file)
        }
        // aria2.shutdown stops the daemon as SIGTERM does.
        let trigger = ShutdownTrigger()
        let network = try buildApplication(
            router: try buildRouter(
                manager: manager, configuration: configuration, door: .network, metrics: metrics,
                shutdown: { await trigger.fire() }),
            address: .hostname(options.listenHost, port: options.listenPort), tls: tls,
            fastDoor: FastDoor(
                manager: manager, configuration: configuration, executor: EventLoopTaskExecutor(group: .singleton)),
            logger: logger
        ) { channel in
            await readiness.ready(port: channel.localAddress?.port)
        }
        let local = try buildApplication(
            router: try buildRouter(
                manager: manager, configuration: configuration, door: .socket, metrics: metrics,
                shutdown: { await trigger.fire() }),
            address: .unixDomainSocket(path: socketPath), logger: logger
        ) { _ in
            stateFolder.restrictSocket("haul.sock")
            await readiness.ready(port: nil)
        }
        var group = ServiceGroupConfiguration(
            services: [
                .init(service: ManagerService(manager: manager, metrics: metrics)),
                .init(service: network),
                .init(service: local),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger)
        // Stopped within 5 s whatever a client does: what has not ended by then is cancelled.
        group.maximumGracefulShutdownDuration = .seconds(4)
        group.maximumCancellationDuration = .seconds(1)
        defer {
            stateFolder.remove("serve.json")
            stateFolder.remove("haul.sock")
        }
        do {
            // Requests are handled on the event loop that read them (see `EventLoopTaskExecutor`).
            try await withTaskExecutorPreference(EventLoopTaskExecutor(group: .singleton)) {
                let services = ServiceGroup(configuration: group)
                trigger.arm(services)
                try await services.run()
            }
        } catch {
            await manager.shutdown()
            throw DaemonError(description: "\(error)")
        }
    }

    /// Fails with a plain sentence when nothing can listen at `host:port` (another program listens there, or the
    /// address is not this machine's), before anything starts: the server's own bind fails later, deep in its
    /// startup, with the system call's text and errors of the services stopped around it. Bound as the server binds
    /// (`SO_REUSEADDR`), then closed; a program that takes the port in between still fails the server's bind.
    static func checkListenAddress(_ host: String, _ port: Int) throws {
        guard port != 0 else { return }
        let address: SocketAddress
        do { address = try SocketAddress.makeAddressResolvingHost(host, port: port) } catch {
            throw DaemonError(description: "cannot listen on \(host):\(port): the name \(host) does not resolve")
        }
        let descriptor = socket(Int32(address.protocol.rawValue), Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = address.withSockAddr { pointer, size in bind(descriptor, pointer, socklen_t(size)) }
        guard bound != 0 else { return }
        let code = errno
        let shown = HostAndPort.shown(host, port: port)
        switch code {
        case EADDRINUSE:
            throw DaemonError(
                description: "cannot listen on \(shown): another program listens there; choose another with --listen "
                    + "HOST:PORT")
        case EADDRNOTAVAIL:
            throw DaemonError(description: "cannot listen on \(shown): \(host) is not an address of this machine")
        case EACCES:
            throw DaemonError(
                description: "cannot listen on \(shown): ports below 1024 need privileges; choose a higher port")
        default:
            throw DaemonError(description: "cannot listen on \(shown): \(String(cString: strerror(code)))")
        }
    }

    /// Takes the state folder's lock for good, or fails naming who holds it.
    private static func lockStateDirectory(_ state: String) throws -> Int32 {
        switch StateLock.acquire(state, exclusive: true) {
        case .acquired(let descriptor):
            return descriptor
        case .held:
            if let file = ServeFile.read(in: state), kill(file.pid, 0) == 0 {
                throw DaemonError(
                    description: "another haul serve (pid \(file.pid), \(file.url)) owns the state folder \(state); "
                        + "stop it first")
            }
            throw DaemonError(
                description: "a haul command is using the state folder \(state); start haul serve when it ends")
        case .failed(let message):
            throw DaemonError(description: message)
        }
    }

    /// The token kept in `STATE_DIR/token` (0600, readable by its owner alone), made from 32 random bytes on the
    /// first start.
    private static func storedToken(in state: StateFolder) throws -> String {
        do {
            if let data = try state.read("token", secret: true) {
                let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                if !token.isEmpty { return token }
                state.remove("token")
            }
            var generator = SystemRandomNumberGenerator()
            let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }
                .joined()
            try state.create("token", Data(token.utf8))
            return token
        } catch {
            throw DaemonError(description: "the token: \(error.message)")
        }
    }

    /// Writes `serve.json` (0600) by renaming a complete temporary file over it, within the state folder.
    private static func writeServeFile(_ file: ServeFile, in state: StateFolder) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        try state.replace("serve.json", with: try encoder.encode(file))
    }

    static func isLoopback(_ host: String) -> Bool {
        let lowered = host.lowercased()
        return lowered == "localhost" || lowered.hasPrefix("127.") || lowered == "::1" || lowered == "[::1]"
    }
}

/// Starts the graceful shutdown of the daemon's services from a request (`aria2.shutdown`).
private final class ShutdownTrigger: Sendable {
    private let group = Mutex<ServiceGroup?>(nil)

    func arm(_ services: ServiceGroup) { group.withLock { $0 = services } }

    func fire() async { await group.withLock { $0 }?.triggerGracefulShutdown() }
}

/// Counts listeners coming up; runs `action` once all have, with the TCP port.
private actor Readiness {
    private var remaining: Int
    private var port: Int?
    private let action: @Sendable (Int) -> Void

    init(count: Int, action: @escaping @Sendable (Int) -> Void) {
        remaining = count
        self.action = action
    }

    func ready(port: Int?) {
        if let port { self.port = port }
        remaining -= 1
        if remaining == 0 { action(self.port ?? 0) }
    }
}

/// The manager as a service: it runs (and publishes stats and heartbeats) until a graceful shutdown, then stops the
/// running downloads with their exact offsets. Its events feed the metrics meanwhile.
struct ManagerService: Service {
    let manager: DownloadManager
    let metrics: DaemonMetrics

    func run() async throws {
        let events = manager.events(wanted: DaemonMetrics.counts)
        let metrics = self.metrics
        async let observed: Void = metrics.observe(events)
        let manager = self.manager
        // A worker that can no longer run throws: the daemon stops, and says why.
        var failure: DownloadError?
        do { try await cancelWhenGracefulShutdown { try await manager.run() } } catch {
            failure = error as? DownloadError
        }
        events.cancel()
        await observed
        if let failure { throw failure }
    }
}

/// The settings of a running daemon that its config file changes when read again (SIGHUP): the four stored settings
/// (nil leaves one as stored) and the hooks and webhooks. The listener, the state folder, the store and TLS need a
/// restart.
public struct DaemonReload: Sendable {
    public var maxConcurrentDownloads: Int?
    /// 0 removes the limit.
    public var rateLimit: Int64?
    public var connections: Int?
    /// 0 removes the limit.
    public var maxConnectionsPerHost: Int?
    /// 0 removes the limit.
    public var maxDownloadsPerHost: Int?
    /// Replaces the stored schedule.
    public var schedule: [String]?
    /// Replaces the stored sort rules.
    public var sortRules: [String]?
    public var notices: Notices

    public init(_ options: DaemonOptions) {
        maxConcurrentDownloads = options.maxConcurrentDownloads
        rateLimit = options.rateLimit
        connections = options.connections
        maxConnectionsPerHost = options.maxConnectionsPerHost
        maxDownloadsPerHost = options.maxDownloadsPerHost
        schedule = options.schedule
        sortRules = options.sortRules
        notices = options.notices
    }

    func apply(to manager: DownloadManager) async throws(DownloadError) {
        // The hooks first: once the settings show the change, the hooks have it too.
        await manager.setNotices(notices)
        var settings = await manager.currentSettings()
        if let maxConcurrentDownloads { settings.maxConcurrentDownloads = maxConcurrentDownloads }
        if let rateLimit { settings.rateLimit = rateLimit == 0 ? nil : rateLimit }
        if let connections { settings.connectionsPerDownload = connections }
        if let perHost = maxConnectionsPerHost { settings.maxConnectionsPerHost = perHost == 0 ? nil : perHost }
        if let perHost = maxDownloadsPerHost { settings.maxDownloadsPerHost = perHost == 0 ? nil : perHost }
        if let schedule { settings.schedule = schedule }
        if let sortRules { settings.sortRules = sortRules }
        try await manager.update(settings)
    }
}
