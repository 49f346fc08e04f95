#!/usr/bin/python3
"""Tables and curves from bench_sweep's CSVs (bench/run_sweep_bench.sh writes them).

  bench/sweep_report.py bench/results/sweep [--svg docs/images/sweep_regret.svg]

Per objective, noise level and strategy over the sweep seeds: final true regret
of the recommended point (median [IQR]), the claim error (claimed minus true
value of the pick: mean and median), the median of |claim error| / SE and how
many claims are within one standard error of the truth (trainq: the SE it
measured; 1-seed strategies, which measure none: the true SD of one run), trainq's 95% CI coverage, the seeds behind the pick, and
exact paired Wilcoxon signed-rank tests (two-sided, zeros dropped, tied ranks
averaged, the null distribution enumerated over the signs) of trainq and
trainq-adaptive against each baseline on final regret, with Holm's adjustment
over the six tests of one objective and noise level. Where the differences have
no ties the p-value is checked against scipy.stats.wilcoxon(method="exact").
The SVG: the median regret of the recommended point against runs spent.
"""
import csv
import glob
import math
import os
import statistics
import sys
from collections import defaultdict

STRATEGIES = ["random", "gp-naive", "tpe", "trainq-noconfirm", "trainq", "trainq-adaptive"]
BASELINES = ["random", "gp-naive", "tpe"]
OBJECTIVES = ["branin", "hartmann6", "digits"]
COLOURS = {"random": "#999999", "gp-naive": "#d62728", "tpe": "#ff7f0e",
           "trainq-noconfirm": "#9ecae1", "trainq": "#1f77b4", "trainq-adaptive": "#2ca02c"}


