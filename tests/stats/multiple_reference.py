#!/usr/bin/python3
"""Reference values for tests/stats/multiple_test.cc: Holm and Benjamini-Hochberg
adjusted p-values on 50 random families.

statsmodels is not installed here (Debian 12's python3-statsmodels is not in
ci/install-deps), so the two procedures are written below from their published
definitions, vectorised with NumPy in the way statsmodels'
`multipletests(method="holm" | "fdr_bh")` computes them:

  Holm (1979):  p~(i) = max_{j<=i} min(1, (m - j + 1) p(j))   (sorted ascending)
  BH (1995):    p~(i) = min_{j>=i} min(1, m p(j) / j)

Nothing is shared with stats/multiple.cc (a loop over a sorted index in C++).
As a cross-check, each family's BH rejections at q = 0.05 are recomputed with
the original step-up rule (largest k with p(k) <= k q / m) and Holm's with the
original step-down rule (stop at the first p(j) > alpha / (m - j + 1)); the
script stops if either disagrees with the adjusted values.

Run:  /usr/bin/python3 tests/stats/multiple_reference.py > tests/stats/data/multiple_reference.json
"""

import json

import numpy as np


def holm(p):
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="mergesort")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adj
    return out


def bh(p):
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="mergesort")
    scaled = np.minimum(1.0, m * p[order] / np.arange(1, m + 1))
    adj = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = adj
    return out


def holm_rejects(p, alpha):
    m = len(p)
    rej = np.zeros(m, dtype=bool)
    for j, i in enumerate(np.argsort(p, kind="mergesort")):
        if p[i] > alpha / (m - j):
            break
        rej[i] = True
    return rej


def bh_rejects(p, q):
    m = len(p)
    order = np.argsort(p, kind="mergesort")
    ok = [k for k in range(m) if p[order[k]] <= (k + 1) * q / m]
    rej = np.zeros(m, dtype=bool)
    if ok:
        rej[order[: max(ok) + 1]] = True
    return rej


def main():
    rng = np.random.default_rng(20261125)
    families = []
    for _ in range(50):
        m = int(rng.integers(2, 31))
        # Mostly nulls (uniform p) with a few real effects (p near 0), and
        # occasional ties, as a commit changing many experiments gives.
        p = rng.uniform(size=m)
        k = int(rng.integers(0, max(1, m // 3) + 1))
        p[:k] = rng.beta(0.3, 20, size=k)
        if m > 3 and rng.uniform() < 0.3:
            p[1] = p[0]
        p = np.round(p, 12)
        h, b = holm(p), bh(p)
        if not np.array_equal(holm_rejects(p, 0.05), h <= 0.05):
            raise SystemExit("holm: adjusted values disagree with the step-down rule")
        if not np.array_equal(bh_rejects(p, 0.05), b <= 0.05):
            raise SystemExit("bh: adjusted values disagree with the step-up rule")
        families.append({"p": p.tolist(), "holm": h.tolist(), "bh": b.tolist()})
    print(json.dumps({"generator": "tests/stats/multiple_reference.py", "families": families},
                     indent=1))


if __name__ == "__main__":
    main()
