#!/usr/bin/env bash
# The fleet benchmark: haul serve workers sharing one PostgreSQL 15 queue, on this machine.
#   1. throughput of 1, 2 and 3 workers (each -j 4, one connection a download) on 24 files of 4 MiB from a loopback
#      nginx that serves each connection at 1 MiB/s (after nginx's first second, which it sends at once): a fleet adds
#      transfer slots, so the total should grow with it;
#   2. a worker's peak memory (VmHWM) and the time of a page of the list (GET /api/v1/downloads?limit=100, the first
#      page and one 900,000 downloads deep), with an empty queue and with 1,000,000 queued; in both, the worker's four
#      slots run four slow downloads (64 KiB/s) meanwhile, so the queued ones wait for a slot as they would;
#   3. downloads claimed and completed a second by one worker (-j 32, files of one byte) with 100,000 queued and with
#      1,000,000 queued;
#   4. with two workers and leases of 3 s, a slow download running on one of them: the time a pause sent through the
#      other worker takes to be acknowledged (the download paused in the store), and after the worker that runs it is
#      killed with SIGKILL, the time until the other holds its lease and runs it.
#
#   bench/fleet.sh [ROUNDS]   (default 3; needs nginx, python3, curl and PostgreSQL 15:
#                              apt-get install nginx-light python3 curl postgresql-15)
#
# PostgreSQL is a server of the bench's own (initdb in a temporary folder, run as the postgres user on a free port and
# a socket folder of its own), stopped and deleted at the end; the bench changes nothing on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
rounds=${1:-3}
pgbin=/usr/lib/postgresql/15/bin
# Whether part $1 runs (BENCH_ONLY unset: all; else a comma-separated list of throughput, memory, claims, takeover).
only() { [ -z "${BENCH_ONLY:-}" ] || [[ ",$BENCH_ONLY," == *",$1,"* ]]; }

for tool in nginx python3 curl runuser "$pgbin/initdb" "$pgbin/pg_ctl" "$pgbin/psql"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing" >&2; exit 2; }
done
scripts/build-release haul >/dev/null
haul="$(swift build -c release --show-bin-path)/haul"
# A worker that crashes prints its threads' backtraces into workers.err (a static binary needs the static backtracer).
export SWIFT_BACKTRACE="enable=yes,swift-backtrace=$(dirname "$(readlink -f "$(command -v swift)")")/../libexec/swift/linux/swift-backtrace-static"
work=$(mktemp -d /tmp/haul-fleet-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ -d "$work/pg/data" ] && runuser -u postgres -- "$pgbin/pg_ctl" -D "$work/pg/data" -m immediate -w stop \
        >/dev/null 2>&1 || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

peak() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { sort -n | awk '{ a[NR] = $1 } END { printf "%s-%s", a[1], a[NR] }'; }
now() { date +%s%N; }
seconds() { awk -v ns="$(($(now) - $1))" 'BEGIN { printf "%.3f\n", ns / 1e9 }'; }

# PostgreSQL, trusting connections from this machine (the bench's own server, on loopback).
mkdir -p "$work/pg/socket"
chown -R postgres "$work/pg"
pgport=$(free_port)
runuser -u postgres -- "$pgbin/initdb" -D "$work/pg/data" -U haul --auth=trust >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w \
    -o "-p $pgport -k $work/pg/socket -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
