import HaulCore
import Testing

@Suite("A duration as a message says it")
struct SpokenDurationTests {
    @Test(
        "seconds with what decimals they have, then minutes and hours",
        arguments: [
            (Duration.zero, "0 s"), (.milliseconds(250), "0.25 s"), (.milliseconds(4), "0 s"), (.seconds(5), "5 s"),
            (.milliseconds(1500), "1.5 s"), (.milliseconds(59_960), "60 s"), (.seconds(60), "1 min"),
            (.seconds(300), "5 min"), (.seconds(150), "2 min 30 s"), (.seconds(3600), "1 h"),
            (.seconds(5400), "1 h 30 min"), (.seconds(-1), "-1.0 seconds"),
        ] as [(Duration, String)])
    func spoken(_ duration: Duration, _ words: String) {
        #expect(duration.spoken == words)
    }
}
