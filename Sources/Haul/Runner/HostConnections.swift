import Synchronization

/// The connections to each host across all of a manager's downloads, capped by `maxConnectionsPerHost`.
///
/// A connection counts from its request until its body ends or breaks, as a server counts the connections it is
/// serving (nginx's `limit_conn`); an idle keep-alive connection in the pool does not count. The host is the one of the
/// download's URL: a redirect target counts against the host that sent the client there.
///
/// On one machine the cap is the limit itself. A worker of a fleet may open only the slots the store granted it for a
/// host (`granted`), so that the workers together stay within the one limit: a connection that finds no free slot
/// asks for a grant (`onUnmet`) and waits.
final class HostConnections: Sendable {
    struct Host: Sendable, Equatable {
        /// Connections open now.
        var inUse = 0
        /// Connections waiting for a slot.
        var waiting = 0
        /// The slots the fleet's store granted this worker (fleet only).
        var granted = 0
    }

    private struct State {
        var limit: Int?
        var hosts: [String: Host] = [:]
        /// While a request for grants is out: the slots of each host asked to be kept (those in use then), the
        /// most taken meanwhile, so that the store's answer never falls below what is open.
        var asked: [String: Int]?
        var onUnmet: (@Sendable () -> Void)?
        /// The connections parked until a slot of their host may be free, in order of arrival.
        var waiters: [String: [(ticket: UInt64, continuation: CheckedContinuation<Void, Never>)]] = [:]
        var nextTicket: UInt64 = 0
        /// Waits cancelled before they parked.
        var cancelled: Set<UInt64> = []
    }

    private let state: Mutex<State>
    /// Whether slots come from the store's grants (a worker of a fleet) rather than from the limit alone.
    let isGranted: Bool

    init(limit: Int?, granted: Bool = false) {
        state = Mutex(State(limit: limit))
        isGranted = granted
    }

    /// Sets what is called (often, while a connection waits for a grant, and when a connection ends with slots to
    /// spare) to have the grants asked for again.
    func onUnmet(_ handler: @escaping @Sendable () -> Void) { state.withLock { $0.onUnmet = handler } }

    var limit: Int? { state.withLock { $0.limit } }

    func setLimit(_ limit: Int?) {
        let woken = state.withLock { state in
            state.limit = limit
            return state.waiters.keys.flatMap { Self.wake($0, all: true, in: &state) }
        }
        for continuation in woken { continuation.resume() }
    }

    /// A slot held for one connection to a host; `release()` gives it back (once).
    struct Slot: Sendable {
        fileprivate let owner: HostConnections?
        fileprivate let host: String

        func release() { owner?.release(host) }
    }

