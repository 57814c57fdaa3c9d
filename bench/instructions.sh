#!/usr/bin/env bash
# Instructions, not seconds: what haul get, haul-floor (the prescribed parts with Haul's file guarantees) and
# haul-floor --store (the same with the state a download manager keeps) execute in user space for 1000 and 200 files
# of 64 KiB, -j 16, from a loopback nginx, counted by valgrind's callgrind. The difference of the two runs over 800
# is each file's cost, and what is left of a run the fixed cost (start, argument parsing, opening the store). On an
# idle machine counts repeat within about 1 % from run to run, where the timings of bench/run.sh vary by a tenth or
# more on this VM, so a change of a few percent in the work per file shows here first; under other load they move
# more, as the threads' timing changes how writes share commits. They leave out the kernel, whose share (each file's
# open, write, fsync and rename) is about the same in all three.
#
#   bench/instructions.sh          (needs nginx, curl and valgrind: apt-get install nginx-light curl valgrind)
#   BENCH_TOP=30 bench/instructions.sh    (also the 30 functions whose own instructions a file most exceed
#                                          haul-floor --store's)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"

for tool in nginx curl valgrind callgrind_annotate objcopy python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench: $tool is missing (apt-get install nginx-light curl valgrind)" >&2; exit 2; }
done

scripts/build-release haul >/dev/null
scripts/build-release haul-floor >/dev/null
bin="$(swift build -c release --show-bin-path)"

make_work bench
mkdir -p "$work/www"
make_small_files "$work/www"
port=$(free_port)
start_nginx "$work" "$port"
for i in $(seq -f "%04g" 0 999); do echo "http://127.0.0.1:$port/small/f$i.bin"; done > "$work/1000.txt"
head -200 "$work/1000.txt" > "$work/200.txt"

# valgrind 3.19 cannot read the DWARF 5 forms Swift writes; the symbols it needs are in the symbol table.
objcopy --strip-debug "$bin/haul" "$work/haul"
objcopy --strip-debug "$bin/haul-floor" "$work/haul-floor"

# count NAME LIST: one run under callgrind; prints the instructions counted.
count() {
    local name=$1 list=$2 out="$work/cg.$1.$2"
    rm -rf "$work/out" "$work/state" "$work/store.db"*
    mkdir -p "$work/out"
    case $name in
        haul) set -- "$work/haul" get -j 16 -i "$work/$list.txt" -d "$work/out" --quiet --state-dir "$work/state" ;;
        floor) set -- "$work/haul-floor" "$work/$list.txt" "$work/out" 16 ;;
        store) set -- "$work/haul-floor" "$work/$list.txt" "$work/out" 16 --store "$work/store.db" ;;
    esac
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" > "$work/valgrind.log" 2>&1
    [ "$(ls "$work/out" | wc -l)" = "${list}" ] || { echo "bench: $name fetched $(ls "$work/out" | wc -l) of $list files" >&2; exit 1; }
    grep -o 'refs: *[0-9,]*' "$work/valgrind.log" | tr -d ', ' | cut -d: -f2
}

echo "haul $("$bin/haul" --version), valgrind $(valgrind --version | sed 's/valgrind-//'), 1000 and 200 x 64 KiB, -j 16"
printf '%-8s %14s %14s %16s %14s\n' tool "1000 files" "200 files" "a file" fixed
declare -A per
for name in haul floor store; do
    large=$(count $name 1000)
    small=$(count $name 200)
    per[$name]=$(( (large - small) / 800 ))
    printf '%-8s %14s %14s %16s %14s\n' "$name" "$large" "$small" "${per[$name]}" "$(( small - 200 * per[$name] ))"
done
python3 -c "h,f,s=${per[haul]},${per[floor]},${per[store]}; print(f'a file: haul/floor {h/f:.2f}x, haul/store {h/s:.2f}x, store/floor {s/f:.2f}x')"

if [ -n "${BENCH_TOP:-}" ]; then
    # Each function's own instructions (callees excluded) a file, haul's against haul-floor --store's.
    python3 - "$work" "$BENCH_TOP" <<'PY'
import re, subprocess, sys
work, top = sys.argv[1], int(sys.argv[2])
def own(name, files):
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", f"{work}/cg.{name}.{files}"],
                          capture_output=True, text=True).stdout
    costs = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+?:)?(.*?)(\s+\[.*\])?$", line)
        if match and "PROGRAM TOTALS" not in line:
            key = match.group(3).strip()
            costs[key] = costs.get(key, 0) + int(match.group(1).replace(",", ""))
    return costs
def per_file(name):
    large, small = own(name, 1000), own(name, 200)
    return {key: (large.get(key, 0) - small.get(key, 0)) / 800 for key in set(large) | set(small)}
haul, store = per_file("haul"), per_file("store")
rows = sorted(set(haul) | set(store), key=lambda key: store.get(key, 0) - haul.get(key, 0))[:top]
names = subprocess.run(["swift-demangle", "--simplified"], input="\n".join(rows), capture_output=True,
                       text=True).stdout.splitlines()
print(f"{'haul':>8} {'store':>8}  function (own instructions a file)")
for key, name in zip(rows, names):
    print(f"{haul.get(key, 0):8.0f} {store.get(key, 0):8.0f}  {name[:110]}")
PY
fi
