import HaulCore

// Proxy URLs and no_proxy lists (the environment's *_proxy variables, --proxy, --noproxy): a parsed proxy has a host
// and a port in 1...65535, its display never shows the password, an error never quotes it; every list matches a
// host when it holds `*`, and a name always matches a list made of itself.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    // The first line is a proxy URL, the second a no_proxy list, the third a host.
    let lines = input.split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
    let proxyText = lines[0]
    // The password as a user writes it: between the last ':' before the last '@' and that '@'.
    var password: String?
    var rest = proxyText
    if let at = proxyText.lastIndex(of: "@"), let colon = proxyText[..<at].lastIndex(of: ":") {
        password = String(proxyText[proxyText.index(after: colon)..<at])
        rest = String(proxyText[...colon]) + String(proxyText[at...])
    }
    do {
        let proxy = try ProxyEndpoint(parsing: proxyText)
        expect(!proxy.host.isEmpty, "a host", input: input)
        expect((1...65535).contains(proxy.port), "a port", input: input)
        // The display may hold the password's text by chance (a password "xyz:" and a host ending in "xyz"), so it
        // is compared with the display of the same URL with another password: it must not change.
        if let password, let at = proxyText.lastIndex(of: "@"), let colon = proxyText[..<at].lastIndex(of: ":"),
            !password.contains(where: { "/?#".contains($0) })
        {
            let other = String(proxyText[...colon]) + "x" + String(proxyText[at...])
            if let twin = try? ProxyEndpoint(parsing: other) {
                expect(twin.display == proxy.display, "the display hides the password", input: input)
            }
        }
    } catch {
        // The message's own words may hold a short password ("sock" in "socks5://"), so only what it quotes from
        // the input is searched: with no quote in the input, the quoted parts are every other piece between quotes.
        // A password with '/', '?' or '#' is not what the parser takes for one (it cuts the address there), and one
        // with '*' can be spelt by the mask beside the scheme ("//**" in "socks5://***@"): as for the display, neither
        // is searched for.
        if let password, password.count >= 4, !password.contains(where: { "/?#*".contains($0) }),
            !proxyText.contains("'"), rest.firstRange(of: password) == nil
        {
            let quoted = error.message.split(separator: "'", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 1 }.map(\.element)
            expect(
                !quoted.contains { $0.firstRange(of: password) != nil }, "the error hides the password", input: input)
        }
    }
    if lines.count >= 3 {
        let list = NoProxyList(lines[1])
        let host = lines[2]
        _ = list.matches(host: host)
        expect(NoProxyList(lines[1] + ",*").matches(host: host), "* matches every host", input: input)
        let name = host.lowercased()
        if !name.isEmpty, name.allSatisfy({ $0.isLetter && $0.isASCII || $0 == "." || $0 == "-" }),
            !name.hasPrefix("."), !name.hasSuffix("."), name.firstRange(of: "..") == nil
        {
            expect(NoProxyList(name).matches(host: host), "a name matches itself", input: input)
            expect(!NoProxyList(name).matches(host: "x" + name), "a suffix matches at a dot only", input: input)
        }
        let rules = ProxyRules(proxy: nil, noProxy: lines[1])
        _ = try? rules.proxy(scheme: "https", host: host, environment: ["https_proxy": proxyText])
    }
    return 0
}
