#!/usr/bin/python3
"""Reference values for the power cases of tests/stats/sample_size_test.cc.

The smallest n whose exact power reaches the target, for a two-sided t-test:
  two-sample: n runs per side, df = 2n - 2, ncp = d / (sd sqrt(2 / n))
  paired:     n pairs,         df = n - 1,  ncp = d / (sd / sqrt(n))
  power = P(T' > t_{1-alpha/2, df}) + P(T' < -t_{1-alpha/2, df}), T' ~ nct(df, ncp)
computed with SciPy's scipy.stats.nct and scipy.stats.t by trying n = 2, 3,
... in order (stats/sample_size.cc doubles and bisects). Note that SciPy 1.10's
nct is itself a wrapper of Boost.Math's non_central_t, as stats/ uses: what
this checks independently is the power formula, the degrees of freedom, the
noncentrality and the search; tests/stats/reference.py integrates the
noncentral t density numerically for an independent check of the distribution.
SciPy warns about intermediate values at df <= 2; the probabilities it returns
there are finite and checked to be.

Run:  /usr/bin/python3 tests/stats/power_reference.py > tests/stats/data/power_reference.json
"""

import json
import math
import warnings

from scipy import stats

warnings.filterwarnings("ignore", category=RuntimeWarning)


def power(design, n, sd, d, alpha):
    if design == "two-sample":
        df, ncp = 2 * n - 2, abs(d) / (sd * (2 / n) ** 0.5)
    else:
        df, ncp = n - 1, abs(d) / (sd / n ** 0.5)
    crit = stats.t.ppf(1 - alpha / 2, df)
    p = float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))
    if not math.isfinite(p):
        raise SystemExit(f"{design} n={n}: SciPy gave a non-finite power")
    return p


def smallest_n(design, sd, d, target, alpha):
    n = 2
    while power(design, n, sd, d, alpha) < target:
        n += 1
    return n


def main():
    cases = []
    # sd, effect: the digits-MLP accuracy sd of research/statistics-next.md
    # (0.0034) and a spread of others; alpha and power around the usual ones.
    grid = [
        (0.0034, 0.005, 0.05, 0.8),
        (0.0034, 0.005, 0.01, 0.8),
        (0.0034, 0.005, 0.05, 0.9),
        (0.0034, 0.002, 0.05, 0.8),
        (1.0, 1.0, 0.05, 0.8),
        (1.0, 0.5, 0.05, 0.8),
        (1.0, 0.2, 0.05, 0.8),
        (1.0, 0.5, 0.01, 0.9),
        (1.0, 2.0, 0.05, 0.8),
        (1.0, 3.0, 0.05, 0.95),
        (0.02, -0.01, 0.05, 0.8),
        (0.02, 0.01, 0.0025, 0.8),
        (0.5, 0.1, 0.10, 0.7),
        (0.5, 0.25, 0.001, 0.99),
    ]
    for design in ("two-sample", "paired"):
        for sd, d, alpha, target in grid:
            n = smallest_n(design, sd, d, target, alpha)
            cases.append({"design": design, "sd": sd, "effect": d, "alpha": alpha,
                          "power": target, "n": n,
                          "power_at_n": power(design, n, sd, d, alpha),
                          "power_at_n_minus_1": power(design, n - 1, sd, d, alpha) if n > 2 else None})
    print(json.dumps({"generator": "tests/stats/power_reference.py", "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
