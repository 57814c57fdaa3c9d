#!/usr/bin/env bash
# Kill storm: one 1 GiB download with `haul get -x 8` from a loopback nginx that sends at most RATE a second per
# connection, killed with SIGKILL at a random moment KILLS times and run again each time (the same command), then run
# once more to the end. It checks that the file is byte-identical to the source, and measures what each kill cost:
# the bytes a later run fetched again that an earlier run had already received (from nginx's log: every answer's
# range and the bytes it sent, so bytes in flight at the kill count as fetched again too).
#
#   bench/killstorm.sh                 KILLS=100 SIZE_MIB=1024 RATE_KIB=1024 (per connection) by default
#
# The bound it checks is DESIGN.md's checkpoint rule: a kill loses at most what the connections received since the
# last checkpoint (one a second), so at most one checkpoint interval per connection: 8 × RATE × 1 s, plus 256 KiB per
# connection for bytes in flight. Exits 1 when the file differs or a kill cost more. Changes nothing on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
kills=${KILLS:-100}
size_mib=${SIZE_MIB:-1024}
rate_kib=${RATE_KIB:-1024}
for tool in nginx curl python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "killstorm: $tool is missing (apt-get install nginx-light curl)" >&2; exit 2; }
done

scripts/build-release haul >/dev/null
haul="$(swift build -c release --show-bin-path 2>/dev/null)/haul"

nginx_pid=
work=$(mktemp -d /tmp/haul-killstorm.XXXXXX)
cleanup() {
    [ -n "$nginx_pid" ] && kill -9 "$nginx_pid" 2>/dev/null
    if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$work/www" "$work/out" "$work/state"
head -c $((size_mib * 1024 * 1024)) /dev/urandom > "$work/www/big.bin"
port=$(free_port)
start_nginx "$work" "$port" "location /slow/ { alias $work/www/; limit_rate ${rate_kib}k; access_log $work/access.log storm; }" \
    "log_format storm '\$msec \$request_time \$status \"\$http_range\" \$body_bytes_sent';"

url="http://127.0.0.1:$port/slow/big.bin"
out="$work/out/big.bin"
# exec: the pid killed is haul's own, not a subshell's.
get() { exec "$haul" get -x 8 "$url" -o "$out" --quiet --state-dir "$work/state"; }

echo "haul $("$haul" --version): ${size_mib} MiB at ${rate_kib} KiB/s per connection, $kills kills"
: > "$work/runs.txt"
finished_early=0
for kill in $(seq "$kills"); do
    # A random moment between 0.05 and 2.5 s after the start: before the first checkpoint (1 s in), during one,
    # between them.
    delay=$(python3 -c "import random; print(f'{random.uniform(0.05, 2.5):.3f}')")
    started=$(date +%s.%N)
    get &
    pid=$!
    sleep "$delay"
    if kill -9 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null || true
        echo "$started $(date +%s.%N) killed" >> "$work/runs.txt"
    else
        wait "$pid" || true
        echo "$started $(date +%s.%N) finished" >> "$work/runs.txt"
        finished_early=1
        break
    fi
done
started=$(date +%s.%N)
(get)
echo "$started $(date +%s.%N) finished" >> "$work/runs.txt"
# nginx logs an answer when it ends; a killed connection may end a moment after its run.
sleep 1

if cmp -s "$out" "$work/www/big.bin"; then echo "the file is byte-identical to the source"; else
    echo "killstorm: the file differs from the source" >&2
    exit 1
fi
[ "$finished_early" = 0 ] || echo "note: the download finished before the last kill (lower RATE_KIB or SIZE_MIB)"

python3 - "$work/runs.txt" "$work/access.log" "$size_mib" "$rate_kib" <<'PY'
import statistics, sys

runs = [line.split() for line in open(sys.argv[1])]
runs = [(float(a), float(b), what) for a, b, what in runs]
total = int(sys.argv[3]) << 20
rate = int(sys.argv[4]) << 10
answers = []  # (start time, first byte, bytes sent)
for line in open(sys.argv[2]):
    end, duration, status, rest = line.split(" ", 3)
    rng, sent = rest.rsplit(" ", 1)
    rng = rng.strip('"')
    first = int(rng.split("=")[1].split("-")[0]) if rng.startswith("bytes=") else 0
    answers.append((float(end) - float(duration), first, int(sent)))

def run_of(start):
    # Requests start after their run began; the log's clock has millisecond resolution.
    candidates = [i for i, (a, b, _) in enumerate(runs) if a - 0.002 <= start]
    return candidates[-1] if candidates else 0

def merge(ranges):
    out = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out

def overlap(ranges, held):
    n = 0
    for a, b in ranges:
        for c, d in held:
            n += max(0, min(b, d) - max(a, c))
    return n

per_run = [[] for _ in runs]
for start, first, sent in answers:
    per_run[run_of(start)].append((first, first + sent))
received = []
again = []
for i, ranges in enumerate(per_run):
    ranges = merge(ranges)
    if i > 0 and runs[i - 1][2] == "killed":
        again.append(overlap(ranges, merge(received)))
    received += ranges
fetched = sum(sent for _, _, sent in answers)
bound = 8 * (rate + (256 << 10))
mib = lambda n: n / (1 << 20)
print(f"runs: {len(runs)} ({sum(1 for r in runs if r[2] == 'killed')} killed), requests: {len(answers)}")
print(f"fetched in all: {mib(fetched):.1f} MiB for a {mib(total):.0f} MiB file ({fetched / total:.3f}x)")
if again:
    print(f"fetched again per kill: mean {mib(statistics.mean(again)):.2f} MiB, median {mib(statistics.median(again)):.2f} MiB, "
          f"max {mib(max(again)):.2f} MiB; bound {mib(bound):.2f} MiB (8 connections x one checkpoint interval + 256 KiB in flight)")
over = [x for x in again if x > bound]
if over:
    print(f"killstorm: {len(over)} kills cost more than the bound: {[round(mib(x), 2) for x in over]} MiB", file=sys.stderr)
    sys.exit(1)
PY
