import ArgumentParser
import Dispatch
import Foundation
import Haul
import HaulCore
import HaulServer
import Logging

#if canImport(Glibc)
    import Glibc
#endif

extension HaulCommand.Serve {
    /// These flags with the config file's keys filled in where no flag was given; each key's value is checked as
    /// its flag's is, and refused with the file's name and the key's line.
    func withConfig() throws -> Self {
        var serve = self
        guard let config = try ConfigFile.load(config) else { return serve }
        for entry in config.entries {
            let value = entry.values.first ?? ""
            let path = (value as NSString).expandingTildeInPath
            func number() throws -> Int {
                guard let number = Int(value) else { throw config.refusal(entry, "'\(value)' is not a whole number") }
                return number
            }
            switch entry.key {
            case "listen": serve.listen = serve.listen ?? value
            case "download-dir": serve.downloadDir = serve.downloadDir ?? path
            case "allow-dir":
                if serve.allowDirs.isEmpty {
                    serve.allowDirs = entry.values.map { ($0 as NSString).expandingTildeInPath }
                }
            case "allow-host": if serve.allowHosts.isEmpty { serve.allowHosts = entry.values }
            case "state-dir": serve.stateDir = serve.stateDir ?? path
            case "store": serve.store = serve.store ?? value
            case "worker": serve.worker = serve.worker ?? value
            case "lease": serve.lease = serve.lease ?? value
            case "fleet-jobs": serve.fleetJobs = try serve.fleetJobs ?? number()
            case "jobs": serve.jobs = try serve.jobs ?? number()
            case "limit-rate": serve.limitRate = serve.limitRate ?? value
            case "max-connections-per-host": serve.maxConnectionsPerHost = try serve.maxConnectionsPerHost ?? number()
            case "max-per-host": serve.maxDownloadsPerHost = try serve.maxDownloadsPerHost ?? number()
            case "connections": serve.connections = try serve.connections ?? number()
            case "token-file": serve.tokenFile = serve.tokenFile ?? path
            case "tls-cert": serve.tlsCert = serve.tlsCert ?? path
            case "tls-key": serve.tlsKey = serve.tlsKey ?? path
            case "log-level": serve.logLevel = serve.logLevel ?? value
            case "schedule": if serve.schedule.isEmpty { serve.schedule = entry.values }
            case "sort": if serve.sortRules.isEmpty { serve.sortRules = entry.values }
            default: continue  // the hooks' and webhooks' keys, merged below
            }
            do { try serve.validate() } catch let error as ValidationError {
                throw config.refusal(entry, error.message)
            }
        }
        try serve.notices.merge(config)
        return serve
    }

    /// The settings SIGHUP reads again from the config file (merged into these flags, the command line's), as the
    /// daemon applies them; a file that no longer reads is logged and changes nothing. Settings that need a restart
    /// (listener, folders, store, TLS) are not applied: a change to one is logged, naming its key, so that an edit
    /// that seemingly took is not mistaken for one in force.
    /// `started` is what the daemon started with (these flags with the file as it was then).
    func reloads(startedAs started: Self, logger: Logger) -> AsyncStream<DaemonReload> {
        let (stream, continuation) = AsyncStream.makeStream(of: DaemonReload.self)
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        let original = self
        source.setEventHandler {
            do {
                let serve = try original.withConfig()
                let changed = serve.restartOnlyKeys(differingFrom: started)
                if !changed.isEmpty {
                    logger.notice(
                        "SIGHUP: the config file changes \(changed.joined(separator: ", ")), which apply when haul serve starts again"
                    )
                }
                var options = DaemonOptions(stateDirectory: "")
                options.maxConcurrentDownloads = serve.jobs
                options.rateLimit = serve.limitRate.flatMap(TokenBucket.parseLimit)
                options.connections = serve.connections
                options.maxConnectionsPerHost = serve.maxConnectionsPerHost
                options.maxDownloadsPerHost = serve.maxDownloadsPerHost
                options.schedule = serve.schedule.isEmpty ? nil : serve.schedule
                options.sortRules = serve.sortRules.isEmpty ? nil : serve.sortRules
                options.notices = try serve.notices.notices()
                continuation.yield(DaemonReload(options))
            } catch let error as ValidationError {
                logger.error("SIGHUP: the config file is not applied: \(error.message)")
            } catch {
                logger.error("SIGHUP: the config file is not applied: \(error)")
            }
        }
        source.resume()
        // Kept for the daemon's life: the process ends with it.
        Self.hangupSource = source
        return stream
    }

    /// The config keys whose values here differ from `other`'s among those a running daemon cannot change.
    func restartOnlyKeys(differingFrom other: Self) -> [String] {
        let pairs: [(String, Bool)] = [
            ("listen", listen == other.listen), ("download-dir", downloadDir == other.downloadDir),
            ("allow-dir", allowDirs == other.allowDirs), ("allow-host", allowHosts == other.allowHosts),
            ("state-dir", stateDir == other.stateDir), ("store", store == other.store),
            ("worker", worker == other.worker), ("lease", lease == other.lease),
            ("fleet-jobs", fleetJobs == other.fleetJobs), ("token-file", tokenFile == other.tokenFile),
            ("tls-cert", tlsCert == other.tlsCert), ("tls-key", tlsKey == other.tlsKey),
            ("log-level", logLevel == other.logLevel),
        ]
        return pairs.filter { !$0.1 }.map(\.0)
    }

    nonisolated(unsafe) private static var hangupSource: (any DispatchSourceSignal)?
}
