#!/usr/bin/env bash
# Benchmark of trainq-train on the issue's digits MLP (bench/digits_mlp_bench.yaml:
# 64-256-128-10, ReLU, Adam 1e-3, batch 64, 30 epochs, first 1437 rows train,
# last 360 test), ten seeds end to end (process start, data load, training,
# test), in several forms measured in the same run:
#   (a) the Python reference (bench/reference_mlp.py), ten sequential processes
#   (b) trainq-train, ten sequential processes
#   (c) trainq-train, ten processes two at a time
#   (d) trainq-train, one process, --repeats 10 --fuse off (seeds one after another)
#   (e) trainq-train, one process, --repeats 10 fused
#   (f) as (e) with --threads 2
#   (g) as (e) with another build, BASELINE=/path/to/old/trainq-train (a before/after in the same run)
# For each form: wall seconds, user and user+sys CPU seconds (all processes),
# the mean test accuracy, the speed-up against (a) and the fraction of the two
# cores' peak reached. On a machine shared with other work, wall time includes
# waiting for a core; compare CPU seconds, and forms within one run.
#
# Not run by CI. Needs a built trainq-train; (a) needs Debian's python3-torch
# (apt-get install -y python3-torch) and is skipped without it. The peak is
# the best of several 2048^3 sgemm calls on one thread through libblas.so.3 (the
# BLAS libtorch calls), times two for the two cores (bench/blas_peak.c, built
# with cc). This script installs nothing.
#
# usage: bench/bench_trainer.sh [TRAINQ_TRAIN]     (default build/agent/trainq-train)
#   ROUNDS=3 bench/bench_trainer.sh   runs every form 3 times (interleaved) and reports medians
#   FORMS="a e" bench/bench_trainer.sh   runs only some forms
#   BASELINE=/tmp/old-trainq-train bench/bench_trainer.sh   adds form (g)
#   PYTHON=/usr/bin/python3 (default): the Python with Debian's torch
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bin="${1:-$root/build/agent/trainq-train}"
spec="$here/digits_mlp_bench.yaml"
ref="$here/reference_mlp.py"
rounds="${ROUNDS:-1}"
forms="${FORMS:-a b c d e f}"
baseline="${BASELINE:-}"
[[ -n "$baseline" && $forms != *g* ]] && forms="$forms g"
seeds=10
py="${PYTHON:-/usr/bin/python3}"
flops=1.3e11   # ten seeds: about 3 x 50432 multiply-adds x 2 per sample x 1437 rows x 30 epochs x 10

[[ -x "$bin" ]] || { echo "bench: $bin not found; build it: cmake --build build -j1 --target trainq-train" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 2; }
have_torch=0
if "$py" -c 'import torch' 2>/dev/null; then have_torch=1; else
  echo "bench: python3-torch missing: form (a) and the peak measurement are skipped (apt-get install -y python3-torch)" >&2
  forms="${forms//a/}"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One form: runs it under GNU time; output goes to $work/<form>.<round>.{out,time}.
run_form() {
  local f="$1" r="$2" cmd
  case "$f" in
    a) cmd="for s in \$(seq 1 $seeds); do '$py' '$ref' \$s; done" ;;
    b) cmd="for s in \$(seq 1 $seeds); do '$bin' '$spec' --seed \$s -q; done" ;;
    c) cmd="seq 1 $seeds | xargs -P2 -I{} '$bin' '$spec' --seed {} -q" ;;
    d) cmd="'$bin' '$spec' --seed 1 --repeats $seeds --fuse off -q" ;;
    e) cmd="'$bin' '$spec' --seed 1 --repeats $seeds -q" ;;
    f) cmd="'$bin' '$spec' --seed 1 --repeats $seeds --threads 2 -q" ;;
    g) cmd="'$baseline' '$spec' --seed 1 --repeats $seeds -q" ;;
  esac
  /usr/bin/time -f '%e %U %S' -o "$work/$f.$r.time" bash -c "$cmd" >"$work/$f.$r.out" 2>"$work/$f.$r.err" ||
    { echo "bench: form ($f) failed:" >&2; cat "$work/$f.$r.err" >&2; exit 1; }
}

# Peak: the best 2048^3 sgemm on one thread through the BLAS libtorch calls.
peak1=""
if command -v cc >/dev/null && cc -O2 -o "$work/blas_peak" "$here/blas_peak.c" -ldl 2>/dev/null; then
  peak1=$("$work/blas_peak" 8 || true)
else
  echo "bench: no C compiler: the peak is not measured" >&2
fi

echo "bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uptime | sed 's/.*load/load/')"
echo "bench: $bin, $rounds round(s), forms: $forms"
for r in $(seq 1 "$rounds"); do
  for f in $forms; do run_form "$f" "$r"; done
done
echo "bench: after the run $(uptime | sed 's/.*load/load/')"

label() {
  case "$1" in
    a) echo "(a) Python reference, 10 processes" ;;
    b) echo "(b) trainq-train, 10 processes" ;;
    c) echo "(c) trainq-train, 10 processes 2 at a time" ;;
    d) echo "(d) trainq-train --repeats 10 --fuse off" ;;
    e) echo "(e) trainq-train --repeats 10 (fused)" ;;
    f) echo "(f) trainq-train --repeats 10 --threads 2" ;;
    g) echo "(g) BASELINE --repeats 10 (fused)" ;;
  esac
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

[[ -n "$peak1" ]] && echo "bench: peak (2048^3 sgemm, best of 8, 1 thread): $(awk -v p="$peak1" 'BEGIN{printf "%.1f", p/1e9}') GFLOP/s"
printf '%-44s %8s %8s %8s %9s %8s %8s %9s\n' form wall_s user_s cpu_s accuracy "a/wall" "%peak" "%peak/cpu"
ref_wall=""
for f in $forms; do
  wall=$(for r in $(seq 1 "$rounds"); do awk '{print $1}' "$work/$f.$r.time"; done | median)
  user=$(for r in $(seq 1 "$rounds"); do awk '{print $2}' "$work/$f.$r.time"; done | median)
  cpu=$(for r in $(seq 1 "$rounds"); do awk '{print $2 + $3}' "$work/$f.$r.time"; done | median)
  acc=$(cat "$work/$f.1.out" | awk '/test_accuracy/ {s += $4; n++} END {printf "%.4f", n ? s / n : 0}')
  [[ $f == a ]] && ref_wall="$wall"
  ratio="-"; [[ -n "$ref_wall" ]] && ratio=$(awk -v a="$ref_wall" -v w="$wall" 'BEGIN{printf "%.2fx", a / w}')
  peak="-"; [[ -n "$peak1" ]] && peak=$(awk -v fl="$flops" -v w="$wall" -v p="$peak1" 'BEGIN{printf "%.1f%%", 100 * fl / w / (2 * p)}')
  peakc="-"; [[ -n "$peak1" ]] && peakc=$(awk -v fl="$flops" -v c="$cpu" -v p="$peak1" 'BEGIN{printf "%.1f%%", 100 * fl / c / p}')
  printf '%-44s %8.2f %8.2f %8.2f %9s %8s %8s %9s\n' "$(label "$f")" "$wall" "$user" "$cpu" "$acc" "$ratio" "$peak" "$peakc"
done
echo "a/wall: speed-up against (a), same run; %peak: $flops FLOPs / wall / (2 x the 1-thread sgemm peak = the two cores' peak)"
echo "%peak/cpu: $flops FLOPs / CPU seconds / the 1-thread peak (the efficiency of the CPU time used; not hurt by waiting for a shared core)"
