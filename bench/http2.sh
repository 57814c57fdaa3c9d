#!/usr/bin/env bash
# HTTP/2 against HTTP/1.1 over TLS, with nginx offering both (ALPN) on loopback: one 512 MiB file with -x 1 and -x 4,
# and 200 files of 64 KiB with -j 16, each ROUNDS times (default 3) with the release build; prints the median wall
# time of each and the ratio h2/h1.1. HAUL_HTTP_VERSION=2 makes Haul offer HTTP/2.
#
#   bench/http2.sh [ROUNDS]
#
# Everything it writes stays in a temporary folder, removed at the end; it changes no setting of the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
rounds=${1:-3}
make_work http2
cd "$root" && scripts/build-release haul >/dev/null
haul=$root/.build/release/haul

mkdir -p "$work/www"
head -c $((512 << 20)) /dev/urandom > "$work/www/big.bin"
make_small_files "$work/www" && mv "$work/www/small" "$work/www/s"
ls "$work/www/s" | sed -n 1,200p | sed "s|^|https://localhost:PORT/s/|" > "$work/list.tmpl"
(
    cd "$work"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
    echo "subjectAltName=DNS:localhost" > ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
        -out server.pem 2>/dev/null
)
port=$(free_port)
tls_port=$(free_port)
start_nginx "$work" "$port" "listen 127.0.0.1:$tls_port ssl http2; ssl_certificate $work/server.pem; ssl_certificate_key $work/server.key;"
sed "s/PORT/$tls_port/" "$work/list.tmpl" > "$work/list.txt"
curl -s --http2 --cacert "$work/ca.pem" -o /dev/null -w "nginx answers over HTTP/%{http_version}\n" \
    "https://localhost:$tls_port/s/f0000.bin"

# time_of VERSION ARGS…: wall seconds of one haul get run into a fresh folder.
time_of() {
    local version=$1
    shift
    rm -rf "$work/out" "$work/state" && mkdir -p "$work/out"
    local start end
    start=$(date +%s.%N)
    HAUL_HTTP_VERSION=$version SSL_CERT_FILE=$work/ca.pem "$haul" get --quiet --state-dir "$work/state" "$@"
    end=$(date +%s.%N)
    python3 -c "print($end - $start)"
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf '%-28s %10s %10s %8s\n' case "HTTP/1.1" "HTTP/2" "h2/h1.1"
for case in "big -x 1" "big -x 4" "small -j 16"; do
    for version in 1.1 2; do
        : > "$work/times.$version"
        for _ in $(seq "$rounds"); do
            case $case in
            "big -x 1") args=("https://localhost:$tls_port/big.bin" -o "$work/out/big.bin" -x 1) ;;
            "big -x 4") args=("https://localhost:$tls_port/big.bin" -o "$work/out/big.bin" -x 4) ;;
            *) args=(-i "$work/list.txt" -d "$work/out" -j 16) ;;
            esac
            time_of "$version" "${args[@]}" >> "$work/times.$version"
        done
    done
    h1=$(median < "$work/times.1.1")
    h2=$(median < "$work/times.2")
    printf '%-28s %9.2fs %9.2fs %7.2fx\n' "$case" "$h1" "$h2" "$(python3 -c "print($h2 / $h1)")"
done
