#!/usr/bin/env bash
# Benchmark on a loopback nginx, interleaved, several rounds; medians of wall time, CPU time (user+sys) and peak
# memory (max RSS), and ratios:
#   1. one large file (1 GiB, 256 MiB): haul get against curl;
#   2. 256 MiB served at 20 MiB/s per connection (nginx limit_rate 20m): haul get -x 8 against aria2c -x8 -s8 -k1M;
#   3. 1000 files of 64 KiB: haul get -j 16 -i list against aria2c -j16 -i list and curl --parallel-max 16, the
#      floor of Haul's guarantees on the disk alone (bench/floor.c: write, fsync, rename, folder fsync; no network),
#      the page-cache writes alone (bench/floor.c from one thread, no syncs, no network), the floor of Haul's parts
#      (haul-floor: the same guarantees over AsyncHTTPClient, with nothing of Haul's), those parts with no syncs and
#      with a store; haul's ratio to haul-floor also as the median and range of each round's own ratio.
#
#   bench/run.sh [ROUNDS]    (default 5; needs nginx, curl, aria2, GNU time and a C compiler:
#                             apt-get install nginx-light curl aria2 time gcc)
#   BENCH_ONLY=small bench/run.sh 9    (only some comparisons: a comma list of large, split, small)
#
# Each comparison starts with one untimed warm-up round of every tool (BENCH_WARMUP=0 skips it): on this VM the first
# large write after the test files are made often takes twice as long or more, whichever tool comes first.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
rounds=${1:-5}
# Whether comparison $1 runs (BENCH_ONLY unset: all of them).
only() { [ -z "${BENCH_ONLY:-}" ] || [[ ",$BENCH_ONLY," == *",$1,"* ]]; }

for tool in nginx curl aria2c /usr/bin/time python3 cc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing (apt-get install nginx-light curl aria2 time gcc)" >&2; exit 2; }
done

scripts/build-release haul >/dev/null
haul="$(swift build -c release --show-bin-path)/haul"
if only small; then scripts/build-release haul-floor >/dev/null; fi

# The bench never changes the machine's settings. On a VM whose host takes back free memory (virtio free page
# reporting), a round that writes into pages handed back runs two to three times slower, whatever the tool; that is
# noise to be outvoted, not a setting to change: run more rounds and read the medians and the spread of every round.
make_work bench
mkdir -p "$work/www" "$work/out" "$work/state"
if only large; then head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/www/1g.bin"; fi
if only large || only split; then head -c $((256 * 1024 * 1024)) /dev/urandom > "$work/www/256m.bin"; fi
make_small_files "$work/www"

port=$(free_port)
start_nginx "$work" "$port" "location /slow/ { alias $work/www/; limit_rate 20m; }"

# Where a round's figures go: round 0 is the warm-up, kept apart and not counted.
into() { if [ "$1" = 0 ]; then echo "$work/warmup.txt"; else echo "$work/$2.txt"; fi; }
first_round=$([ "${BENCH_WARMUP:-1}" = 1 ] && echo 0 || echo 1)

for i in $(seq -f "%04g" 0 999); do echo "http://127.0.0.1:$port/small/f$i.bin"; done > "$work/list.txt"
awk -v out="$work/out/small" '{ n = split($0, p, "/"); print "url = \"" $0 "\""; print "output = \"" out "/" p[n] "\"" }' \
    "$work/list.txt" > "$work/curl.cfg"

# The test files were just written: flush them before timing anything, so no run pays for the setup's writeback.
sync

# One measured run: prints "wall cpu maxrss_kib".
measure() {
    local out=$1
    shift
    rm -f "$out" "$out.part"
    # Every run starts with no writeback left over from the run before (a `sync`, not timed): haul fsyncs its
    # checkpoints and the finished file, curl and aria2c do not, so without it the next run (often haul's) would wait
    # for the disk to write the previous tool's bytes. BENCH_SYNC=0 skips it.
    [ "${BENCH_SYNC:-1}" = 1 ] && sync
    timed "$@"
}

