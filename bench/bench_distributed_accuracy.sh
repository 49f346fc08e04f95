#!/usr/bin/env bash
# Accuracy of the distributed modes against one process, over SEEDS seeds
# (default 10): the digits MLP of bench/digits_mlp_bench.yaml, 30 epochs,
# W=2 ranks per run. For each mode: mean ± sd of the final test accuracy,
# and whether the mean lies within two standard deviations of the
# one-process mean. Partially asynchronous runs are not bit-reproducible
# (merge order), so the script also runs seed 1 of that mode REPEAT times
# (default 5) and prints the spread. Run by hand:
#
#   bench/bench_distributed_accuracy.sh [path/to/trainq-train]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/agent/trainq-train}
seeds=${SEEDS:-10}
repeat=${REPEAT:-5}
epochs=${EPOCHS:-30}
spec=bench/digits_mlp_bench.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

acc() {  # final test accuracy of one seed's metrics file
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get("final") and j["name"] == "accuracy": print(j["value"])' "$1"
}

# One process: the seeds fused (the same metrics as single runs, tested).
"$bin" "$spec" -q --seed 1 --repeats "$seeds" --set "trainer.epochs=$epochs" \
  --metrics-file "$work/base-{seed}.jsonl" >/dev/null
for ((s = 1; s <= seeds; ++s)); do echo "one process	$(acc "$work/base-$s.jsonl")"; done >"$work/acc"

modes=(
  "gradients|{workers: 2}"
  "weights every epoch|{workers: 2, every_n_epochs: 1}"
  "weights every 5 epochs|{workers: 2, every_n_epochs: 5}"
  "partially_asynchronous|{workers: 2, mode: partially_asynchronous}"
  "asynchronous every 5 epochs|{workers: 2, mode: asynchronous, every_n_epochs: 5}"
  "asynchronous, only at the end|{workers: 2, mode: asynchronous}"
)
for entry in "${modes[@]}"; do
  for ((s = 1; s <= seeds; ++s)); do
    rm -f "$work/m.jsonl"  # trainq-train appends
    "$bin" "$spec" -q --seed "$s" --set "trainer.epochs=$epochs" --set "distributed=${entry#*|}" \
      --metrics-file "$work/m.jsonl" >/dev/null 2>&1
    echo "${entry%%|*}	$(acc "$work/m.jsonl")" >>"$work/acc"
  done
done
for ((i = 1; i <= repeat; ++i)); do
  rm -f "$work/m.jsonl"
  "$bin" "$spec" -q --seed 1 --set "trainer.epochs=$epochs" \
    --set "distributed={workers: 2, mode: partially_asynchronous}" --metrics-file "$work/m.jsonl" >/dev/null 2>&1
  echo "partially_asynchronous seed 1 again	$(acc "$work/m.jsonl")" >>"$work/acc"
done

python3 - "$work/acc" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    name, v = line.rstrip("\n").split("\t")
    if name not in rows: order.append(name); rows[name] = []
    rows[name].append(float(v))
base = rows["one process"]
bm, bs = statistics.mean(base), statistics.stdev(base)
print("| mode (W=2) | n | mean test acc. | sd | min–max | mean − one-process mean | within 2 sd? |")
print("|---|---|---|---|---|---|---|")
for name in order:
    v = rows[name]
    m, s = statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0
    ok = "—" if name == "one process" else ("yes" if abs(m - bm) <= 2 * bs else "**no**")
    print(f"| {name} | {len(v)} | {m:.4f} | {s:.4f} | {min(v):.4f}–{max(v):.4f} | {m - bm:+.4f} | {ok} |")
print(f"\ntwo sd of the one-process runs: {2 * bs:.4f}")
PY
