#!/usr/bin/env bash
# An HLS stream against ffmpeg: 120 segments of half a second (a test pattern with a tone, H.264 and AAC, made by
# ffmpeg), served by nginx on loopback, at full speed and with each connection capped at 1 MB/s (nginx limit_rate 1m,
# as CDNs cap a connection). Interleaved rounds of `haul get URL -o out.ts` (its default 4 connections) and
# `ffmpeg -i URL -c copy out.ts` (one segment at a time); medians of wall time, CPU time and peak memory, every
# round's wall time, segments a second, and the ratios.
#
#   bench/hls.sh [ROUNDS]    (default 5; needs nginx, ffmpeg and GNU time: apt-get install nginx-light ffmpeg time)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
rounds=${1:-5}
for tool in nginx ffmpeg ffprobe /usr/bin/time python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing (apt-get install nginx-light ffmpeg time)" >&2; exit 2; }
done
swift build -c release --static-swift-stdlib --product haul >/dev/null
haul="$(swift build -c release --show-bin-path)/haul"

nginx_pid=
work=$(mktemp -d /tmp/haul-hls.XXXXXX)
cleanup() {
    [ -n "$nginx_pid" ] && kill -9 "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www/full" "$work/out" "$work/state"
ffmpeg -v error -f lavfi -i testsrc=duration=60:size=640x360:rate=24 -f lavfi -i sine=duration=60 -c:v libx264 \
    -preset ultrafast -g 12 -c:a aac -f hls -hls_time 0.5 -hls_playlist_type vod "$work/www/full/index.m3u8"
ln -s full "$work/www/capped"
segments=$(grep -c '^index' "$work/www/full/index.m3u8")
port=$(free_port)
start_nginx "$work" "$port" "location /capped/ { limit_rate 1m; }" \
    "types { application/vnd.apple.mpegurl m3u8; video/mp2t ts; }"
sync

# One measured run: prints "wall cpu maxrss_kib".
timed() {
    local start end
    rm -f "$work/out/"*
    rm -rf "$work/state"
    sync
    start=$(date +%s%N)
    /usr/bin/time -f "%U %S %M" -o "$work/time.txt" "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    [ -s "$work/out/out.ts" ] || { echo "bench: $1 wrote nothing" >&2; exit 1; }
    awk -v wall="$(((end - start) / 1000))" '{ printf "%.3f %.3f %d\n", wall / 1e6, $1 + $2, $3 }' "$work/time.txt"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
row() {
    local tool=$1 wall cpu peak
    wall=$(cut -d' ' -f1 "$work/$tool.txt" | median)
    cpu=$(cut -d' ' -f2 "$work/$tool.txt" | median)
    peak=$(cut -d' ' -f3 "$work/$tool.txt" | median)
    printf "%-14s %8.3f %8.3f %10.1f %12.1f   %s\n" "$tool" "$wall" "$cpu" "$(awk "BEGIN { print $peak / 1024 }")" \
        "$(awk "BEGIN { print $segments / $wall }")" "$(cut -d' ' -f1 "$work/$tool.txt" | sort -n | tr '\n' ' ')"
    eval "${tool//-/_}_wall=$wall"
}

for tool in haul-full ffmpeg-full haul-capped ffmpeg-capped; do : > "$work/$tool.txt"; done
for round in $(seq 1 "$rounds"); do
    for kind in full capped; do
        url="http://127.0.0.1:$port/$kind/index.m3u8"
        timed "$haul" get --state-dir "$work/state" -o "$work/out/out.ts" --quiet "$url" >> "$work/haul-$kind.txt"
        timed ffmpeg -v error -i "$url" -c copy -y "$work/out/out.ts" >> "$work/ffmpeg-$kind.txt"
    done
done
# What haul wrote plays: no decoding error, and the source's duration.
"$haul" get --state-dir "$work/state" -o "$work/out/check.ts" --quiet "http://127.0.0.1:$port/full/index.m3u8"
ffmpeg -v error -i "$work/out/check.ts" -f null - 2>&1 | head -3
duration=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$work/out/check.ts")

echo "HLS: $segments segments of 0.5 s (640x360), $rounds rounds; haul's file decodes, ${duration} s"
printf "%-14s %8s %8s %10s %12s   %s\n" run "wall s" "cpu s" "peak MiB" "segments/s" "every round (s)"
for tool in haul-full ffmpeg-full haul-capped ffmpeg-capped; do row "$tool"; done
echo "haul against ffmpeg, full speed: $(awk "BEGIN { printf \"%.2f\", $haul_full_wall / $ffmpeg_full_wall }")x the time"
echo "haul against ffmpeg, 1 MB/s a connection: $(awk "BEGIN { printf \"%.2f\", $haul_capped_wall / $ffmpeg_capped_wall }")x the time"
