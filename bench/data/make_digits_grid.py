#!/usr/bin/env python3
"""Tabulates the digits-MLP grid that bench_sweep replays (digits_grid.csv).

Every grid point of examples/configs/digits_mlp.yaml with trainer.epochs=10 and
  optimizer.lr        in 1e-4 3e-4 1e-3 3e-3 1e-2 3e-2
  model.layers.0.out  in 16 32 64 128 256
  trainer.batch_size  in 16 64 256
is trained once with `trainq-train --seed 1 --repeats 10` (seeds 1..10 fused,
each replica bit-for-bit its single run up to float tolerance) and every
seed's final test accuracy becomes one row: lr,width,batch_size,seed,accuracy.
One process at a time; run under the shared build lock on a shared machine:
  flock /tmp/trainq-build.lock bench/data/make_digits_grid.py TRAINQ_TRAIN > bench/data/digits_grid.csv
"""
import itertools
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "..", "examples", "configs", "digits_mlp.yaml")
LRS = ["0.0001", "0.0003", "0.001", "0.003", "0.01", "0.03"]
WIDTHS = [16, 32, 64, 128, 256]
BATCHES = [16, 64, 256]
SEEDS = 10


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_digits_grid.py PATH/TO/trainq-train > digits_grid.csv")
    train = sys.argv[1]
    print("lr,width,batch_size,seed,accuracy")
    for lr, width, bs in itertools.product(LRS, WIDTHS, BATCHES):
        cmd = [train, SPEC, "--seed", "1", "--repeats", str(SEEDS), "--device", "cpu",
               "--set", "trainer.epochs=10", "--set", f"optimizer.lr={lr}",
               "--set", f"model.layers.0.out={width}", "--set", f"trainer.batch_size={bs}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        acc = {int(m.group(1)): m.group(2)
               for m in re.finditer(r"^seed (\d+) test_accuracy ([0-9.]+)", out, re.M)}
        if sorted(acc) != list(range(1, SEEDS + 1)):
            sys.exit(f"missing seeds for lr={lr} width={width} bs={bs}:\n{out}")
        for s in range(1, SEEDS + 1):
            print(f"{lr},{width},{bs},{s},{acc[s]}", flush=True)
        print(f"lr={lr} width={width} bs={bs} done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
