import ArgumentParser
import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulWire

extension HaulCommand.Get {
    /// With a daemon: hand the downloads to it and show their progress from its event stream, with the same output,
    /// summary and exit status as without one. SIGINT or SIGTERM pause the downloads this command added.
    func runThroughDaemon(_ client: DaemonClient, list entries: [URLList.Entry], output: Output) async throws {
        let network = try transfer.networkForDaemon()
        let list = entries.map(\.url)
        let items = try entries.map { entry in
            try transfer.item(
                entry, output: self.output, directory: directory, isLocal: client.isLocal,
                continuePartial: `continue`,
                computesSHA256: json, network: network)
        }
        let batch = RemoteBatch()
        let started = ContinuousClock.now
        let follower = batch.follow(client, output: output)
        let board = Task { await batch.render(on: output, single: list.count == 1, since: started) }
        await batch.waitUntilStarted()
        if await batch.isFinished {
            follower.cancel()
            await board.value
            throw ExitCode(1)
        }
        // Add them all at once; when the daemon refuses one, add them one by one to name each refusal.
        var outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)] = []
        var added: [(url: String, download: BriefDownload)] = []
        do {
            added = Array(zip(list, try await client.add(items)))
        } catch let error as ClientError where error.index != nil {
            for (url, item) in zip(list, items) {
                do {
                    added.append((url, try await client.add([item])[0]))
                } catch {
                    outcomes.append((url, .failure(error)))
                    output.failedToAdd(url: url, error)
                }
            }
        } catch {
            output.error(error)
            follower.cancel()
            await batch.finish()
            await board.value
            throw ExitCode(1)
        }
        let snapshots = added.map(\.download.snapshot)
        await batch.track(snapshots)
        let ours = snapshots.filter { $0.state == .queued || $0.state.isActive }.map(\.id)
        let signals = SignalWatcher {
            for id in ours { _ = try? await client.command("pause", id.rawValue) }
            await batch.finish()
        }
        await batch.waitUntilDone()
        follower.cancel()
        await board.value
        var unfinished = 0
        for ((url, _), first) in zip(added, snapshots) {
            guard let last = await batch.download(first.id) else {
                // Removed by another client of the daemon (`track` keeps a state for each until then): no file, and
                // nothing the board would have told.
                let error = DownloadError(.notFound, "removed by another client of the daemon")
                output.failedToAdd(url: url, error)
                output.failedJSON(url: url, error)
                outcomes.append((url, .failure(error)))
                continue
            }
            if !last.state.isTerminal { unfinished += 1 }
            if last.state == .completed,
                let result = Self.result(
                    of: last, since: await batch.startedRunning(first.id) ?? started,
                    resumedFrom: await batch.resumedFrom(first.id))
            {
                var result = result
                result.wasAlreadyComplete = first.state == .completed
                outcomes.append((url, .success(result)))
            } else {
                let error =
                    last.error
                    ?? DownloadError(
                        last.state == .cancelled ? .cancelled : .illegalTransition,
                        "download \(last.state.rawValue) by another client of the daemon")
                outcomes.append((url, .failure(error)))
            }
        }
        try output.conclude(outcomes, count: list.count, signal: signals.received, unfinished: unfinished)
    }

    /// The result of a download the daemon completed.
    static func result(of download: DownloadSnapshot, since start: ContinuousClock.Instant, resumedFrom: Int64?)
        -> DownloadResult?
    {
        guard download.state == .completed, let path = download.path else { return nil }
        let elapsed = ContinuousClock.now - start
        return DownloadResult(
            id: download.id, url: download.url, path: path, bytes: download.totalBytes ?? download.receivedBytes,
            sha256: download.sha256,
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            resumedFrom: resumedFrom ?? 0, wasAlreadyComplete: false)
    }
}