def quantile(v, q):
    v = sorted(x for x in v if not math.isnan(x))
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def wilcoxon_exact(d):
    """Two-sided exact signed-rank p of paired differences d; returns (p, n nonzero)."""
    nz = [x for x in d if abs(x) > 1e-12]
    n = len(nz)
    if n == 0:
        return 1.0, 0
    order = sorted(range(n), key=lambda i: abs(nz[i]))
    rank2 = [0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(abs(nz[order[j + 1]]) - abs(nz[order[i]])) <= 1e-12:
            j += 1
        for k in range(i, j + 1):
            rank2[order[k]] = (i + 1) + (j + 1)
        i = j + 1
    total = sum(rank2)
    w = sum(r for r, x in zip(rank2, nz) if x > 0)
    count = [0] * (total + 1)
    count[0] = 1
    for r in rank2:
        for s in range(total, r - 1, -1):
            count[s] += count[s - r]
    lo = sum(count[: w + 1])
    hi = sum(count[w:])
    return min(1.0, 2 * min(lo, hi) / 2 ** n), n


def has_ties(d):
    a = sorted(abs(x) for x in d if abs(x) > 1e-12)
    return any(abs(a[i + 1] - a[i]) <= 1e-12 for i in range(len(a) - 1))


def holm(ps):
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [0.0] * len(ps)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def g(x):
    return f"{x:.3g}"


def load(folder):
    sweeps = defaultdict(dict)   # (objective, noise, strategy) -> seed -> row
    curves = defaultdict(lambda: defaultdict(list))  # (objective, noise, strategy) -> runs -> regrets
    for path in sorted(glob.glob(os.path.join(folder, "sweeps_*.csv"))):
        for r in csv.DictReader(open(path)):
            key = (r["objective"], float(r["noise"]), r["strategy"])
            seed = int(r["sweep_seed"])
            if seed in sweeps[key]:
                sys.exit(f"{path}: sweep seed {seed} of {key} twice")
            sweeps[key][seed] = {k: (float(v) if k not in ("objective", "strategy") else v)
                                 for k, v in r.items()}
    for path in sorted(glob.glob(os.path.join(folder, "curves_*.csv"))):
        for r in csv.DictReader(open(path)):
            key = (r["objective"], float(r["noise"]), r["strategy"])
            curves[key][int(r["runs"])].append(float(r["regret"]))
    return sweeps, curves


def tables(sweeps):
    try:
        from scipy.stats import wilcoxon as scipy_wilcoxon
    except ImportError:
        scipy_wilcoxon = None
    checked = 0
    for obj in OBJECTIVES:
        noises = sorted({k[1] for k in sweeps if k[0] == obj})
        if not noises:
            continue
        print(f"\n### {obj}\n")
        print("| noise | strategy | final regret: median [IQR] | claim error: mean (median) | "
              "median abs error / SE | within 1 SE | 95% CI covers | pick seeds | trainq - this: median diff, p (Holm) | "
              "adaptive - this: median diff, p (Holm) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for noise in noises:
            rows = {s: sweeps.get((obj, noise, s), {}) for s in STRATEGIES}
            seeds = sorted(rows["trainq"])
            for s in STRATEGIES:
                if sorted(rows[s]) != seeds:
                    sys.exit(f"{obj} {noise} {s}: sweep seeds differ from trainq's")
            tests = {}
            for a in ("trainq", "trainq-adaptive"):
                for b in BASELINES:
                    d = [rows[a][i]["final_regret"] - rows[b][i]["final_regret"] for i in seeds]
                    p, n = wilcoxon_exact(d)
                    if scipy_wilcoxon and n >= 1 and n == len(d) and not has_ties(d):
                        sp = scipy_wilcoxon(d, zero_method="wilcox", method="exact").pvalue
                        if abs(sp - p) > 1e-9:
                            sys.exit(f"wilcoxon mismatch {obj} {noise} {a} {b}: {p} vs scipy {sp}")
                        checked += 1
                    tests[(a, b)] = [statistics.median(d), p, n]
            adj = holm([t[1] for t in tests.values()])
            for t, h in zip(tests.values(), adj):
                t.append(h)
            for s in STRATEGIES:
                r = [rows[s][i] for i in seeds]
                reg = [x["final_regret"] for x in r]
                err = [x["claim"] - x["truth"] for x in r]
                within = sum(abs(e) <= x["se"] or abs(e) <= 1e-12 * max(1, abs(x["truth"]))
                             for e, x in zip(err, r))
                ratio = [0.0 if abs(e) <= 1e-12 * max(1, abs(x["truth"])) else
                         (abs(e) / x["se"] if x["se"] > 0 else math.inf) for e, x in zip(err, r)]
                multi = s.startswith("trainq")
                if multi:
                    covers = 0
                    # the 95% CI of the mean: claim +- t(0.975, n-1) se
                    from scipy.stats import t as student
                    for e, x in zip(err, r):
                        n = int(x["pick_seeds"])
                        half = student.ppf(0.975, n - 1) * x["se"]
                        covers += abs(e) <= half or abs(e) <= 1e-12 * max(1, abs(x["truth"]))
                    cov = f"{covers}/{len(r)}"
                else:
                    cov = "-"
                vs = []
                for a in ("trainq", "trainq-adaptive"):
                    if (a, s) in tests:
                        md, p, n, h = tests[(a, s)]
                        vs.append(f"{g(md)}, p={g(p)} ({g(h)})")
                    else:
                        vs.append("")
                print(f"| {g(noise)} | {s} | {g(quantile(reg, .5))} [{g(quantile(reg, .25))}, "
                      f"{g(quantile(reg, .75))}] | {mean_text(err)} | {g(quantile(ratio, .5))} | "
                      f"{within}/{len(r)} | {cov} | "
                      f"{g(quantile([x['pick_seeds'] for x in r], .5))} | {vs[0]} | {vs[1]} |")
    print(f"\n(exact Wilcoxon p checked against scipy on {checked} tie-free comparisons)")


def mean_text(err):
    return f"{statistics.fmean(err):+.3g} ({quantile(err, .5):+.3g})"


def svg(curves, path):
    objs = [o for o in OBJECTIVES if any(k[0] == o for k in curves)]
    pw, ph, ml, mt = 250, 170, 52, 28
    width, height = ml + 3 * (pw + ml) + 10, mt + len(objs) * (ph + mt + 30) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for oi, obj in enumerate(objs):
        noises = sorted({k[1] for k in curves if k[0] == obj})
        # one y range per objective, log scale, floored for zero regret
        vals = [statistics.median(v) for k, c in curves.items() if k[0] == obj
                for v in c.values() if not any(math.isnan(x) for x in v)]
        pos = [v for v in vals if v > 0]
        lo = min(pos) if pos else 1e-3
        hi = max(pos) if pos else 1
        floor = lo / 2
        ylo, yhi = math.log10(floor), math.log10(hi) + 0.1
        for ni, noise in enumerate(noises):
            x0 = ml + ni * (pw + ml)
            y0 = mt + oi * (ph + mt + 30)
            out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
            label = "scale" if obj == "digits" else "σ0"
            out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 6}" text-anchor="middle">'
                       f'{obj}, noise {label} = {g(noise)}</text>')
            maxrun = max(r for k, c in curves.items() if k[0] == obj for r in c)
            for e in range(math.ceil(ylo), math.floor(yhi) + 1):
                y = y0 + ph * (1 - (e - ylo) / (yhi - ylo))
                out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{x0 - 4}" y="{y + 3:.1f}" text-anchor="end">1e{e}</text>')
            out.append(f'<text x="{x0 + pw}" y="{y0 + ph + 12}" text-anchor="end">{maxrun} runs</text>')
            out.append(f'<text x="{x0}" y="{y0 + ph + 12}">0</text>')
            for s in STRATEGIES:
                c = curves.get((obj, noise, s))
                if not c:
                    continue
                pts = []
                for runs in sorted(c):
                    v = [x for x in c[runs] if not math.isnan(x)]
                    if len(v) < len(c[runs]) / 2:
                        continue
                    m = max(statistics.median(v), floor)
                    x = x0 + pw * runs / maxrun
                    y = y0 + ph * (1 - (math.log10(m) - ylo) / (yhi - ylo))
                    pts.append(f"{x:.1f},{y:.1f}")
                out.append(f'<polyline fill="none" stroke="{COLOURS[s]}" stroke-width="1.8" '
                           f'points="{" ".join(pts)}"/>')
    ly = height - 18
    for i, s in enumerate(STRATEGIES):
        x = ml + i * 150
        out.append(f'<line x1="{x}" x2="{x + 20}" y1="{ly}" y2="{ly}" stroke="{COLOURS[s]}" stroke-width="2"/>')
        out.append(f'<text x="{x + 24}" y="{ly + 3}">{s}</text>')
    out.append(f'<text x="{width - 10}" y="{ly + 3}" text-anchor="end">median true regret of the '
               f'recommended point vs runs spent (log; 0 drawn at the floor)</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: sweep_report.py RESULTS_DIR [--svg FILE]")
    sweeps, curves = load(sys.argv[1])
    tables(sweeps)
    if "--svg" in sys.argv:
        svg(curves, sys.argv[sys.argv.index("--svg") + 1])


if __name__ == "__main__":
    main()
