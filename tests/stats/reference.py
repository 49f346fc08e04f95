#!/usr/bin/env python3
"""Independent reference values for tests/stats/*_test.cc.

Standard library only. Nothing here shares code or method with stats/: the
Student t and noncentral t probabilities are computed by numerically
integrating their textbook densities (composite Simpson rule), where stats/
calls Boost.Math's incomplete beta functions. Quantiles come from bisection on
those integrals. Descriptive statistics come from Python's `statistics`.

Run:  python3 tests/stats/reference.py
Each section prints the values that the test of the same name pins.
"""

import math
import statistics

# ---------------------------------------------------------------- t distribution


def simpson(f, a, b, n=20000):
    if n % 2:
        n += 1
    h = (b - a) / n
    s = f(a) + f(b)
    for i in range(1, n):
        s += (4 if i % 2 else 2) * f(a + i * h)
    return s * h / 3


def t_pdf(x, df):
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return c * (1 + x * x / df) ** (-(df + 1) / 2)


def t_two_sided_p(t, df):
    # P(|T| > |t|) = 1 - 2 * integral_0^|t| pdf
    return 1 - 2 * simpson(lambda x: t_pdf(x, df), 0, abs(t))


def t_quantile(p, df):
    # upper quantile: P(T <= q) = p, for p > 0.5, by bisection on the integral
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        cdf = 0.5 + simpson(lambda x: t_pdf(x, df), 0, mid, 4000)
        lo, hi = (mid, hi) if cdf < p else (lo, mid)
    return (lo + hi) / 2


def normal_cdf(x):
    return statistics.NormalDist().cdf(x)


def power_two_sample(n, d, alpha=0.05):
    """Power of the two-sided two-sample t-test, n per side, effect d (sd 1).

    T' = (Z + ncp) / sqrt(V / nu), V ~ chi2(nu): integrate
    P(reject | V = v) over the chi-square density of V.
    """
    nu = 2 * n - 2
    ncp = d / math.sqrt(2 / n)
    c = t_quantile(1 - alpha / 2, nu)
    log_norm = (nu / 2) * math.log(2) + math.lgamma(nu / 2)

    def integrand(v):
        if v <= 0:
            dens = 0.5 if nu == 2 else 0.0
        else:
            dens = math.exp((nu / 2 - 1) * math.log(v) - v / 2 - log_norm)
        s = math.sqrt(v / nu)
        return dens * (1 - normal_cdf(c * s - ncp) + normal_cdf(-c * s - ncp))

    upper = nu + 40 * math.sqrt(2 * nu) + 100
    return simpson(integrand, 0, upper, 40000)


# ---------------------------------------------------------------- data sets

# Student's sleep data (Cushny & Peebles 1905, as in Student 1908 and R's `sleep`).
SLEEP1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]

# Made-up accuracies of 10 seeds (the same seeds on both sides).
ACC_A = [0.662, 0.671, 0.659, 0.668, 0.675, 0.664, 0.669, 0.657, 0.673, 0.666]
ACC_B = [0.655, 0.661, 0.650, 0.664, 0.659, 0.652, 0.660, 0.648, 0.667, 0.658]

# Seven values with a tie and an outlier, for quantiles and the IQM.
SEVEN = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.6]


def summary(x):
    n = len(x)
    m = statistics.fmean(x)
    sd = statistics.stdev(x)
    se = sd / math.sqrt(n)
    q = t_quantile(0.975, n - 1)
    q1, med, q3 = statistics.quantiles(x, n=4, method="inclusive")
    cut = n // 4
    mid = sorted(x)[cut:n - cut]
    iqm = statistics.fmean(mid)
    print(f"  n={n} mean={m!r} sd={sd!r} se={se!r}")
    print(f"  ci95=[{m - q * se!r}, {m + q * se!r}]  (t quantile {q!r})")
    print(f"  median={statistics.median(x)!r} (quantiles: {med!r}) q1={q1!r} q3={q3!r}")
    print(f"  iqr={q3 - q1!r} iqm={iqm!r} min={min(x)!r} max={max(x)!r}")


def welch(a, b):
    na, nb = len(a), len(b)
    va, vb = statistics.variance(a) / na, statistics.variance(b) / nb
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    t = diff / se
    q = t_quantile(0.975, df)
    print(f"  diff={diff!r} se={se!r} t={t!r} df={df!r}")
    print(f"  p={t_two_sided_p(t, df)!r} ci95=[{diff - q * se!r}, {diff + q * se!r}]")


def paired(a, b):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    m = statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(n)
    t = m / se
    q = t_quantile(0.975, n - 1)
    print(f"  mean diff={m!r} t={t!r} df={n - 1}")
    print(f"  p={t_two_sided_p(t, n - 1)!r} ci95=[{m - q * se!r}, {m + q * se!r}]")


def hedges(a, b):
    na, nb = len(a), len(b)
    sp = math.sqrt(((na - 1) * statistics.variance(a) + (nb - 1) * statistics.variance(b))
                   / (na + nb - 2))
    d = (statistics.fmean(a) - statistics.fmean(b)) / sp
    j = 1 - 3 / (4 * (na + nb) - 9)
    print(f"  cohen_d={d!r} hedges_g={d * j!r}")


