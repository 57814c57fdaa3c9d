import Crypto
import Foundation
import HaulCore
import HaulTesting
import Synchronization
import Testing

/// The folders of `StreamTests`' encodes, removed when the suite ends (`RemovesEncodes`).
private let streamEncodes = Mutex<[String]>([])

/// Removes the suite's encodes once all its tests ran: they are shared by its tests, so no test's own teardown may
/// remove them.
private struct RemovesEncodes: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        defer {
            if test.isSuite {
                for folder in streamEncodes.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: folder) }
            }
        }
        try await function()
    }
}

/// HLS streams made by Debian's ffmpeg from a test pattern, served by nginx: each becomes one file that decodes, with
/// the duration and streams of the source; a kill -9 mid-stream costs no finished segment.
@Suite("HLS and DASH streams", RemovesEncodes())
struct StreamTests {
    /// Runs `tool` with `arguments`; returns its standard output and error, failing the test on a non-zero exit.
    static func run(_ tool: String, _ arguments: [String]) async throws -> (out: String, err: String, status: Int32) {
        let path = try #require(executable(tool), "\(tool) must be installed (.ci/run installs ffmpeg)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let (output, errors) = await onOwnThread {
            let output = out.fileHandleForReading.readDataToEndOfFile()
            let errors = err.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (output, errors)
        }
        return (
            String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self), process.terminationStatus
        )
    }

    /// Six seconds of a test pattern with a tone, as ffmpeg's HLS muxer writes it with `extra` flags into `folder`.
    static func encode(_ folder: String, _ extra: [String]) async throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let made = try await run(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=6:size=320x240:rate=25", "-f", "lavfi", "-i",
                "sine=duration=6", "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-c:a", "aac", "-f", "hls",
                "-hls_time", "1", "-hls_playlist_type", "vod",
            ] + extra + [folder + "/index.m3u8"])
        #expect(made.status == 0, "\(made.err)")
    }

    /// The streams of every kind beneath `root`: ts, fmp4, enc (AES-128), noiv (AES-128, IV from the sequence), single
    /// (byte ranges of one file), and a master playlist of two variants.
    static func makeStreams(_ root: String) async throws {
        try await copy(made.streams, into: root)
    }

    /// The DASH manifests of `makeDASH`, into `root`.
    static func makeDASH(_ root: String) async throws {
        try await copy(made.dash, into: root)
    }

    /// The streams, encoded once for the suite (ffmpeg's encodes are the heaviest work of the tests).
    static let made = (
        streams: Task { try await encodeOnce(encodeStreams) }, dash: Task { try await encodeOnce(encodeDASH) }
    )

    static func encodeOnce(_ encode: (String) async throws -> Void) async throws -> String {
        let folder = NSTemporaryDirectory() + "haul-streams-" + UUID().uuidString
        streamEncodes.withLock { $0.append(folder) }
        try await encode(folder)
        return folder
    }

    static func copy(_ made: Task<String, any Error>, into root: String) async throws {
        let folder = try await made.value
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) {
            try FileManager.default.copyItem(atPath: folder + "/" + name, toPath: root + "/" + name)
        }
    }

    static func encodeStreams(_ root: String) async throws {
        try await encode(root + "/ts", [])
        try await encode(root + "/fmp4", ["-hls_segment_type", "fmp4"])
        try await encode(root + "/single", ["-hls_flags", "single_file"])
        try FileManager.default.createDirectory(atPath: root + "/enc", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: root + "/enc/key.bin", contents: Data(testBytes(16, seed: 42)))
        try "key.bin\n\(root)/enc/key.bin\n".write(toFile: root + "/keyinfo", atomically: true, encoding: .utf8)
        try await encode(root + "/enc", ["-hls_key_info_file", root + "/keyinfo"])
        // The same segments with the IV attribute taken out: the IV is then each segment's sequence number.
        try FileManager.default.copyItem(atPath: root + "/enc", toPath: root + "/noiv")
        let playlist = try String(contentsOfFile: root + "/enc/index.m3u8", encoding: .utf8)
        let withoutIV = playlist.replacingOccurrences(
            of: ",IV=0x[0-9a-fA-F]+", with: "", options: .regularExpression)
        #expect(withoutIV != playlist && !withoutIV.contains("IV="))
        try withoutIV.write(toFile: root + "/noiv/index.m3u8", atomically: true, encoding: .utf8)
        try """
        #EXTM3U
        #EXT-X-STREAM-INF:BANDWIDTH=400000,RESOLUTION=320x240,CODECS="avc1.42c00d,mp4a.40.2"
        ts/index.m3u8
        #EXT-X-STREAM-INF:BANDWIDTH=900000,RESOLUTION=640x480,CODECS="avc1.42c00d,mp4a.40.2"
        fmp4/index.m3u8

        """.write(toFile: root + "/master.m3u8", atomically: true, encoding: .utf8)
    }

    static let types = """
        types { application/vnd.apple.mpegurl m3u8; application/dash+xml mpd; video/mp2t ts; video/mp4 mp4 m4s;
            application/octet-stream bin; }
        """

    /// DASH manifests of each kind beneath `root`: timeline (SegmentTemplate with a SegmentTimeline), number
    /// (SegmentTemplate with $Number$), list (SegmentList of URLs), ranges (a SegmentList of byte ranges of one file),
    /// base (SegmentBase: each representation one file).
    static func encodeDASH(_ root: String) async throws {
        for (kind, flags) in [
            ("timeline", ["-use_template", "1", "-use_timeline", "1"]),
            ("number", ["-use_template", "1", "-use_timeline", "0"]), ("list", ["-use_template", "0"]),
            ("ranges", ["-single_file", "1"]),
        ] {
            let folder = root + "/dash-" + kind
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let made = try await run(
                "ffmpeg",
                [
                    "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=6:size=320x240:rate=25", "-f", "lavfi", "-i",
                    "sine=duration=6", "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-c:a", "aac", "-map",
                    "0:v", "-map", "1:a", "-f", "dash", "-seg_duration", "1",
                ] + flags + [folder + "/manifest.mpd"])
            #expect(made.status == 0, "\(made.err)")
        }
        // SegmentBase: the byte-range manifest with each SegmentList made a SegmentBase (the file read whole).
        try FileManager.default.copyItem(atPath: root + "/dash-ranges", toPath: root + "/dash-base")
        let ranges = try String(contentsOfFile: root + "/dash-ranges/manifest.mpd", encoding: .utf8)
        let base = ranges.replacingOccurrences(
            of: "<SegmentList[^>]*>.*?</SegmentList>", with: "<SegmentBase/>",
            options: [.regularExpression], range: nil
        )
        .replacingOccurrences(
            of: "(?s)<SegmentList.*?</SegmentList>", with: "<SegmentBase/>", options: .regularExpression)
        #expect(base.contains("<SegmentBase/>") && !base.contains("SegmentList"))
        try base.write(toFile: root + "/dash-base/manifest.mpd", atomically: true, encoding: .utf8)
    }

    /// Whether `path` decodes without an error, and its duration and stream count (ffprobe's).
    static func probe(_ path: String) async throws -> (decodes: Bool, duration: Double, streams: Int) {
        let decoded = try await run("ffmpeg", ["-v", "error", "-i", path, "-f", "null", "-"])
        let probed = try await run(
            "ffprobe", ["-v", "error", "-show_entries", "format=duration,nb_streams", "-of", "json", path])
        let json = try JSONSerialization.jsonObject(with: Data(probed.out.utf8)) as? [String: Any]
        let format = json?["format"] as? [String: Any]
        let duration = Double(format?["duration"] as? String ?? "") ?? 0
        return (decoded.status == 0 && decoded.err.isEmpty, duration, format?["nb_streams"] as? Int ?? 0)
    }

    @Test("TS, fMP4, AES-128 with and without an IV, and byte ranges: one file each, decoding, 6 s, 2 streams")
    func kinds() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let (nginx, servers) = try await MirrorTests.serve([[0]], in: workspace, rate: "0", http: Self.types)
        defer { nginx.stop() }
        try await Self.makeStreams(servers[0].root)
        for (kind, output) in [
            ("ts", "ts.ts"), ("fmp4", "fmp4.mp4"), ("enc", "enc.ts"), ("noiv", "noiv.ts"), ("single", "single.ts"),
        ] {
            let get = try await HaulProcess.run(
                ["get", "http://127.0.0.1:\(servers[0].port)/\(kind)/index.m3u8", "-o", output], in: workspace)
            #expect(get.status == 0, "\(kind): \(get.stderr)")
            let probe = try await Self.probe(workspace.path(output))
            #expect(probe.decodes, "\(kind) decodes")
            #expect(abs(probe.duration - 6) < 0.5 && probe.streams == 2, "\(kind): \(probe)")
            #expect(!FileManager.default.fileExists(atPath: workspace.path(output + ".part-segments")))
        }
    }

    @Test(
        "DASH with SegmentTemplate ($Number$ and a timeline), SegmentList (URLs and ranges), SegmentBase: video and audio files"
    )
    func dash() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let (nginx, servers) = try await MirrorTests.serve([[0]], in: workspace, rate: "0", http: Self.types)
        defer { nginx.stop() }
        try await Self.makeDASH(servers[0].root)
        for kind in ["timeline", "number", "list", "ranges", "base"] {
            let get = try await HaulProcess.run(
                ["get", "http://127.0.0.1:\(servers[0].port)/dash-\(kind)/manifest.mpd", "-o", "\(kind).mp4"],
                in: workspace)
            #expect(get.status == 0, "\(kind): \(get.stderr)")
            let video = try await Self.probe(workspace.path("\(kind).mp4"))
            let audio = try await Self.probe(workspace.path("\(kind).audio.mp4"))
            #expect(video.decodes && audio.decodes, "\(kind) decodes")
            #expect(abs(video.duration - 6) < 0.6 && video.streams == 1, "\(kind) video: \(video)")
            #expect(abs(audio.duration - 6) < 0.6 && audio.streams == 1, "\(kind) audio: \(audio)")
        }
        // --mux: one file of both, through ffmpeg; nothing beside it.
        let muxed = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(servers[0].port)/dash-timeline/manifest.mpd", "-o", "one.mp4", "--mux"],
            in: workspace)
        #expect(muxed.status == 0, "\(muxed.stderr)")
        let one = try await Self.probe(workspace.path("one.mp4"))
        #expect(one.decodes && one.streams == 2 && abs(one.duration - 6) < 0.6, "\(one)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: workspace.files).filter { $0.hasPrefix("one") }
                == ["one.mp4"])
    }

    /// A live playlist of the ts stream's first `count` segments, ended or not.
    static func live(_ count: Int, ended: Bool, target: String = "1") -> String {
        var text = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:\(target)\n#EXT-X-MEDIA-SEQUENCE:0\n"
        for index in 0..<count { text += "#EXTINF:1.000000,\n../ts/index\(index).ts\n" }
        return text + (ended ? "#EXT-X-ENDLIST\n" : "")
    }

    @Test("a live playlist that grows is recorded as it grows; stopping one completes it with what it held")
    func live() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let (nginx, servers) = try await MirrorTests.serve([[0]], in: workspace, rate: "0", http: Self.types)
        defer { nginx.stop() }
        let root = servers[0].root
        try await Self.makeStreams(root)
        try FileManager.default.createDirectory(atPath: root + "/live", withIntermediateDirectories: true)
        let playlist = root + "/live/index.m3u8"
        @Sendable func held(_ name: String) -> Int {
            let folder = workspace.path(name + ".part-segments")
            return ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter {
                !$0.hasSuffix(".part")
            }.count
        }
        // Grows from two segments to four, then ends at six: the recording follows, and ends by itself.
        try Self.live(2, ended: false).write(toFile: playlist, atomically: true, encoding: .utf8)
        let url = "http://127.0.0.1:\(servers[0].port)/live/index.m3u8"
        let growing = try HaulProcess(["get", url, "-o", "grown.ts"], in: workspace)
        #expect(await waitUntil { held("grown.ts") >= 2 })
        try Self.live(4, ended: false).write(toFile: playlist, atomically: true, encoding: .utf8)
        #expect(await waitUntil { held("grown.ts") >= 4 })
        #expect(!FileManager.default.fileExists(atPath: workspace.path("grown.ts")), "no final name while it records")
        try Self.live(6, ended: true).write(toFile: playlist, atomically: true, encoding: .utf8)
        let grown = await growing.finish()
        #expect(grown.status == 0, "\(grown.stderr)")
        let whole = try await Self.probe(workspace.path("grown.ts"))
        #expect(whole.decodes && abs(whole.duration - 6) < 0.5, "\(whole)")

        // Stopped (Ctrl-C) after three segments: the recording completes with them. The playlist's target duration
        // is absurd (1e300 seconds): the recording waits to reload it, and neither traps nor ignores the stop.
        try Self.live(3, ended: false, target: "1e300").write(toFile: playlist, atomically: true, encoding: .utf8)
        let stopping = try HaulProcess(["get", url, "-o", "stopped.ts"], in: workspace)
        #expect(await waitUntil { held("stopped.ts") >= 3 })
        stopping.signal(SIGINT)
        let stopped = await stopping.finish()
        #expect(stopped.status == 130, "\(stopped.stderr)")
        // Nothing was paused: the line after the signal does not send the user back to resume it.
        #expect(stopped.stderr.contains("interrupted; every download had ended, nothing is left to resume"))
        #expect(!stopped.stderr.contains("Run the same command to resume"), "\(stopped.stderr)")
        let part = try await Self.probe(workspace.path("stopped.ts"))
        #expect(part.decodes && abs(part.duration - 3) < 0.5, "\(part)")
    }

    @Test("a master playlist: the highest bandwidth by default, --variant by resolution or bandwidth")
    func variants() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let (nginx, servers) = try await MirrorTests.serve([[0]], in: workspace, rate: "0", http: Self.types)
        defer { nginx.stop() }
        try await Self.makeStreams(servers[0].root)
        let best = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(servers[0].port)/master.m3u8", "-d", workspace.files], in: workspace)
        #expect(best.status == 0, "\(best.stderr)")
        // The fMP4 variant (900 kb/s), named after the playlist with its kind's extension.
        #expect(try await Self.probe(workspace.path("master.mp4")).decodes)
        // --sort takes the file a stream becomes as the video it is: by its name, and by its type.
        for (rule, folder) in [("*.mp4=Clips", "Clips"), ("video/*=Videos", "Videos")] {
            let sorted = try await HaulProcess.run(
                [
                    "get", "http://127.0.0.1:\(servers[0].port)/master.m3u8", "-d", workspace.path(folder), "--sort",
                    rule,
                ],
                in: workspace)
            #expect(sorted.status == 0, "\(sorted.stderr)")
            let path = workspace.path("\(folder)/\(folder)/master.mp4")
            #expect(FileManager.default.fileExists(atPath: path), "\(rule): \(sorted.stderr)")
        }
        let chosen = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(servers[0].port)/master.m3u8", "-o", "small.ts", "--variant", "400000"],
            in: workspace)
        #expect(chosen.status == 0, "\(chosen.stderr)")
        #expect(try await Self.probe(workspace.path("small.ts")).streams == 2)
        let missing = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(servers[0].port)/master.m3u8", "-o", "none.ts", "--variant", "1080p"],
            in: workspace)
        #expect(missing.status == 1 && missing.stderr.contains("no variant"), "\(missing.stderr)")
        // A segment the server does not have: the error names it.
        try "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\ngone.ts\n#EXT-X-ENDLIST\n".write(
            toFile: servers[0].root + "/broken.m3u8", atomically: true, encoding: .utf8)
        let broken = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(servers[0].port)/broken.m3u8", "-o", "broken.ts"], in: workspace)
        #expect(broken.status == 1, "\(broken.stderr)")
        #expect(broken.stderr.contains("/gone.ts: server answered HTTP 404"), "\(broken.stderr)")
    }

    @Test("kill -9 mid-stream, then the same command: the file is byte-identical to an uninterrupted run's")
    func killNine() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        // Slow enough that the kill lands while segments are being fetched, one connection at a time.
        let (nginx, servers) = try await MirrorTests.serve([[0]], in: workspace, rate: "60k", http: Self.types)
        defer { nginx.stop() }
        try await Self.makeStreams(servers[0].root)
        let url = "http://127.0.0.1:\(servers[0].port)/ts/index.m3u8"
        let pieces = workspace.path("cut.ts.part-segments")
        let haul = try HaulProcess(["get", url, "-o", "cut.ts", "-x", "1"], in: workspace)
        // Killed once two segments are finished and kept.
        let reached = await haul.signal(SIGKILL) {
            ((try? FileManager.default.contentsOfDirectory(atPath: pieces)) ?? []).filter { !$0.hasSuffix(".part") }
                .count >= 2 || !haul.process.isRunning
        }
        _ = await haul.finish()
        #expect(reached && !FileManager.default.fileExists(atPath: workspace.path("cut.ts")), "killed mid-stream")
        let before = try servers[0].requests().count
        let rerun = try await HaulProcess.run(["get", url, "-o", "cut.ts", "-x", "1"], in: workspace)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        let between = try servers[0].requests().count
        let whole = try await HaulProcess.run(["get", url, "-o", "whole.ts"], in: workspace)
        #expect(whole.status == 0)
        // The rerun fetched fewer bytes than a whole run: the segments kept were not fetched again.
        let log = try servers[0].requests()
        let rerunBytes = log[before..<between].reduce(0) { $0 + $1.bytes }
        let wholeBytes = log[between...].reduce(0) { $0 + $1.bytes }
        #expect(rerunBytes < wholeBytes, "\(rerunBytes) against \(wholeBytes)")
        let (cut, uninterrupted) = (workspace.contents("cut.ts"), workspace.contents("whole.ts"))
        #expect(cut != nil && cut == uninterrupted)
    }
}
