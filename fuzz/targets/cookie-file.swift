import HaulCore

// Netscape cookie files and --cookie data: never a crash; each cookie has a domain without a leading dot, a name
// and a path; a Cookie header built from them has no line break or control character, so it cannot inject a header.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    if let file = try? CookieFile(parsing: input) {
        for cookie in file.cookies {
            expect(!cookie.domain.isEmpty && !cookie.domain.hasPrefix("."), "a domain", input: input)
            expect(!cookie.name.isEmpty && !cookie.path.isEmpty, "a name and a path", input: input)
            let header = file.header(host: cookie.domain, path: cookie.path, secure: true, now: Int64.min)
            expect(
                header != nil || cookie.expires == Int64.min, "a cookie matches its own domain and path", input: input)
            expect(
                header.map(RequestHeader.isValidValue) ?? true, "a header value without control characters",
                input: input)
        }
    }
    if let pairs = try? CookieFile.pairs(input) {
        expect(RequestHeader.isValidValue(pairs), "--cookie data without control characters", input: input)
    }
    return 0
}
