/// A host, and its port, as a URL writes them, for URLs made from parts and for messages: an IPv6 address in
/// brackets (`[::1]:8080`, not `::1:8080`, whose port cannot be told from the address); a name or an IPv4 address as
/// it is.
public enum HostAndPort {
    /// `host` (bracketed when it is an IPv6 address not yet in brackets), then `:port` when there is one.
    public static func shown(_ host: String, port: Int? = nil) -> String {
        let written = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return port.map { "\(written):\($0)" } ?? written
    }
}