def mann_whitney(a, b):
    # Direct pair count, not ranks: a different route to the same U.
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)
    print(f"  u={u!r} p_a_gt_b={u / (len(a) * len(b))!r}")


# ---------------------------------------------------------------- PRNG


MASK = (1 << 64) - 1


def splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256ss:
    """xoshiro256** 1.0, transcribed from Blackman & Vigna's reference C."""

    def __init__(self, seed):
        sm = splitmix64(seed)
        self.s = [next(sm) for _ in range(4)]

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, bound):
        threshold = (1 << 64) % bound
        while True:
            r = self.next()
            if r >= threshold:
                return r % bound


def type7(sorted_x, p):
    h = (len(sorted_x) - 1) * p
    lo = math.floor(h)
    if lo + 1 >= len(sorted_x):
        return sorted_x[-1]
    return sorted_x[lo] + (h - lo) * (sorted_x[lo + 1] - sorted_x[lo])


def resampled_mean(x, rng):
    s = 0.0
    for _ in range(len(x)):
        s += x[rng.below(len(x))]
    return s / len(x)


def bootstrap_mean(x, resamples, seed, level=0.95):
    rng = Xoshiro256ss(seed)
    means = sorted(resampled_mean(x, rng) for _ in range(resamples))
    tail = (1 - level) / 2
    return type7(means, tail), type7(means, 1 - tail)


def bootstrap_diff(a, b, resamples, seed, level=0.95):
    rng = Xoshiro256ss(seed)
    diffs = []
    for _ in range(resamples):
        ma = resampled_mean(a, rng)
        mb = resampled_mean(b, rng)
        diffs.append(ma - mb)
    diffs.sort()
    tail = (1 - level) / 2
    return type7(diffs, tail), type7(diffs, 1 - tail)


# ---------------------------------------------------------------- sample size


def runs_for_half_width(sd, h, level=0.95):
    n = 2
    while t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n) > h:
        n += 1
    return n


def main():
    print("summary SLEEP1"); summary(SLEEP1)
    print("summary ACC_A"); summary(ACC_A)
    print("summary SEVEN"); summary(SEVEN)
    print("welch SLEEP1 - SLEEP2"); welch(SLEEP1, SLEEP2)
    print("welch ACC_A - ACC_B"); welch(ACC_A, ACC_B)
    print("welch unequal sizes SEVEN - ACC_A*10"); welch(SEVEN, [10 * x for x in ACC_A])
    print("paired SLEEP1 - SLEEP2"); paired(SLEEP1, SLEEP2)
    print("paired ACC_A - ACC_B"); paired(ACC_A, ACC_B)
    print("hedges SLEEP1, SLEEP2"); hedges(SLEEP1, SLEEP2)
    print("hedges ACC_A, ACC_B"); hedges(ACC_A, ACC_B)
    print("mann_whitney SLEEP1, SLEEP2"); mann_whitney(SLEEP1, SLEEP2)
    print("mann_whitney ACC_A, ACC_B"); mann_whitney(ACC_A, ACC_B)
    print("t quantiles 0.975: df=1,9,16,17,17.776")
    for df in (1, 9, 16, 17, 17.776):
        print(f"  {df}: {t_quantile(0.975, df)!r}")
    print("splitmix64 seed 1234567, first 5")
    sm = splitmix64(1234567)
    print("  " + ", ".join(str(next(sm)) for _ in range(5)))
    print("xoshiro256** seeded by splitmix64(42), first 3; below(10) x 10 after reseed")
    r = Xoshiro256ss(42)
    print("  " + ", ".join(str(r.next()) for _ in range(3)))
    r = Xoshiro256ss(42)
    print("  " + ", ".join(str(r.below(10)) for _ in range(10)))
    print("bootstrap mean ACC_A, 10000 resamples, seed 1:", bootstrap_mean(ACC_A, 10000, 1))
    print("bootstrap mean SLEEP1, 2000 resamples, seed 7:", bootstrap_mean(SLEEP1, 2000, 7))
    print("bootstrap diff ACC_A - ACC_B, 10000 resamples, seed 1:",
          bootstrap_diff(ACC_A, ACC_B, 10000, 1))
    print("runs for half-width: sd=1 h=0.5 ->", runs_for_half_width(1, 0.5))
    print("runs for half-width: sd=0.01 h=0.005 ->", runs_for_half_width(0.01, 0.005))
    print("runs for half-width: sd=2 h=1 level=0.99 ->", runs_for_half_width(2, 1, 0.99))
    print("power, d=1: n=16, 17 ->", power_two_sample(16, 1.0), power_two_sample(17, 1.0))
    print("power, d=0.5: n=63, 64 ->", power_two_sample(63, 0.5), power_two_sample(64, 0.5))
    print("power, d=0.8: n=25, 26 ->", power_two_sample(25, 0.8), power_two_sample(26, 0.8))


if __name__ == "__main__":
    main()