# Runs a command; prints "wall cpu maxrss_kib". GNU time gives CPU time and peak memory, but its wall time has 10 ms
# steps, too coarse for runs of 1-2 s that differ by a few per cent: the wall time comes from the clock around it.
timed() {
    local start end
    start=$(date +%s%N)
    /usr/bin/time -f "%U %S %M" -o "$work/time.txt" "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    awk -v wall="$(((end - start) / 1000))" '{ printf "%.3f %.3f %d\n", wall / 1e6, $1 + $2, $3 }' "$work/time.txt"
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# The ratio of tool $1 to tool $2 in each round (field $3: 1 wall, 2 cpu), as "median (least-most)x": runs of one
# round are seconds apart, so each ratio is taken in one state of the machine.
paired() {
    local ratios
    ratios=$(paste -d' ' "$work/$1.txt" "$work/$2.txt" | awk -v f="$3" '{ printf "%.4f\n", $f / $(f + 3) }' | sort -n)
    printf "%.2fx (%.2f-%.2f)" "$(echo "$ratios" | median)" "$(echo "$ratios" | head -1)" "$(echo "$ratios" | tail -1)"
}

# One table row from $work/TOOL.txt: the medians, printed, and kept in TOOL_wall and TOOL_cpu for the ratios.
row() {
    local label=$1 tool=$2 wall cpu peak
    wall=$(cut -d' ' -f1 "$work/$tool.txt" | median)
    cpu=$(cut -d' ' -f2 "$work/$tool.txt" | median)
    peak=$(cut -d' ' -f3 "$work/$tool.txt" | median)
    printf "%-9s %-9s %10.3f %10.3f %12.1f   %s\n" "$label" "$tool" "$wall" "$cpu" "$(awk "BEGIN { print $peak / 1024 }")" \
        "$(cut -d' ' -f1 "$work/$tool.txt" | sort -n | tr '\n' ' ')"
    eval "${tool}_wall=$wall ${tool}_cpu=$cpu"
}

echo "haul $("$haul" --version), curl $(curl --version | head -1 | cut -d' ' -f2), $(nproc) cores, $rounds rounds"
only large && printf "%-9s %-9s %10s %10s %12s %s\n" file tool "wall (s)" "cpu (s)" "peak (MiB)" "  every round's wall (s)"
for file in 1g.bin 256m.bin; do
    only large || break
    : > "$work/haul.txt"
    : > "$work/curl.txt"
    for round in $(seq "$first_round" "$rounds"); do
        rm -rf "$work/state"
        measure "$work/out/$file" "$haul" get "http://127.0.0.1:$port/$file" -o "$work/out/$file" --quiet \
            --state-dir "$work/state" >> "$(into "$round" haul)"
        cmp -s "$work/out/$file" "$work/www/$file" || { echo "bench: haul's $file differs from the source" >&2; exit 1; }
        measure "$work/out/$file" curl -s -o "$work/out/$file" "http://127.0.0.1:$port/$file" >> "$(into "$round" curl)"
    done
    for tool in haul curl; do row "$file" "$tool"; done
    printf "%-9s ratio haul/curl: wall %.2fx, cpu %.2fx\n" "$file" \
        "$(awk "BEGIN { print $haul_wall / $curl_wall }")" "$(awk "BEGIN { print $haul_cpu / $curl_cpu }")"
done

if only split; then
# One file at 20 MiB/s per connection: several connections against aria2c's. `haul1m` is haul with the same minimum
# split as aria2c's -k1M (haul's default is 4 MiB), to show what that setting alone is worth.
: > "$work/haul.txt"
: > "$work/haul1m.txt"
: > "$work/aria2c.txt"
for round in $(seq "$first_round" "$rounds"); do
    rm -rf "$work/state"
    measure "$work/out/256m.bin" "$haul" get -x 8 "http://127.0.0.1:$port/slow/256m.bin" -o "$work/out/256m.bin" \
        --quiet --state-dir "$work/state" >> "$(into "$round" haul)"
    cmp -s "$work/out/256m.bin" "$work/www/256m.bin" || { echo "bench: haul -x 8 got a different file" >&2; exit 1; }
    rm -rf "$work/state"
    measure "$work/out/256m.bin" "$haul" get -x 8 --min-split-size 1M "http://127.0.0.1:$port/slow/256m.bin" \
        -o "$work/out/256m.bin" --quiet --state-dir "$work/state" >> "$(into "$round" haul1m)"
    cmp -s "$work/out/256m.bin" "$work/www/256m.bin" ||
        { echo "bench: haul -x 8 --min-split-size 1M got a different file" >&2; exit 1; }
    measure "$work/out/256m.bin" aria2c -x8 -s8 -k1M -q --allow-overwrite=true --auto-file-renaming=false \
        -d "$work/out" -o 256m.bin "http://127.0.0.1:$port/slow/256m.bin" >> "$(into "$round" aria2c)"
    cmp -s "$work/out/256m.bin" "$work/www/256m.bin" || { echo "bench: aria2c got a different file" >&2; exit 1; }
done
echo
printf "%-9s %-9s %10s %10s %12s %s\n" "256m@20m" tool "wall (s)" "cpu (s)" "peak (MiB)" "  every round's wall (s)"
for tool in haul haul1m aria2c; do row 256m@20m "$tool"; done
printf "256m@20m  ratio haul -x 8 / aria2c -x8 -s8 -k1M: wall %.2fx; with --min-split-size 1M: %.2fx\n" \
    "$(awk "BEGIN { print $haul_wall / $aria2c_wall }")" "$(awk "BEGIN { print $haul1m_wall / $aria2c_wall }")"
fi

# Many small files: a fresh folder and state for every run. The previous run's files are moved aside, not deleted,
# until the bench ends: on ext4 without a journal (this machine's root file system), every create skips each inode
# freed in the last 60 s (360 s while its inode-table block is dirty), one look at the inode table each
# (`recently_deleted` in `find_inode_bit`), so deleting 1000 files a run made every later run's creates slower, round
# after round, for every tool (curl's rounds drifted from 0.28 s to 0.94 s in one bench).
small_runs=0
small() {
    small_runs=$((small_runs + 1))
    mkdir -p "$work/old"
    [ -d "$work/out/small" ] && mv "$work/out/small" "$work/old/small-$small_runs"
    [ -d "$work/state" ] && mv "$work/state" "$work/old/state-$small_runs"
    mkdir -p "$work/out/small"
    [ "${BENCH_SYNC:-1}" = 1 ] && sync
    local figures
    figures=$(timed "$@")
    [ "$(ls "$work/out/small" | wc -l)" = 1000 ] || { echo "bench: $1 did not fetch 1000 files" >&2; exit 1; }
    echo "$figures"
}
if only small; then
# `floor` is bench/floor.c: the same 1000 files written, synced, moved and their folder synced, with no network at
# all: what Haul's guarantees cost the disk before any HTTP (curl syncs nothing). `ahcfloor` is Sources/haul-floor:
# the same guarantees with the network, over the parts the brief prescribes (AsyncHTTPClient, NIO, Swift concurrency)
# and nothing of Haul's (no store, no manager, no transfer machine): what is left between it and haul is Haul's own.
# `writes` is bench/floor.c from one thread with no syncs: writing the same 64 MiB into the page cache and moving the
# files, which every tool pays, curl included. `ahcnosync` is haul-floor with no syncs: AsyncHTTPClient's cost for the
# network and the writes, to set against curl's. `ahcstore` is haul-floor with a store (`--store`): the same, keeping
# each file's row in GRDB/SQLite in the order Haul's durability rules ask (every row synced before the first request,
# each file's name and part file identity synced before its first byte, its completed state after the move), the
# commits of concurrent files grouped: the floor of the prescribed parts with the state a download manager keeps.
cc -O2 -pthread -o "$work/floor" bench/floor.c
ahcfloor="$(swift build -c release --show-bin-path)/haul-floor"
: > "$work/ahcfloor.txt"
: > "$work/ahcnosync.txt"
: > "$work/ahcstore.txt"
: > "$work/writes.txt"
: > "$work/haul.txt"
: > "$work/aria2c.txt"
: > "$work/curl.txt"
: > "$work/floor.txt"
# haul's floors run right after it: the VM's speed changes from minute to minute, and the per-round ratios below
# compare runs a second or two apart.
for round in $(seq "$first_round" "$rounds"); do
    small "$haul" get -j 16 -i "$work/list.txt" -d "$work/out/small" --quiet --state-dir "$work/state" \
        >> "$(into "$round" haul)"
    small "$ahcfloor" "$work/list.txt" "$work/out/small" 16 >> "$(into "$round" ahcfloor)"
    rm -f "$work/ahcstore.db"*
    small "$ahcfloor" "$work/list.txt" "$work/out/small" 16 --store "$work/ahcstore.db" >> "$(into "$round" ahcstore)"
    small aria2c -j16 -i "$work/list.txt" -d "$work/out/small" -q --allow-overwrite=true --auto-file-renaming=false \
        >> "$(into "$round" aria2c)"
    small curl -s --parallel --parallel-max 16 -K "$work/curl.cfg" >> "$(into "$round" curl)"
    small "$work/floor" "$work/out/small" >> "$(into "$round" floor)"
    small "$work/floor" "$work/out/small" 1 nosync >> "$(into "$round" writes)"
    small "$ahcfloor" "$work/list.txt" "$work/out/small" 16 --no-sync >> "$(into "$round" ahcnosync)"
done
echo
printf "%-9s %-9s %10s %10s %12s %s\n" "1000x64K" tool "wall (s)" "cpu (s)" "peak (MiB)" "  every round's wall (s)"
for tool in haul aria2c curl floor writes ahcfloor ahcnosync ahcstore; do row 1000x64K "$tool"; done
printf "1000x64K  ratio haul/aria2c: wall %.2fx; haul/curl: wall %.2fx, cpu %.2fx; floor/curl: wall %.2fx, cpu %.2fx\n" \
    "$(awk "BEGIN { print $haul_wall / $aria2c_wall }")" "$(awk "BEGIN { print $haul_wall / $curl_wall }")" \
    "$(awk "BEGIN { print $haul_cpu / $curl_cpu }")" "$(awk "BEGIN { print $floor_wall / $curl_wall }")" \
    "$(awk "BEGIN { print $floor_cpu / $curl_cpu }")"
printf "1000x64K  ratio ahcfloor/curl: wall %.2fx, cpu %.2fx; haul/ahcfloor: wall %.2fx, cpu %.2fx\n" \
    "$(awk "BEGIN { print $ahcfloor_wall / $curl_wall }")" "$(awk "BEGIN { print $ahcfloor_cpu / $curl_cpu }")" \
    "$(awk "BEGIN { print $haul_wall / $ahcfloor_wall }")" "$(awk "BEGIN { print $haul_cpu / $ahcfloor_cpu }")"
printf "1000x64K  ratio writes/curl: cpu %.2fx; ahcnosync/curl: wall %.2fx, cpu %.2fx\n" \
    "$(awk "BEGIN { print $writes_cpu / $curl_cpu }")" "$(awk "BEGIN { print $ahcnosync_wall / $curl_wall }")" \
    "$(awk "BEGIN { print $ahcnosync_cpu / $curl_cpu }")"
printf "1000x64K  ratio ahcstore/ahcfloor: wall %.2fx, cpu %.2fx; haul/ahcstore: wall %.2fx, cpu %.2fx\n" \
    "$(awk "BEGIN { print $ahcstore_wall / $ahcfloor_wall }")" "$(awk "BEGIN { print $ahcstore_cpu / $ahcfloor_cpu }")" \
    "$(awk "BEGIN { print $haul_wall / $ahcstore_wall }")" "$(awk "BEGIN { print $haul_cpu / $ahcstore_cpu }")"
for floor in ahcfloor ahcstore; do
    printf "1000x64K  per-round haul/%s: wall %s, cpu %s\n" "$floor" "$(paired haul "$floor" 1)" "$(paired haul "$floor" 2)"
done
fi
