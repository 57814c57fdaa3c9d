/// Reads a `text/event-stream` (the HTML standard's "Server-sent events", §9.2.6) as its bytes arrive: `feed` takes
/// each chunk as the network delivers it and returns the events it completed.
///
/// The command line reads the daemon's event stream with this instead of swift-openapi-runtime's
/// `asDecodedServerSentEvents`, whose line reader copies the rest of its buffer for every line it takes (and its
/// event reader removes the first of its pending lines one at a time): with the daemon's events arriving in chunks of
/// hundreds of kilobytes (a `snapshot` of 1000 downloads, or a client that fell behind) that is quadratic, and above
/// glibc's 128 KiB threshold every copy is an `mmap` and a `munmap`. This reader looks at each byte once and drops
/// what it consumed once a chunk.
///
/// As the standard says: lines end with CRLF, LF or CR (also split across chunks); a line starting with `:` is a
/// comment; a field's value is what follows the first `:`, less one space; `data` lines are joined with line feeds;
/// `id` is ignored when it holds a NUL and `retry` unless it is all digits; unknown fields are ignored; an empty line
/// ends the event, which is dispatched only when it had data; a byte order mark at the very start is dropped.
/// Unlike a browser's `EventSource`, each event reports only the `id` it carried itself. Text is UTF-8, invalid
/// sequences replaced.
public struct ServerSentEventParser: Sendable {
    public struct Event: Equatable, Sendable {
        public var event: String?
        public var data: String
        public var id: String?
        public var retry: Int?

        public init(event: String? = nil, data: String, id: String? = nil, retry: Int? = nil) {
            self.event = event
            self.data = data
            self.id = id
            self.retry = retry
        }
    }

    /// A line longer than this (no line ending in that many bytes) ends the stream with an error: a `snapshot` of
    /// 20,000 downloads is about 20 MB on one line.
    public static let maximumLineLength = 256 << 20

    public struct LineTooLong: Error, CustomStringConvertible {
        public var description: String {
            "the event stream sent a line longer than \(ServerSentEventParser.maximumLineLength) bytes"
        }
    }

    /// The most of its data buffer an event leaves for the next.
    static let keptCapacity = 64 << 10

    /// Bytes of a line not yet ended.
    private var pending: [UInt8] = []
    /// Whether the last byte seen was a CR (a LF right after it belongs to the same line ending).
    private var afterCR = false
    private var atStart = true
    private var type: String?
    private var data: [UInt8] = []
    private var hasData = false
    private var id: String?
    private var retry: Int?

    public init() {}

    /// Takes the next bytes of the stream and returns the events they completed, in order.
    public mutating func feed(_ chunk: some Collection<UInt8>) throws(LineTooLong) -> [Event] {
        var events: [Event] = []
        let bytes = Array(chunk)
        var lineStart = 0
        var index = 0
        if afterCR, let first = bytes.first {
            afterCR = false
            if first == 0x0A {
                index = 1
                lineStart = 1
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            guard byte == 0x0A || byte == 0x0D else {
                index += 1
                continue
            }
            if pending.isEmpty {
                line(bytes[lineStart..<index], into: &events)
            } else {
                pending.append(contentsOf: bytes[lineStart..<index])
                let whole = pending
                pending = []
                line(whole[...], into: &events)
            }
            index += 1
            if byte == 0x0D {
                if index < bytes.count {
                    if bytes[index] == 0x0A { index += 1 }
                } else {
                    afterCR = true
                }
            }
            lineStart = index
        }
        if lineStart < bytes.count {
            guard pending.count + bytes.count - lineStart <= Self.maximumLineLength else { throw LineTooLong() }
            pending.append(contentsOf: bytes[lineStart...])
        }
        return events
    }

    /// Handles one line, its ending removed.
    private mutating func line(_ line: ArraySlice<UInt8>, into events: inout [Event]) {
        var line = line
        if atStart {
            // A byte order mark is dropped once, at the very start (the first line, however it was split).
            atStart = false
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line = line.dropFirst(3) }
        }
        guard !line.isEmpty else {
            if hasData {
                events.append(
                    Event(event: type, data: String(decoding: data, as: UTF8.self), id: id, retry: retry))
            }
            type = nil
            // A large event's buffer (a snapshot of many downloads is tens of megabytes) is let go, not kept for the
            // small events that follow.
            if data.capacity > Self.keptCapacity { data = [] } else { data.removeAll(keepingCapacity: true) }
            hasData = false
            id = nil
            retry = nil
            return
        }
        if line.first == UInt8(ascii: ":") { return }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let name = line[line.startIndex..<(colon ?? line.endIndex)]
        var value = colon.map { line[line.index(after: $0)...] } ?? line[line.endIndex...]
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        if name.elementsEqual("data".utf8) {
            if hasData { data.append(0x0A) }
            data.append(contentsOf: value)
            hasData = true
        } else if name.elementsEqual("event".utf8) {
            type = String(decoding: value, as: UTF8.self)
        } else if name.elementsEqual("id".utf8) {
            if !value.contains(0) { id = String(decoding: value, as: UTF8.self) }
        } else if name.elementsEqual("retry".utf8) {
            if !value.isEmpty, value.count <= 18,
                value.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            {
                retry = Int(String(decoding: value, as: UTF8.self))
            }
        }
    }
}