    /// Takes a slot for a connection to `host`, waiting its turn while none is free (woken when a connection to the
    /// host ends or the grants change); meanwhile `touch` is called every tenth of a second of `clock`, to tell that
    /// the connection is alive, only waiting.
    func acquire(_ host: String, clock: EngineClock, touch: @escaping @Sendable () -> Void) async throws -> Slot {
        if let slot = take(host, wasWaiting: false) { return slot }
        let toucher = Task { [weak self] in
            while !Task.isCancelled {
                do { try await clock.sleep(.milliseconds(100)) } catch { return }
                touch()
                if self?.isGranted == true { self?.state.withLock { $0.onUnmet }?() }
            }
        }
        defer { toucher.cancel() }
        if isGranted { state.withLock { $0.onUnmet }?() }
        while true {
            let ticket = state.withLock { state -> UInt64 in
                state.nextTicket += 1
                return state.nextTicket
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let parked = state.withLock { state -> Bool in
                        if state.cancelled.remove(ticket) != nil { return false }
                        // A slot freed since the last try: its release found no one parked to wake.
                        if hasRoom(host, in: state) { return false }
                        state.waiters[host, default: []].append((ticket, continuation))
                        return true
                    }
                    if !parked { continuation.resume() }
                }
            } onCancel: {
                let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                    if let index = state.waiters[host]?.firstIndex(where: { $0.ticket == ticket }) {
                        return state.waiters[host]?.remove(at: index).continuation
                    }
                    state.cancelled.insert(ticket)
                    return nil
                }
                continuation?.resume()
            }
            state.withLock { _ = $0.cancelled.remove(ticket) }
            if Task.isCancelled {
                // A wake this wait took is passed on to the next in line.
                let next = state.withLock { state in
                    state.hosts[host]?.waiting -= 1
                    return Self.wake(host, all: false, in: &state)
                }
                for continuation in next { continuation.resume() }
                throw CancellationError()
            }
            if let slot = take(host, wasWaiting: true) { return slot }
        }
    }

    /// The most connections to `host` that may be open now.
    private func cap(_ host: String, in state: State) -> Int? {
        guard let limit = state.limit else { return nil }
        guard isGranted else { return limit }
        let granted = state.hosts[host]?.granted ?? 0
        return min(limit, granted, state.asked.map { $0[host] ?? 0 } ?? granted)
    }

    private func hasRoom(_ host: String, in state: State) -> Bool {
        guard let cap = cap(host, in: state) else { return true }
        return (state.hosts[host]?.inUse ?? 0) < cap
    }

    /// A slot of `host` when one is free (or no limit holds); else counts the connection as waiting (once).
    private func take(_ host: String, wasWaiting: Bool) -> Slot? {
        state.withLock { state -> Slot? in
            guard let cap = cap(host, in: state) else {
                if wasWaiting { state.hosts[host]?.waiting -= 1 }
                return Slot(owner: nil, host: host)
            }
            var entry = state.hosts[host] ?? Host()
            if entry.inUse < cap {
                entry.inUse += 1
                if wasWaiting { entry.waiting -= 1 }
                state.hosts[host] = entry
                return Slot(owner: self, host: host)
            }
            if !wasWaiting { entry.waiting += 1 }
            state.hosts[host] = entry
            return nil
        }
    }

    /// Wakes the first connection waiting for `host`, or all of them (the limit or the grants changed).
    private static func wake(_ host: String, all: Bool, in state: inout State) -> [CheckedContinuation<Void, Never>] {
        guard var waiting = state.waiters[host], !waiting.isEmpty else { return [] }
        let woken = all ? waiting.map(\.continuation) : [waiting.removeFirst().continuation]
        state.waiters[host] = all || waiting.isEmpty ? nil : waiting
        return woken
    }

    private func release(_ host: String) {
        let (surplus, woken) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            guard var entry = state.hosts[host] else { return (false, []) }
            entry.inUse -= 1
            state.hosts[host] = entry.inUse == 0 && entry.waiting == 0 && entry.granted == 0 ? nil : entry
            return (entry.granted > entry.inUse + entry.waiting, Self.wake(host, all: false, in: &state))
        }
        for continuation in woken { continuation.resume() }
        if isGranted, surplus { state.withLock { $0.onUnmet }?() }
    }

    // MARK: Grants (a worker of a fleet)

    /// Each host this worker has connections to, waits for, or holds slots of.
    func hosts() -> [String: Host] { state.withLock { $0.hosts } }

    /// Each host this worker has connections to, waits for, or holds slots of, as a request for grants begins: no
    /// more connections open until its answer (`grant`) than are open now, the slots it asks to keep.
    func beginRequest() -> [String: Host] {
        state.withLock { state in
            state.asked = state.hosts.mapValues { min($0.inUse, $0.granted) }
            return state.hosts
        }
    }

    /// Takes in the store's grants (hosts missing from `grants` hold no slot now); nil when the request failed (the
    /// earlier grants stay).
    func grant(_ grants: [String: Int]?) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.asked = nil
            if let grants {
                for (host, var entry) in state.hosts {
                    entry.granted = grants[host] ?? 0
                    state.hosts[host] = entry.inUse == 0 && entry.waiting == 0 && entry.granted == 0 ? nil : entry
                }
                for (host, slots) in grants where state.hosts[host] == nil && slots > 0 {
                    state.hosts[host] = Host(granted: slots)
                }
            }
            return state.waiters.keys.flatMap { Self.wake($0, all: true, in: &state) }
        }
        for continuation in woken { continuation.resume() }
    }
}
