import HaulCore

// Sort rules (`--sort PATTERN=FOLDER`, the API's sortRules): reading never crashes; a rule that reads has a pattern and
// a relative folder with no empty, . or .. part, and matching it against any name never crashes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let rules = try? SortRules(parsing: [input]), let rule = rules.rules.first else { return 0 }
    expect(!rule.pattern.isEmpty && !rule.folder.hasPrefix("/"), "a pattern and a relative folder", input: input)
    let parts = rule.folder.split(separator: "/", omittingEmptySubsequences: false)
    expect(!parts.contains { $0.isEmpty || $0 == "." || $0 == ".." }, "plain folder parts", input: input)
    _ = rules.folder(name: input, contentType: input, url: input)
    return 0
}