sql() { "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U haul -d "$1" -Atq -v ON_ERROR_STOP=1 -c "$2"; }
# A new database (called in a subshell: its name comes from the clock, not from a counter).
fresh_store() {
    local name
    name=fleet$(date +%s%N)
    sql postgres "CREATE DATABASE $name" >/dev/null
    echo "postgres://haul@127.0.0.1:$pgport/$name"
}

# nginx: 4 MiB files at 1 MiB/s a connection (and at 64 KiB/s under /slow/), and a file of one byte.
mkdir -p "$work/www/big"
for i in $(seq -w 1 24); do head -c $((4 << 20)) /dev/urandom > "$work/www/big/f$i.bin"; done
ln -s big "$work/www/slow"
printf x > "$work/www/one.bin"
webport=$(free_port)
start_nginx "$work" "$webport" "location /big/ { limit_rate 1m; } location /slow/ { limit_rate 64k; }"
pids+=("$nginx_pid")

# Starts worker NAME on STORE writing to OUT with -j JOBS (and the options after); its pid is in $worker_pid, its URL
# in $worker_url.
start_worker() {
    local name=$1 store=$2 out=$3 jobs=$4 state="$work/state-$1-$RANDOM"
    mkdir -p "$out"
    "$haul" serve --store "$store" --worker "$name" --listen 127.0.0.1:0 --state-dir "$state" --download-dir "$out" \
        -j "$jobs" -x 1 --log-level error "${@:5}" 2>> "$work/workers.err" &
    worker_pid=$!
    pids+=("$worker_pid")
    for _ in $(seq 600); do [ -s "$state/serve.json" ] && break; sleep 0.05; done
    worker_url=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["url"])' "$state/serve.json")
}
# Stops a worker as systemd would (SIGTERM) and fails the bench when it does not exit cleanly.
stop_worker() {
    # (A worker that already died is told of by its status.)
    kill "$1" 2>/dev/null || true
    local status=0
    wait "$1" 2>/dev/null || status=$?
    [ "$status" = 0 ] || [ "$status" = 143 ] || {
        echo "bench: worker $1 exited with status $status; the workers' errors:" >&2
        tail -40 "$work/workers.err" >&2
        exit 1
    }
}
token() { sql "${1##*/}" "SELECT value FROM setting WHERE name = 'token'"; }

# Adds one paused download through a worker's API and prints its id: the template the bulk rows are copied from.
template() {
    local url=$1 token=$2 target=$3
    post "$url/api/v1/downloads" "{\"url\": \"$target\", \"filename\": \"one.bin\", \"paused\": true}" "$token" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}

# Copies download TEMPLATE COUNT times in DATABASE as queued downloads (its URL, a destination and place of their own),
# waiting for PREREQUISITES (a JSON list).
fill() {
    local database=$1 template=$2 count=$3 prerequisites=$4 first=${5:-1} columns select
    columns=$(sql "$database" "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
        FROM information_schema.columns WHERE table_name = 'download'")
    select=$(echo "$columns" | tr ',' '\n' | sed 's/^ *//' | while read -r column; do
        case $column in
            id) echo "gen_random_uuid()::text" ;;
            state) echo "'queued'" ;;
            url) echo "t.url || '?' || n" ;;
            destination) echo "t.destination || '.' || n" ;;
            '"queuePosition"') echo "t.\"queuePosition\" + n" ;;
            prerequisites) echo "'$prerequisites'" ;;
            *) echo "t.$column" ;;
        esac
    done | paste -sd, -)
    # As a bulk load is done: the indexes are dropped and made again afterwards (several times faster than keeping
    # them up to date row by row), and the triggers are off (no worker runs meanwhile, and the rows are not
    # changes any worker must hear of).
    local indexes
    indexes=$(sql "$database" "SELECT string_agg(indexdef, '; ') FROM pg_indexes WHERE tablename = 'download'
        AND indexname <> 'download_pkey'")
    sql "$database" "SELECT 'DROP INDEX ' || string_agg(quote_ident(indexname), ', ') FROM pg_indexes
        WHERE tablename = 'download' AND indexname <> 'download_pkey'" | "$pgbin/psql" -h 127.0.0.1 -p "$pgport" \
        -U haul -d "$database" -q -v ON_ERROR_STOP=1 >/dev/null
    sql "$database" "ALTER TABLE download DISABLE TRIGGER USER"
    sql "$database" "INSERT INTO download ($columns) SELECT $select FROM download AS t,
        generate_series($first, $((first + count - 1))) AS n WHERE t.id = '$template'"
    sql "$database" "ALTER TABLE download ENABLE TRIGGER USER"
    sql "$database" "$indexes"
    sql "$database" "VACUUM ANALYZE download"
}

