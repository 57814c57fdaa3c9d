import HaulCore

// WWW-Authenticate challenges: never a crash; schemes are lower-case tokens; the answer to a chosen challenge, for a
// field without control characters, has none either (no header injection through a server's nonce or realm).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    let challenges = AuthChallenge.parse([input])
    for challenge in challenges {
        expect(RequestHeader.isValidName(challenge.scheme), "a token scheme", input: input)
        expect(challenge.scheme == challenge.scheme.lowercased(), "lower case", input: input)
    }
    guard let chosen = HTTPAuthentication.choose(challenges) else { return 0 }
    expect(chosen.scheme == "basic" || chosen.scheme == "digest", "Basic or Digest", input: input)
    let credentials = Credentials(user: "user", password: "password")
    let answer =
        chosen.scheme == "basic"
        ? HTTPAuthentication.basic(credentials)
        : HTTPAuthentication.digest(
            chosen, credentials: credentials, method: "GET", uri: "/f", cnonce: "c", count: 1,
            hash: { _, text in String(text.utf8.count) })
    expect(answer != nil, "a chosen challenge is answered", input: input)
    if RequestHeader.isValidValue(input), let answer {
        expect(RequestHeader.isValidValue(answer), "no control characters in the answer", input: input)
    }
    return 0
}
