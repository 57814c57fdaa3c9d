import HaulCore

// .netrc files: never a crash; every machine with a login is found for its own name; a file's default serves a
// host no machine names.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let netrc = try? Netrc(parsing: input) else { return 0 }
    for entry in netrc.entries {
        guard let machine = entry.machine, let login = entry.login else { continue }
        let found = netrc.credentials(host: machine, login: login)
        expect(found?.login == login, "machine \(machine) finds login \(login)", input: input)
    }
    if let fallback = netrc.entries.first(where: { $0.machine == nil && $0.login != nil }) {
        let host = "no-such-machine.invalid"
        if !netrc.entries.contains(where: { $0.machine == host }) {
            expect(netrc.credentials(host: host)?.login == fallback.login, "default serves others", input: input)
        }
    }
    return 0
}
