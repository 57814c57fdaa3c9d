// Shared by every fuzz target: the input as text, and a check that crashes (so libFuzzer keeps the input) with a
// message naming the broken property.

/// The fuzzer's bytes as a string (invalid UTF-8 repaired, as the engine reads a header or a file).
func text(_ start: UnsafeRawPointer?, _ count: Int) -> String {
    guard let start, count > 0 else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: start, count: count), as: UTF8.self)
}

/// The fuzzer's bytes.
func bytes(_ start: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
    guard let start, count > 0 else { return [] }
    return Array(UnsafeRawBufferPointer(start: start, count: count))
}

/// Stops the run, naming the property and the input, when `condition` is false.
func expect(_ condition: Bool, _ property: @autoclosure () -> String, input: String) {
    if !condition { fatalError("\(property()) — input \(String(reflecting: input))") }
}
