#!/usr/bin/env bash
# Every figure of bench/README.md "Sweep strategies": bench_sweep on each
# objective and noise level, 20 sweep seeds, in parts of a few CPU-minutes, each
# part under the shared build lock (the machine is shared), CSVs into
# bench/results/sweep/, then bench/sweep_report.py prints the tables and draws
# docs/images/sweep_regret.svg.
#   bench/run_sweep_bench.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/bench/bench_sweep
OUT=bench/results/sweep
LOCK=/tmp/trainq-build.lock
mkdir -p "$OUT"
part() { flock "$LOCK" "$B" --reps 20 --out "$OUT" "$@"; }
for n in 0 0.5 2; do part --objective branin --noise "$n"; done
for n in 0 1 2; do part --objective digits --noise "$n"; done
for n in 0 0.05 0.2; do
  part --objective hartmann6 --noise "$n" --strategies random,tpe,trainq,trainq-noconfirm,trainq-adaptive
  # the naive GP refits on every single run: ~25 s per sweep at 150 runs
  flock "$LOCK" "$B" --objective hartmann6 --noise "$n" --strategies gp-naive --reps 10 --out "$OUT"
  flock "$LOCK" "$B" --objective hartmann6 --noise "$n" --strategies gp-naive --reps 10 --first-seed 11 --out "$OUT"
done
/usr/bin/python3 bench/sweep_report.py "$OUT"
