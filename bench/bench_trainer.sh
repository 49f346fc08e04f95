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
# For each form: wall seconds, user-CPU seconds (all processes), the mean test
# accuracy, the speed-up against (a) and the fraction of the cores' peak reached.
#
# Not run by CI. Needs a built trainq-train and, for (a) and for the peak,
# Debian's python3-torch (apt-get install -y python3-torch); without it (a) is
# skipped and the peak is not measured. This script installs nothing.
#
# usage: bench/bench_trainer.sh [TRAINQ_TRAIN]     (default build/agent/trainq-train)
#   ROUNDS=3 bench/bench_trainer.sh   runs every form 3 times (interleaved) and reports medians
#   FORMS="a e" bench/bench_trainer.sh   runs only some forms
#   PYTHON=/usr/bin/python3 (default): the Python with Debian's torch
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bin="${1:-$root/build/agent/trainq-train}"
spec="$here/digits_mlp_bench.yaml"
ref="$here/reference_mlp.py"
rounds="${ROUNDS:-1}"
forms="${FORMS:-a b c d e f}"
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
  esac
  /usr/bin/time -f '%e %U %S' -o "$work/$f.$r.time" bash -c "$cmd" >"$work/$f.$r.out" 2>"$work/$f.$r.err" ||
    { echo "bench: form ($f) failed:" >&2; cat "$work/$f.$r.err" >&2; exit 1; }
}

# Peak: a large single-precision matrix product through the same libtorch
# build (Python's torch links the same BLAS), one thread and two threads.
peak1=""; peak2=""
if [[ $have_torch == 1 ]]; then
  read -r peak1 peak2 < <("$py" - <<'EOF'
import time, torch
a = torch.randn(2048, 2048); b = torch.randn(2048, 2048)
out = []
for t in (1, 2):
    torch.set_num_threads(t)
    torch.mm(a, b)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter(); torch.mm(a, b); dt = time.perf_counter() - t0
        best = max(best, 2 * 2048**3 / dt)
    out.append(best)
print(" ".join(f"{x:.4g}" for x in out))
EOF
)
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
  esac
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

[[ -n "$peak1" ]] && echo "bench: peak (2048^3 sgemm): $(awk -v p="$peak1" 'BEGIN{printf "%.1f", p/1e9}') GFLOP/s on 1 thread, $(awk -v p="$peak2" 'BEGIN{printf "%.1f", p/1e9}') on 2"
printf '%-44s %8s %8s %9s %8s %8s\n' form wall_s user_s accuracy "a/wall" "%peak"
ref_wall=""
for f in $forms; do
  wall=$(for r in $(seq 1 "$rounds"); do awk '{print $1}' "$work/$f.$r.time"; done | median)
  user=$(for r in $(seq 1 "$rounds"); do awk '{print $2}' "$work/$f.$r.time"; done | median)
  acc=$(cat "$work/$f.1.out" | awk '/test_accuracy/ {s += $4; n++} END {printf "%.4f", n ? s / n : 0}')
  [[ $f == a ]] && ref_wall="$wall"
  ratio="-"; [[ -n "$ref_wall" ]] && ratio=$(awk -v a="$ref_wall" -v w="$wall" 'BEGIN{printf "%.2fx", a / w}')
  peak="-"; [[ -n "$peak1" ]] && peak=$(awk -v fl="$flops" -v w="$wall" -v p="$peak1" 'BEGIN{printf "%.1f%%", 100 * fl / w / (2 * p)}')
  printf '%-44s %8.2f %8.2f %9s %8s %8s\n' "$(label "$f")" "$wall" "$user" "$acc" "$ratio" "$peak"
done
echo "a/wall: speed-up against (a), same run; %peak: $flops FLOPs / wall / (2 x the 1-thread sgemm peak = the two cores' peak)"
