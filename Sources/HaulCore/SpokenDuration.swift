extension Duration {
    /// The duration as a person reads it in a message: "0.25 s", "5 s", "1.5 s", "5 min", "2 min 30 s", "1 h 30 min".
    /// Swift's own description ("300.0 seconds") is for programs.
    public var spoken: String {
        let (seconds, attoseconds) = components
        let total = Double(seconds) + Double(attoseconds) / 1e18
        guard total.isFinite, total >= 0 else { return "\(self)" }
        if total < 1 { return total == 0 ? "0 s" : "\(Self.decimals(total, 2)) s" }
        if total < 60 { return "\(Self.decimals(total, 1)) s" }
        let whole = Int64(total.rounded())
        if whole < 3600 {
            let rest = whole % 60
            return rest == 0 ? "\(whole / 60) min" : "\(whole / 60) min \(rest) s"
        }
        let minutes = (whole % 3600) / 60
        return minutes == 0 ? "\(whole / 3600) h" : "\(whole / 3600) h \(minutes) min"
    }

    /// `value` with at most `places` decimals, trailing zeros left out ("5", "1.5", "0.25").
    private static func decimals(_ value: Double, _ places: Int) -> String {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let scaled = Int64((value * scale).rounded())
        var whole = "\(scaled / Int64(scale))"
        var fraction = String(scaled % Int64(scale))
        while fraction.count < places { fraction = "0" + fraction }
        while fraction.hasSuffix("0") { fraction.removeLast() }
        if !fraction.isEmpty { whole += "." + fraction }
        return whole
    }
}
