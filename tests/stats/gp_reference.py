#!/usr/bin/env python3
"""Reference values for tests/stats/gp_test.cc from scikit-learn's
GaussianProcessRegressor (Debian's python3-sklearn), which stats/gp.h follows:
kernel ConstantKernel * Matern(nu=2.5) with one length scale per dimension,
alpha = each point's noise variance, normalize_y=False.

Run:  python3 tests/stats/gp_reference.py   (prints JSON; the test runs it)
"""

import json
import math
import sys

# A fixed, small two-dimensional data set with a noise variance per point.
X = [[0.05, 0.90], [0.20, 0.10], [0.35, 0.55], [0.50, 0.30], [0.65, 0.80],
     [0.80, 0.20], [0.95, 0.60], [0.10, 0.40], [0.60, 0.05], [0.85, 0.95]]
NOISE = [0.010, 0.040, 0.002, 0.020, 0.030, 0.005, 0.015, 0.025, 0.001, 0.050]
Y = [math.sin(3 * a) + math.cos(2 * b) - 0.5 for a, b in X]
XS = [[0.0, 0.0], [0.3, 0.7], [0.5, 0.5], [0.75, 0.4], [1.0, 1.0]]
FIXED = {"amplitude": 1.7, "lengths": [0.4, 0.9]}
BOUNDS = (1e-3, 1e3)


def main():
    try:
        import numpy as np
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern
    except ImportError as e:
        print(json.dumps({"skip": "python3-sklearn is not installed (%s)" % e}))
        return 0
    out = {"x": X, "y": Y, "noise": NOISE, "xs": XS, "fixed_hyper": FIXED, "bounds": BOUNDS}
    k = ConstantKernel(FIXED["amplitude"], "fixed") * Matern(FIXED["lengths"], "fixed", nu=2.5)
    g = GaussianProcessRegressor(kernel=k, alpha=np.array(NOISE), optimizer=None)
    g.fit(np.array(X), np.array(Y))
    m, s = g.predict(np.array(XS), return_std=True)
    out["fixed"] = {"mean": m.tolist(), "std": s.tolist(),
                    "lml": float(g.log_marginal_likelihood_value_)}
    k = ConstantKernel(1.0, BOUNDS) * Matern([0.5, 0.5], BOUNDS, nu=2.5)
    g = GaussianProcessRegressor(kernel=k, alpha=np.array(NOISE), n_restarts_optimizer=10,
                                 random_state=0)
    g.fit(np.array(X), np.array(Y))
    m, s = g.predict(np.array(XS), return_std=True)
    p = g.kernel_.get_params()
    out["fitted"] = {"amplitude": float(p["k1__constant_value"]),
                     "lengths": [float(v) for v in p["k2__length_scale"]],
                     "lml": float(g.log_marginal_likelihood_value_),
                     "mean": m.tolist(), "std": s.tolist()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
