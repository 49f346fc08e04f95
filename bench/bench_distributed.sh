#!/usr/bin/env bash
# Data-parallel trainq-train on one machine (docs/TRAINER.md, "Distributed"):
# the digits MLP of bench/digits_mlp_bench.yaml, for each distributed mode,
# in three forms: W=1 (one thread), W=1 with --threads 2, and W=2 (two ranks,
# rendezvous auto, one thread each). Per form: seconds per epoch (trainq-train's
# "training" time / epochs), communication seconds and bytes per epoch (rank
# 0's dist_comm_seconds and dist_bytes_sent lines) and the test accuracy.
# Medians of ROUNDS interleaved rounds. Run by hand, not by CI:
#
#   bench/bench_distributed.sh [path/to/trainq-train]     # ROUNDS=3 EPOCHS=30 SEED=1
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/agent/trainq-train}
rounds=${ROUNDS:-3}
epochs=${EPOCHS:-30}
seed=${SEED:-1}
spec=bench/digits_mlp_bench.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name|distributed section (W=2)
modes=(
  "gradients (synchronous)|{workers: 2}"
  "weights every epoch (synchronous, every_n_epochs 1)|{workers: 2, every_n_epochs: 1}"
  "weights every 5 epochs (synchronous, every_n_epochs 5)|{workers: 2, every_n_epochs: 5}"
  "partially_asynchronous|{workers: 2, mode: partially_asynchronous}"
  "asynchronous every 5 epochs|{workers: 2, mode: asynchronous, every_n_epochs: 5}"
  "asynchronous, only at the end|{workers: 2, mode: asynchronous}"
)

# run NAME ARGS...: one training; appends "name train_s comm_s bytes acc" to $work/results.
run() {
  local name=$1; shift
  local m="$work/m.jsonl"
  rm -f "$m"
  local err
  err=$("$bin" "$spec" --seed "$seed" --set "trainer.epochs=$epochs" --metrics-file "$m" "$@" 2>&1 >/dev/null)
  local train_s
  train_s=$(sed -n 's/.*(training \([0-9.]*\)s).*/\1/p' <<<"$err" | tail -1)
  python3 - "$m" "$name" "$train_s" "$epochs" >>"$work/results" <<'PY'
import json, sys
path, name, train_s, epochs = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
comm, sent, acc = [], [], float("nan")
for line in open(path):
    j = json.loads(line)
    if j.get("final") and j["name"] == "accuracy": acc = j["value"]
    elif j["name"] == "dist_comm_seconds": comm.append(j["value"])
    elif j["name"] == "dist_bytes_sent": sent.append(j["value"])
mean = lambda v: sum(v) / len(v) if v else 0.0
print(f"{name}\t{train_s / epochs:.5f}\t{mean(comm):.5f}\t{mean(sent):.0f}\t{acc:.4f}")
PY
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= rounds; ++r)); do
  run "W=1" --threads 1
  run "W=1 --threads 2" --threads 2
  for entry in "${modes[@]}"; do
    run "${entry%%|*}" --threads 1 --set "distributed=${entry#*|}"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
order = []
for line in open(sys.argv[1]):
    name, *vals = line.rstrip("\n").split("\t")
    if name not in rows: order.append(name); rows[name] = []
    rows[name].append([float(v) for v in vals])
med = lambda xs: statistics.median(xs)
print("| form | epoch s | comm s / epoch | bytes sent / epoch (rank 0) | test acc. |")
print("|---|---|---|---|---|")
base = None
for name in order:
    r = rows[name]
    e, c, b, a = (med([x[i] for x in r]) for i in range(4))
    if name == "W=1": base = e
    rel = f" ({e / base:.2f}x W=1)" if base and name != "W=1" else ""
    print(f"| {name} | {e * 1000:.1f} ms{rel} | {c * 1000:.1f} ms | {b:,.0f} | {a:.4f} |")
PY
echo
echo "rounds: $rounds, epochs: $epochs, seed: $seed; load average before: $load_before, after: $load_after; $(nproc) CPUs"
