/// One of the places a download's file is fetched from, as its transfer sees it now: the URL the user gave (the
/// first) or one of its mirrors.
public struct MirrorStatus: Sendable, Hashable, Codable {
    /// Where a mirror stands.
    public enum State: String, Sendable, Hashable, Codable {
        /// Not asked yet: its bytes do not count until it is checked.
        case waiting
        /// Its answer for the sample range is being compared with the bytes held.
        case checking
        /// Trusted: it serves segments.
        case active
        /// Left out of this run, for `reason`.
        case dropped
    }

    /// Where it stands.
    public var state: State
    /// Why it was dropped.
    public var reason: String?
    /// Its connections open now.
    public var connections: Int
    /// The bytes it sent that were written, in this run.
    public var receivedBytes: Int64
    /// Its speed over the last seconds.
    public var bytesPerSecond: Double

    /// Makes a status.
    public init(
        state: State, reason: String? = nil, connections: Int = 0, receivedBytes: Int64 = 0, bytesPerSecond: Double = 0
    ) {
        self.state = state
        self.reason = reason
        self.connections = connections
        self.receivedBytes = receivedBytes
        self.bytesPerSecond = bytesPerSecond
    }
}
