import HaulCore

// The event stream's reader (text/event-stream): the same bytes give the same events however the network splits
// them (here at two points the input chooses), an event's type and id never hold a line break, and no line is
// longer than what was fed.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = bytes(start, count)
    let shown = String(decoding: input, as: UTF8.self)
    var whole = ServerSentEventParser()
    guard let expected = try? whole.feed(input) else { return 0 }
    let first = input.isEmpty ? 0 : Int(input[0]) % (input.count + 1)
    let second = input.count < 2 ? first : first + Int(input[input.count - 1]) % (input.count - first + 1)
    var split = ServerSentEventParser()
    var events: [ServerSentEventParser.Event] = []
    do {
        events += try split.feed(input[..<first])
        events += try split.feed(input[first..<second])
        events += try split.feed(input[second...])
    } catch {
        expect(false, "a split stream failed where the whole did not", input: shown)
    }
    expect(events == expected, "same events split at \(first) and \(second)", input: shown)
    for event in expected {
        for field in [event.event, event.id].compactMap({ $0 }) {
            expect(!field.contains("\n") && !field.contains("\r"), "no line break in a field", input: shown)
        }
        expect(event.data.utf8.count <= input.count * 3, "no more data than fed", input: shown)
    }
    return 0
}
