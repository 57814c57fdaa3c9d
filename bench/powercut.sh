#!/usr/bin/env bash
# Power cuts: N cuts (default 500) of Haul on the power-cut file system, spread over its scenarios (one download with
# one connection and with -x 8, a batch with -j 16, haul serve with API adds, pauses, removes and moves, and cuts the
# file system makes itself in the middle of a store commit, haul get -c continuing the user's file, and haul rm giving
# that file back, cut before one of the changes it makes); after each,
# the promises are checked, the same command runs again and its result is compared. See bench/powercut.py for what is
# checked.
#
#   bench/powercut.sh [N]   (as root, for FUSE; needs nginx, python3, a C compiler and libfuse3:
#                            apt-get install nginx-light python3 gcc pkg-config libfuse3-dev fuse3)
#   HAUL=PATH bench/powercut.sh N   runs that haul instead of a fresh release build.
#
# Prints, last, one line: "cuts N, violations V, over bound B, refetched per cut mean M MiB, max X MiB", and exits 1
# when a promise was broken. The seed is printed first; POWERCUT_SEED=S replays a run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:/usr/sbin:/sbin:$PATH"
cuts=${1:-500}
if [ -z "${HAUL:-}" ]; then
    scripts/build-release haul >/dev/null
    HAUL="$(swift build -c release --show-bin-path)/haul"
fi
exec /usr/bin/python3 -u bench/powercut.py --cuts "$cuts" --haul "$HAUL" ${POWERCUT_SEED:+--seed "$POWERCUT_SEED"}
