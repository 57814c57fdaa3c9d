#!/usr/bin/env bash
# One file from three mirrors against one: three nginx servers on loopback, each capped at 2 MB/s a connection (nginx
# limit_rate 2m, as public mirrors often cap), a 64 MiB file. Interleaved rounds; medians of wall time, CPU time and
# peak memory, every round's wall time, and the ratios:
#   haul -x 4 from one server; haul -x 4 --mirror … from three (each server up to 4 connections);
#   aria2c -x4 -s4 -k1M from one; aria2c -x12 -s12 -k1M from the same three URIs (aria2 counts -x per host, and the
#   three servers share 127.0.0.1: -x4 would hold it to four connections in all).
# Also what the three servers sent in all for haul's runs, against the file's size: bytes a connection had on its
# way when its segment's end moved, and the 64 KiB samples, are sent but not kept.
#
#   bench/mirrors.sh [ROUNDS]    (default 5; needs nginx, curl, aria2, GNU time: apt-get install nginx-light curl aria2 time)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
rounds=${1:-5}
for tool in nginx curl aria2c /usr/bin/time python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing (apt-get install nginx-light curl aria2 time)" >&2; exit 2; }
done
scripts/build-release haul >/dev/null
haul="$(swift build -c release --show-bin-path)/haul"

make_work mirrors
mkdir -p "$work/www" "$work/out" "$work/state"
head -c $((64 * 1024 * 1024)) /dev/urandom > "$work/www/64m.bin"
ports=("$(free_port)" "$(free_port)" "$(free_port)")
# One nginx, three servers: the first is start_nginx's own, the other two beside it in the http block.
others="log_format sent '\$body_bytes_sent';"
for index in 1 2; do
    others+=" server { listen 127.0.0.1:${ports[$index]}; root $work/www; limit_rate 2m; access_log $work/access$index.log sent; }"
done
start_nginx "$work" "${ports[0]}" "limit_rate 2m; access_log $work/access0.log sent;" "$others"
urls=()
for port in "${ports[@]}"; do urls+=("http://127.0.0.1:$port/64m.bin"); done
sync

# One measured run: prints "wall cpu maxrss_kib".
timed() {
    local start end
    rm -f "$work/out/64m.bin" "$work/out/64m.bin.part"
    rm -rf "$work/state"
    sync
    start=$(date +%s%N)
    /usr/bin/time -f "%U %S %M" -o "$work/time.txt" "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    cmp -s "$work/out/64m.bin" "$work/www/64m.bin" || { echo "bench: $1 got a different file" >&2; exit 1; }
    awk -v wall="$(((end - start) / 1000))" '{ printf "%.3f %.3f %d\n", wall / 1e6, $1 + $2, $3 }' "$work/time.txt"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
row() {
    local tool=$1 wall cpu peak
    wall=$(cut -d' ' -f1 "$work/$tool.txt" | median)
    cpu=$(cut -d' ' -f2 "$work/$tool.txt" | median)
    peak=$(cut -d' ' -f3 "$work/$tool.txt" | median)
    printf "%-8s %10.3f %10.3f %12.1f   %s\n" "$tool" "$wall" "$cpu" "$(awk "BEGIN { print $peak / 1024 }")" \
        "$(cut -d' ' -f1 "$work/$tool.txt" | sort -n | tr '\n' ' ')"
    eval "${tool}_wall=$wall"
}
sent() { cat "$work"/access*.log 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

for tool in haul1 haul3 aria1 aria3; do : > "$work/$tool.txt"; done
: > "$work/waste.txt"
for round in $(seq 1 "$rounds"); do
    timed "$haul" get -x 4 --min-split-size 1M --state-dir "$work/state" -o "$work/out/64m.bin" --quiet "${urls[0]}" \
        >> "$work/haul1.txt"
    : | tee "$work"/access*.log >/dev/null
    timed "$haul" get -x 4 --min-split-size 1M --state-dir "$work/state" -o "$work/out/64m.bin" --quiet "${urls[0]}" \
        --mirror "${urls[1]}" --mirror "${urls[2]}" >> "$work/haul3.txt"
    sent >> "$work/waste.txt"
    timed aria2c -x4 -s4 -k1M -q --allow-overwrite=true --auto-file-renaming=false -d "$work/out" -o 64m.bin \
        "${urls[0]}" >> "$work/aria1.txt"
    timed aria2c -x12 -s12 -k1M -q --allow-overwrite=true --auto-file-renaming=false -d "$work/out" -o 64m.bin \
        "${urls[@]}" >> "$work/aria3.txt"
done
echo "haul $("$haul" --version), aria2c $(aria2c --version | head -1 | cut -d' ' -f3), $(nproc) cores, $rounds rounds, 64 MiB at 2 MB/s a connection"
printf "%-8s %10s %10s %12s   %s\n" tool "wall (s)" "cpu (s)" "peak (MiB)" "every round's wall (s)"
for tool in haul1 haul3 aria1 aria3; do row "$tool"; done
printf "ratio haul three mirrors / one: wall %.2fx; haul / aria2c, three mirrors: %.2fx; one: %.2fx\n" \
    "$(awk "BEGIN { print $haul3_wall / $haul1_wall }")" "$(awk "BEGIN { print $haul3_wall / $aria3_wall }")" \
    "$(awk "BEGIN { print $haul1_wall / $aria1_wall }")"
printf "bytes the three servers sent for haul's three-mirror runs, over the file's size: median %.3fx (%s)\n" \
    "$(median < "$work/waste.txt" | awk '{ print $1 / (64 * 1024 * 1024) }')" \
    "$(awk '{ printf "%.3f ", $1 / (64 * 1024 * 1024) }' "$work/waste.txt")"
