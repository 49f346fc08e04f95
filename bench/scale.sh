#!/usr/bin/env bash
# Every figure of bench/README.md "Scale": bench_scale at each history size
# (a queue of 1,000 on top of N finished runs) and each queue depth (N queued),
# the fleet at 1k and 10k machines, each part under the shared build lock
# (the machine is shared: the load average is recorded with each part), then
# bench/scale_report.py writes bench/results/scale/*.csv's tables and draws
# docs/images/scale_*.svg.
#   bench/scale.sh [BUILD_DIR]        SIZES="10000 100000 1000000 3000000" MACHINES="1000 10000"
#   BASE_TRAINQ=/path/to/old/trainq: also time the CLI of a build before schema 12
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
B=$BUILD/bench/bench_scale
T=$(realpath "$BUILD/agent/trainq")
OUT=bench/results/scale
LOCK=${LOCK:-/tmp/trainq-build.lock}  # LOCK=none: the caller holds it
locked() { if [ "$LOCK" = none ]; then "$@"; else flock "$LOCK" "$@"; fi; }
SIZES=${SIZES:-"10000 100000 1000000 3000000"}
QUEUE_SIZES=${QUEUE_SIZES:-"10000 100000 1000000"}
# The fleet with a provider whose boots take BOOT_DELAY_MS and fail a
# fraction BOOT_FAIL of the time, at SLOW_MACHINES machines.
SLOW_MACHINES=${SLOW_MACHINES:-1000}
BOOT_DELAY_MS=${BOOT_DELAY_MS:-20}
BOOT_FAIL=${BOOT_FAIL:-0.05}
MACHINES=${MACHINES:-"1000 10000"}
WORKERS=${WORKERS:-"1000 10000"}
mkdir -p "$OUT"
base=()
[ -n "${BASE_TRAINQ:-}" ] && base=(--base-trainq "$BASE_TRAINQ")
part() {  # part NAME ARGS...: one run of bench_scale into $OUT/NAME.txt
  local name=$1
  shift
  locked nice -n "${NICE:-10}" sh -c 'echo "load $(cut -d" " -f1-3 /proc/loadavg)"; "$@"; echo "load_after $(cut -d" " -f1-3 /proc/loadavg)"' \
    sh "$B" "$@" >"$OUT/$name.txt"
  echo "$name: $(grep -c '^figure' "$OUT/$name.txt") figures"
}
for n in $SIZES; do
  # --http: a real serve on the store, the dashboard's data and read routes.
  part "history-$n" --runs "$n" --queued 1000 --trainq "$T" --http "${base[@]}"
done
for n in $QUEUE_SIZES; do part "queue-$n" --runs "$n" --queued "$n" --trainq "$T"; done
for m in $MACHINES; do part "fleet-$m" --fleet "$m"; done
part "fleet-slow-$SLOW_MACHINES" --fleet "$SLOW_MACHINES" --boot-delay-ms "$BOOT_DELAY_MS" \
  --boot-fail "$BOOT_FAIL"
# 1,000 heartbeats/s from 10,000 workers over HTTP, 20 webhooks/s meanwhile.
HB=$BUILD/bench/bench_heartbeats
for w in $WORKERS; do
  locked sh -c 'echo "load $(cut -d" " -f1-3 /proc/loadavg)"; "$@"; echo "load_after $(cut -d" " -f1-3 /proc/loadavg)"' \
    sh "$HB" --workers "$w" --rate $((w / 10)) --seconds "${HB_SECONDS:-30}" --trainq "$T" >"$OUT/workers-$w.txt"
  echo "workers-$w: $(grep -c '^figure' "$OUT/workers-$w.txt") figures"
done
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
  echo "date $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
} >"$OUT/meta.txt"
/usr/bin/python3 bench/scale_report.py "$OUT"
