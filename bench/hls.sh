#!/usr/bin/env bash
# HLS streams against ffmpeg, made by ffmpeg from a moving test pattern with a tone (H.264 at a constant 4 Mb/s, AAC),
# served by nginx on loopback: 120 segments of half a second at full speed (what each request costs), and 30 segments
# of two seconds (about 1 MB each) with each connection capped at 512 KB/s (nginx limit_rate 512k, as CDNs cap a
# connection; nginx lets the first second's worth through at once, so the cap bites only on segments larger than
# that). Interleaved rounds of `haul get URL -o out.ts` (its default 4 connections) and `ffmpeg -i URL -c copy out.ts`
# (one segment at a time); medians of wall time, CPU time and peak memory, every round's wall time, segments a second,
# and the ratios.
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
scripts/build-release haul >/dev/null
haul="$(swift build -c release --show-bin-path)/haul"

make_work hls
mkdir -p "$work/www/full" "$work/www/capped" "$work/out" "$work/state"
for kind in full capped; do
    length=$([ "$kind" = full ] && echo 0.5 || echo 2)
    ffmpeg -v error -f lavfi -i testsrc2=duration=60:size=1280x720:rate=24 -f lavfi -i sine=duration=60 -c:v libx264 \
        -preset ultrafast -g 12 -b:v 4M -minrate 4M -maxrate 4M -bufsize 2M -x264-params nal-hrd=cbr -c:a aac -f hls \
        -hls_time "$length" -hls_playlist_type vod "$work/www/$kind/index.m3u8"
done
full_segments=$(grep -c '^index' "$work/www/full/index.m3u8")
capped_segments=$(grep -c '^index' "$work/www/capped/index.m3u8")
port=$(free_port)
start_nginx "$work" "$port" "location /capped/ { limit_rate 512k; }" \
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
    local tool=$1 segments=$2 wall cpu peak
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

echo "HLS, 1280x720 at 4 Mb/s, $rounds rounds: full speed $full_segments segments of 0.5 s ($(du -sm "$work/www/full" | cut -f1) MB);"
echo "512 KB/s a connection $capped_segments segments of 2 s ($(du -sm "$work/www/capped" | cut -f1) MB); haul's file decodes, ${duration} s"
printf "%-14s %8s %8s %10s %12s   %s\n" run "wall s" "cpu s" "peak MiB" "segments/s" "every round (s)"
row haul-full "$full_segments"
row ffmpeg-full "$full_segments"
row haul-capped "$capped_segments"
row ffmpeg-capped "$capped_segments"
echo "haul against ffmpeg, full speed: $(awk "BEGIN { printf \"%.2f\", $haul_full_wall / $ffmpeg_full_wall }")x the time"
echo "haul against ffmpeg, 512 KB/s a connection: $(awk "BEGIN { printf \"%.2f\", $haul_capped_wall / $ffmpeg_capped_wall }")x the time"
