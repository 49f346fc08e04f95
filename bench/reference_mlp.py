#!/usr/bin/env python3
"""The Python reference for bench/bench_trainer.sh: the digits MLP of
bench/digits_mlp_bench.yaml trained with a plain PyTorch loop, one seed per
process.

64 -> 256 -> 128 -> 10 with ReLU, cross entropy, Adam (lr 1e-3), batch 64,
30 epochs, shuffled every epoch; the first 1437 rows of
examples/data/digits.csv.gz train, the last 360 test; features standardised
with the training rows' mean and (population) sd, a constant column centred
and left unscaled - as trainq-train does.

Needs Debian's python3-torch (apt-get install python3-torch); one thread, like
trainq-train's default.

usage: reference_mlp.py SEED [DATA]   (prints "seed S test_accuracy A")
"""
import gzip
import os
import sys

import torch


def load(path):
    with gzip.open(path, "rt") as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    data = torch.tensor(rows, dtype=torch.float32)
    return data[:, :-1], data[:, -1].long()


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "examples", "data", "digits.csv.gz")
    torch.set_num_threads(1)
    torch.manual_seed(seed)

    x, y = load(path)
    x_train, y_train, x_test, y_test = x[:1437], y[:1437], x[-360:], y[-360:]
    mean = x_train.double().mean(0)
    sd = x_train.double().var(0, unbiased=False).sqrt()
    scale = torch.where(sd > 1e-12, 1.0 / sd, torch.ones_like(sd))
    x_train = ((x_train.double() - mean) * scale).float()
    x_test = ((x_test.double() - mean) * scale).float()

    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    n, bs = x_train.shape[0], 64
    for _ in range(30):
        perm = torch.randperm(n)
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            opt.zero_grad()
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"seed {seed} test_accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