# POSTs JSON BODY to URL with TOKEN; an answer other than 200 or 201 stops the bench with what the daemon said.
post() {
    local status
    status=$(curl -s -o "$work/answer.json" -w '%{http_code}' -H "Authorization: Bearer $3" \
        -H 'Content-Type: application/json' -d "$2" "$1")
    [ "$status" = 200 ] || [ "$status" = 201 ] ||
        { echo "bench: POST $1 answered $status: $(head -c 500 "$work/answer.json")" >&2; exit 1; }
    cat "$work/answer.json"
}

# The time of one GET, in milliseconds.
get_ms() {
    curl -sf -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $2" "$1" | awk '{ printf "%.1f\n", $1 * 1000 }'
}

# 1. Throughput with 1, 2 and 3 workers.
throughput() {
    local workers=$1 store url token out="$work/out-$1-$RANDOM" started pidlist=() id
    store=$(fresh_store)
    for index in $(seq "$workers"); do
        start_worker "w$index" "$store" "$out" 4
        pidlist+=("$worker_pid")
        [ "$index" = 1 ] && url=$worker_url
    done
    token=$(token "$store")
    local body
    body=$(for i in $(seq -w 1 24); do echo "{\"url\": \"http://127.0.0.1:$webport/big/f$i.bin\", \"connections\": 1}"; done | paste -sd, -)
    started=$(now)
    post "$url/api/v1/downloads" "[$body]" "$token" >/dev/null
    until [ "$(sql "${store##*/}" "SELECT count(*) FROM download WHERE state = 'completed'")" = 24 ]; do sleep 0.05; done
    local elapsed
    elapsed=$(seconds "$started")
    for id in "${pidlist[@]}"; do stop_worker "$id"; done
    awk -v s="$elapsed" 'BEGIN { printf "%.2f\n", 96 / s }'
}

echo "haul $("$haul" --version), PostgreSQL $("$pgbin/postgres" --version | awk '{ print $3 }'), $(nproc) cores," \
    "$rounds rounds"
if only throughput; then
echo
echo "1. 24 x 4 MiB at 1 MiB/s a connection, each worker -j 4 (MiB/s of the whole fleet)"
for workers in 1 2 3; do
    : > "$work/throughput-$workers.txt"
    for _ in $(seq "$rounds"); do throughput "$workers" >> "$work/throughput-$workers.txt"; done
    printf "   %d worker(s): median %6.2f MiB/s   every round: %s\n" "$workers" \
        "$(median < "$work/throughput-$workers.txt")" "$(tr '\n' ' ' < "$work/throughput-$workers.txt")"
done
fi

# 2. Memory and list pages, empty and with 1,000,000 queued behind four slow downloads of high priority: the worker
#    runs those four (each round takes them up again where the last one stopped) and claims none of the queued.
memory_round() {
    local store=$1 label=$2 token first deep cursor
    start_worker "m" "$store" "$work/out-memory" 4
    token=$(token "$store")
    sleep 3
    : > "$work/first.txt"
    : > "$work/deep.txt"
    for _ in $(seq 20); do get_ms "$worker_url/api/v1/downloads?limit=100" "$token" >> "$work/first.txt"; done
    # The cursor of the 900,000th download in queue order, written as the API writes one (priority, the position's
    # bits in hex, id); none in the empty queue.
    cursor=$(sql "${store##*/}" "SELECT priority || ' ' || \"queuePosition\" || ' ' || id FROM download
        ORDER BY (-priority), \"queuePosition\", id COLLATE \"C\" OFFSET 899999 LIMIT 1" |
        python3 -c 'import struct, sys
for line in sys.stdin:
    p, q, i = line.split()
    print("%s_%x_%s" % (p, struct.unpack(">Q", struct.pack(">d", float(q)))[0], i))')
    if [ -n "$cursor" ]; then
        for _ in $(seq 20); do
            get_ms "$worker_url/api/v1/downloads?limit=100&cursor=$cursor" "$token" >> "$work/deep.txt"
        done
    fi
    printf "%s %s %s %s\n" "$label" "$(peak "$worker_pid")" "$(median < "$work/first.txt")" \
        "$( [ -s "$work/deep.txt" ] && median < "$work/deep.txt" || echo -)"
    stop_worker "$worker_pid"
}
if only memory; then
echo
echo "2. one worker's peak memory (MiB), and a page of 100 (ms, median of 20): the first page, one 900,000 deep"
# Four slow downloads of high priority (added paused, then queued by SQL: no worker runs them before the rounds).
slow() {
    local url=$1 token=$2 store=$3 body
    body=$(for i in 1 2 3 4; do
        echo "{\"url\": \"http://127.0.0.1:$webport/slow/f0$i.bin\", \"priority\": \"high\", \"paused\": true}"
    done | paste -sd, -)
    post "$url/api/v1/downloads" "[$body]" "$token" >/dev/null
}
empty=$(fresh_store)
start_worker "setup" "$empty" "$work/out-memory" 4
slow "$worker_url" "$(token "$empty")" "$empty"
stop_worker "$worker_pid"
sql "${empty##*/}" "UPDATE download SET state = 'queued'" >/dev/null
full=$(fresh_store)
start_worker "setup" "$full" "$work/out-memory" 4
slow "$worker_url" "$(token "$full")" "$full"
template=$(template "$worker_url" "$(token "$full")" "http://127.0.0.1:$webport/one.bin")
stop_worker "$worker_pid"
sql "${full##*/}" "UPDATE download SET state = 'queued' WHERE id <> '$template'" >/dev/null
started=$(now)
fill "${full##*/}" "$template" 1000000 "[]"
echo "   (1,000,000 queued rows written in $(seconds "$started") s)"
: > "$work/memory.txt"
for _ in $(seq "$rounds"); do
    memory_round "$empty" empty >> "$work/memory.txt"
    memory_round "$full" 1000000 >> "$work/memory.txt"
done
for label in empty 1000000; do
    grep "^$label " "$work/memory.txt" > "$work/memory-$label.txt"
    printf "   %-8s peak %6.1f MiB (%s)   first page %6.1f ms   deep page %s ms\n" "$label" \
        "$(cut -d' ' -f2 "$work/memory-$label.txt" | median)" "$(cut -d' ' -f2 "$work/memory-$label.txt" | spread)" \
        "$(cut -d' ' -f3 "$work/memory-$label.txt" | median)" \
        "$(cut -d' ' -f4 "$work/memory-$label.txt" | grep -v '^-$' | median || true)"
done
printf "   peak with 1,000,000 queued minus peak empty: %.1f MiB\n" \
    "$(awk -v a="$(cut -d' ' -f2 "$work/memory-1000000.txt" | median)" \
        -v b="$(cut -d' ' -f2 "$work/memory-empty.txt" | median)" 'BEGIN { print a - b }')"
fi

# 3. Claims a second: one worker, -j 32, downloads of one byte, counted over 10 s after 3 s of warm-up.
claims_round() {
    local store=$1 before after
    # Each round from a checkpoint: the writes of the bulk load and of earlier rounds are on the disk, not flushed by a
    # checkpoint in the middle of this one.
    sql postgres "CHECKPOINT"
    start_worker "c" "$store" "$work/out-claims" 32
    sleep 3
    before=$(sql "${store##*/}" "SELECT count(*) FROM download WHERE state = 'completed'")
    sleep 10
    after=$(sql "${store##*/}" "SELECT count(*) FROM download WHERE state = 'completed'")
    stop_worker "$worker_pid"
    awk -v n="$((after - before))" 'BEGIN { printf "%.1f\n", n / 10 }'
}
if only claims; then
echo
echo "3. downloads claimed and completed a second by one worker (-j 32, one byte each)"
# Two stores, one with each queue, their rounds taken in turn: what changes with the time the bench has run (the
# completed downloads each round leaves behind, the machine) weighs on both alike.
for count in 100000 1000000; do
    store=$(fresh_store)
    start_worker "setup" "$store" "$work/out-claims" 4
    one=$(template "$worker_url" "$(token "$store")" "http://127.0.0.1:$webport/one.bin")
    stop_worker "$worker_pid"
    fill "${store##*/}" "$one" "$count" "[]"
    eval "claims_$count=\$store"
    : > "$work/claims-$count.txt"
done
for _ in $(seq "$rounds"); do
    claims_round "$claims_100000" >> "$work/claims-100000.txt"
    claims_round "$claims_1000000" >> "$work/claims-1000000.txt"
done
c1=$(median < "$work/claims-100000.txt")
c2=$(median < "$work/claims-1000000.txt")
printf "   100,000 queued:   median %7.1f/s   every round: %s\n" "$c1" "$(tr '\n' ' ' < "$work/claims-100000.txt")"
printf "   1,000,000 queued: median %7.1f/s   every round: %s\n" "$c2" "$(tr '\n' ' ' < "$work/claims-1000000.txt")"
printf "   ratio 1,000,000 / 100,000: %.2fx\n" "$(awk -v a="$c2" -v b="$c1" 'BEGIN { print a / b }')"
fi

# 4. A pause through another worker, and a takeover: a download of 4 MiB at 64 KiB/s, two workers with leases of 3 s.
state_of() { sql "${1##*/}" "SELECT state FROM download WHERE id = '$2'"; }
# The worker that holds a live lease of download $2 in store $1 (empty when none does).
holder() { sql "${1##*/}" "SELECT worker FROM download WHERE id = '$2' AND lease IS NOT NULL AND \"leaseExpires\" >= now()"; }
command_post() { curl -sf -o /dev/null -X POST -H "Authorization: Bearer $2" "$1"; }
takeover_round() {
    local store out="$work/out-takeover-$RANDOM" token id started pause taken runs
    local -A pid url
    store=$(fresh_store)
    for name in a b; do
        start_worker "$name" "$store" "$out" 4 --lease 3s
        pid[$name]=$worker_pid
        url[$name]=$worker_url
    done
    token=$(token "$store")
    id=$(post "${url[a]}/api/v1/downloads" "{\"url\": \"http://127.0.0.1:$webport/slow/f05.bin\"}" "$token" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
    until [ "$(state_of "$store" "$id")" = running ] && [ -n "$(holder "$store" "$id")" ]; do sleep 0.01; done
    # Paused through the worker that does not run it.
    runs=$(holder "$store" "$id")
    local other=a
    [ "$runs" = a ] && other=b
    started=$(now)
    command_post "${url[$other]}/api/v1/downloads/$id/pause" "$token"
    until [ "$(state_of "$store" "$id")" = paused ]; do sleep 0.01; done
    pause=$(seconds "$started")
    command_post "${url[$other]}/api/v1/downloads/$id/resume" "$token"
    until [ "$(state_of "$store" "$id")" = running ] && [ -n "$(holder "$store" "$id")" ]; do sleep 0.01; done
    # The worker that runs it dies.
    runs=$(holder "$store" "$id")
    other=a
    [ "$runs" = a ] && other=b
    started=$(now)
    kill -9 "${pid[$runs]}"
    wait "${pid[$runs]}" 2>/dev/null || true
    until [ "$(holder "$store" "$id")" = "$other" ]; do sleep 0.01; done
    taken=$(seconds "$started")
    stop_worker "${pid[$other]}"
    echo "$pause $taken"
}
only takeover || exit 0
echo
echo "4. two workers, leases of 3 s, a download at 64 KiB/s running on one of them (seconds)"
: > "$work/takeover.txt"
for _ in $(seq "$rounds"); do takeover_round >> "$work/takeover.txt"; done
printf "   pause through the other worker, until acknowledged: median %.2f s (%s)\n" \
    "$(cut -d' ' -f1 "$work/takeover.txt" | median)" "$(cut -d' ' -f1 "$work/takeover.txt" | spread)"
printf "   SIGKILL of the worker that runs it, until the other holds its lease: median %.2f s (%s)\n" \
    "$(cut -d' ' -f2 "$work/takeover.txt" | median)" "$(cut -d' ' -f2 "$work/takeover.txt" | spread)"
