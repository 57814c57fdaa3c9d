#!/usr/bin/env bash
# Fuzzes the parsers of what a server or a user sends (HaulCore's Content-Range, Content-Disposition, ETag, HTTP dates,
# Retry-After, input files, sizes and rates, --header values, checksums, proxy URLs and no_proxy lists, .netrc files,
# cookie files and --cookie data, WWW-Authenticate challenges, FTP replies and the FTP session, schedule rules and
# Metalink documents) with libFuzzer.
#
#   fuzz/run.sh [SECONDS] [TARGET…]      run each target SECONDS (default 20) from its seed corpus in fuzz/corpus
#   fuzz/run.sh --merge [TARGET…]        fold what the last runs found into the committed seed corpora (minimised)
#
# HaulCore is compiled once with `swiftc -sanitize=fuzzer,address`; each fuzz/targets/NAME.swift is linked against it.
# What a run finds goes to .build/fuzz/found/NAME, crashes to .build/fuzz/crashes; the script fails when a target
# crashes (a broken property or a memory error), printing the input. It changes nothing outside .build/fuzz.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.build/fuzz
merge=0
if [[ ${1:-} == --merge ]]; then merge=1; shift; fi
seconds=20
if [[ ${1:-} =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
targets=("$@")
if ((${#targets[@]} == 0)); then
    for file in "$root"/fuzz/targets/*.swift; do
        name=$(basename "$file" .swift)
        [[ $name == Common ]] || targets+=("$name")
    done
fi
# A crash is reported by libFuzzer and the sanitizer; Swift's own backtracer would hold the run for its timeout.
export SWIFT_BACKTRACE=enable=no
mkdir -p "$out/lib" "$out/bin" "$out/found" "$out/crashes" "$out/logs"
flags=(-sanitize=fuzzer,address -parse-as-library -O -use-ld=lld)

mapfile -t sources < <(find "$root/Sources/HaulCore" -name "*.swift" | sort)
if [[ ! -f $out/lib/libHaulCore.a ]] || [[ -n $(find "${sources[@]}" -newer "$out/lib/libHaulCore.a") ]]; then
    echo "building HaulCore for fuzzing…"
    swiftc "${flags[@]}" -emit-library -static -emit-module -module-name HaulCore \
        -emit-module-path "$out/lib/HaulCore.swiftmodule" -o "$out/lib/libHaulCore.a" "${sources[@]}"
fi

status=0
printf '%-22s %12s %10s %8s %8s\n' target executions "per sec" corpus crashes
for name in "${targets[@]}"; do
    seeds=$root/fuzz/corpus/$name
    found=$out/found/$name
    mkdir -p "$seeds" "$found"
    swiftc "${flags[@]}" -I "$out/lib" -L "$out/lib" -lHaulCore \
        "$root/fuzz/targets/Common.swift" "$root/fuzz/targets/$name.swift" -o "$out/bin/$name"
    if ((merge)); then
        "$out/bin/$name" -merge=1 "$seeds" "$found" >"$out/logs/$name.merge" 2>&1
        echo "$name: $(ls "$seeds" | wc -l) seeds"
        continue
    fi
    log=$out/logs/$name.log
    crashed=0
    "$out/bin/$name" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$out/crashes/$name-" "$found" "$seeds" >"$log" 2>&1 || crashed=1
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    corpus=$(ls "$found" "$seeds" | grep -vc ':$' || true)
    printf '%-22s %12s %10s %8s %8s\n' "$name" "${runs:-?}" "${rate:-?}" "$corpus" "$crashed"
    if ((crashed)); then
        status=1
        grep -E "Fatal error|ERROR: AddressSanitizer|ERROR: libFuzzer|Test unit written" "$log" | head -5 | sed 's/^/    /'
    fi
done
exit $status
