#!/usr/bin/env bash
# Issue 40's case through the real binary: 100 experiments changed by one
# commit, `correction: none`, `repeats: {min: 4, max: 24, step: 4, until:
# decided}`, `min_effect: 0.003`. Each run's metric is a known function of
# experiment, seed and commit: a seed effect shared by both commits (sd 0.02)
# and fresh noise per commit (sd 0.004); 50 experiments do not change, 25
# move by +0.006 and 25 by -0.006. `trainq submit` at the parent, `serve
# --until-idle`, then the same at the head; prints the verdict counts, the
# runs spent and runs per decided verdict (bench/README.md, Verdicts).
#
# Usage: bench/replay_issue40.sh [BUILD_DIR] [DESIGN]   (DESIGN: spending | bonferroni)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
design=${2:-spending}
trainq="$build/agent/trainq"
work=$(mktemp -d /tmp/replay40.XXXXXX)
repo="$work/repo"
mkdir -p "$repo/cfg"
export TRAINQ_DB="$work/trainq.db"

cat >"$repo/metric.py" <<'EOF'
# The metric of experiment NAME at seed SEED: 0.9 + shift + u(name, seed)
# + e(name, seed, cfg), u ~ N(0, 0.02) shared by every commit, e ~ N(0,
# 0.004) fresh whenever cfg/NAME.txt changes. Written as trainq reads it.
import hashlib, json, os, random, sys
name, seed = sys.argv[1], int(sys.argv[2])
cfg = open(f"cfg/{name}.txt").read()
shift = float(cfg.split()[0])
def rng(*key):
    return random.Random(int(hashlib.sha256(repr(key).encode()).hexdigest()[:16], 16))
value = 0.9 + shift + rng("seed", name, seed).gauss(0, 0.02) + rng("noise", name, seed, cfg).gauss(0, 0.004)
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": value, "step": 0, "final": True}) + "\n")
EOF

{
  echo "version: 1"
  echo "defaults:"
  echo "  correction: none"
  echo "  repeats: {min: 4, max: 24, step: 4, until: decided, design: $design}"
  echo "  seed: 1"
  echo "  metric: {name: accuracy, goal: max, min_effect: 0.003}"
  echo "experiments:"
  for i in $(seq -w 0 99); do
    echo "  e$i:"
    echo "    command: python3 metric.py e$i {seed}"
    echo "    watch: [cfg/e$i.txt]"
  done
} >"$repo/trainq.yaml"
for i in $(seq -w 0 99); do echo "0 v1" >"$repo/cfg/e$i.txt"; done
git -C "$repo" init -q
git -C "$repo" add -A
git -C "$repo" -c user.name=bench -c user.email=bench@example.com commit -qm parent

submit_and_serve() {
  "$trainq" submit --repo "$repo" --max-experiments 100 --max-runs 10000 >"$work/submit-$1.log"
  "$trainq" serve --machines 1 --slots "${SLOTS:-16}" --until-idle 2>"$work/serve-$1.log"
}
submit_and_serve parent

# The head: 50 unchanged in effect (a new noise draw), 25 up, 25 down.
for i in $(seq 0 99); do
  n=$(printf %02d "$i")
  if [ "$i" -lt 50 ]; then shift=0; elif [ "$i" -lt 75 ]; then shift=0.006; else shift=-0.006; fi
  echo "$shift v2" >"$repo/cfg/e$n.txt"
done
git -C "$repo" -c user.name=bench -c user.email=bench@example.com commit -qam head
submit_and_serve head

"$trainq" compare HEAD HEAD~1 --repo "$repo" --correction none --json >"$work/compare.json"
python3 - "$work/compare.json" "$TRAINQ_DB" <<'EOF'
import json, sqlite3, sys
doc = json.load(open(sys.argv[1]))
items = doc if isinstance(doc, list) else doc.get("comparisons", doc.get("experiments", []))
tally = {}
decided = false_nulls = decided_effects = 0
for c in items:
    k = int(c["experiment"][1:])
    truth = "null" if k < 50 else ("up" if k < 75 else "down")
    v = c.get("verdict_name", c["verdict"])
    tally[(truth, v)] = tally.get((truth, v), 0) + 1
    if c.get("decided"):
        decided += 1
        if truth != "null":
            decided_effects += 1
    if truth == "null" and v in ("better", "worse"):
        false_nulls += 1
runs = sqlite3.connect(sys.argv[2]).execute("SELECT count(*) FROM runs").fetchone()[0]
for key in sorted(tally):
    print(f"{key[0]:5} {key[1]:22} {tally[key]}")
print(f"decided {decided} of {len(items)} ({decided_effects} of 50 real effects); "
      f"false better/worse on {false_nulls} of 50 nulls; {runs} runs; "
      f"{runs / decided if decided else float('inf'):.1f} runs per decided verdict")
EOF
echo "(work in $work)"
