#include "stats/compare.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace trainq::stats {
namespace {

// Student's sleep data (Cushny & Peebles 1905; R's `sleep` data set). R's
// documented example output for it, t.test(extra ~ group, data = sleep):
//   t = -1.8608, df = 17.776, p-value = 0.07939, 95 % CI -3.3654832 0.2054832
// and with paired = TRUE:
//   t = -4.0621, df = 9, p-value = 0.002833, 95 % CI -2.4598858 -0.7001142
// and wilcox.test(extra ~ group, data = sleep): W = 25.5.
// The full-precision values below are from `python3 tests/stats/reference.py`
// (t density integrated numerically, not Boost) and agree with R's to the
// digits R prints.
const std::vector<double> kSleep1 = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
const std::vector<double> kSleep2 = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
// Made-up accuracies of 10 seeds; expected values from reference.py.
const std::vector<double> kAccA = {0.662, 0.671, 0.659, 0.668, 0.675,
                                   0.664, 0.669, 0.657, 0.673, 0.666};
const std::vector<double> kAccB = {0.655, 0.661, 0.650, 0.664, 0.659,
                                   0.652, 0.660, 0.648, 0.667, 0.658};
const std::vector<double> kSeven = {3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.6};

Approx Near(double x, double eps = 1e-9) { return Approx(x).epsilon(eps); }

TEST_CASE("WelchTTest: sleep data agree with R's t.test") {
  auto w = WelchTTest(kSleep1, kSleep2);
  REQUIRE(w);
  CHECK(w->estimate == Near(-1.58, 1e-12));
  CHECK(w->se == Near(0.849091017238762, 1e-12));
  CHECK(w->t == Near(-1.860813467486853, 1e-12));
  CHECK(w->df == Near(17.776473516178488, 1e-12));
  CHECK(w->p == Near(0.07939414018735613));
  CHECK(w->ci95.lo == Near(-3.365483230711722));
  CHECK(w->ci95.hi == Near(0.2054832307117216));
}

TEST_CASE("WelchTTest: accuracies of 10 seeds") {
  auto w = WelchTTest(kAccA, kAccB);
  REQUIRE(w);
  CHECK(w->estimate == Near(0.009, 1e-10));
  CHECK(w->t == Near(3.341747957546317));
  CHECK(w->df == Near(17.98312029900327));
  CHECK(w->p == Near(0.003634250285072138, 1e-8));
  CHECK(w->ci95.lo == Near(0.003341413278819071));
  CHECK(w->ci95.hi == Near(0.014658586721181168));
}

TEST_CASE("WelchTTest: unequal sizes and very unequal spreads") {
  std::vector<double> b;
  for (double x : kAccA) b.push_back(10 * x);
  auto w = WelchTTest(kSeven, b);
  REQUIRE(w);
  // df close to na - 1 = 6, because A's variance dominates.
  CHECK(w->df == Near(6.003840581095144));
  CHECK(w->t == Near(-2.8684191235853937));
  CHECK(w->p == Near(0.028465570277212637, 1e-8));
  CHECK(w->ci95.lo == Near(-5.571466197920483));
  CHECK(w->ci95.hi == Near(-0.4422480877938013));
}

TEST_CASE("WelchTTest: swapping A and B flips the sign only") {
  auto ab = WelchTTest(kSleep1, kSleep2);
  auto ba = WelchTTest(kSleep2, kSleep1);
  REQUIRE(ab);
  REQUIRE(ba);
  CHECK(ba->t == Near(-ab->t, 1e-14));
  CHECK(ba->p == Near(ab->p, 1e-14));
  CHECK(ba->ci95.lo == Near(-ab->ci95.hi, 1e-14));
}

TEST_CASE("WelchTTest: n = 1 on either side gives no test") {
  std::vector<double> one = {0.7};
  CHECK_FALSE(WelchTTest(one, kSleep2).has_value());
  CHECK_FALSE(WelchTTest(kSleep1, one).has_value());
}

TEST_CASE("WelchTTest: both sides constant and equal: t = 0, p = 1, no NaN") {
  std::vector<double> a(4, 0.5), b(6, 0.5);
  auto w = WelchTTest(a, b);
  REQUIRE(w);
  CHECK(w->t == 0);
  CHECK(w->p == 1);
  CHECK(w->df == 8);  // na + nb - 2, the limit chosen in compare.cc
  CHECK(w->ci95.lo == 0);
  CHECK(w->ci95.hi == 0);
}

TEST_CASE("WelchTTest: both sides constant and different: p = 0") {
  std::vector<double> a(3, 0.6), b(3, 0.5);
  auto w = WelchTTest(a, b);
  REQUIRE(w);
  CHECK(std::isinf(w->t));
  CHECK(w->t > 0);
  CHECK(w->p == 0);
  CHECK_FALSE(std::isnan(w->df));
  CHECK(w->ci95.lo == Approx(0.1));
  CHECK(w->ci95.hi == Approx(0.1));
}

TEST_CASE("WelchTTest: one side constant: df is the other side's n - 1") {
  // With va = 0 Welch–Satterthwaite reduces to (vb)^2 / (vb^2 / (nb - 1)).
  std::vector<double> a(5, 0.0);
  auto w = WelchTTest(a, kSleep2);
  REQUIRE(w);
  CHECK(w->df == Near(9, 1e-12));
  CHECK(std::isfinite(w->t));
}

TEST_CASE("PairedTTest: sleep data agree with R's t.test(paired = TRUE)") {
  auto p = PairedTTest(kSleep1, kSleep2);
  REQUIRE(p);
  CHECK(p->estimate == Near(-1.58, 1e-12));
  CHECK(p->t == Near(-4.062127683382037, 1e-12));
  CHECK(p->df == 9);
  CHECK(p->p == Near(0.002832890197390081, 1e-8));
  CHECK(p->ci95.lo == Near(-2.4598857632769766));
  CHECK(p->ci95.hi == Near(-0.7001142367230236));
}

TEST_CASE("PairedTTest: pairing removes the shared seed noise") {
  auto p = PairedTTest(kAccA, kAccB);
  auto w = WelchTTest(kAccA, kAccB);
  REQUIRE(p);
  REQUIRE(w);
  CHECK(p->t == Near(8.62483362749919));
  CHECK(p->p == Near(1.2079178807300472e-05, 1e-7));
  CHECK(p->ci95.lo == Near(0.006639442643824428));
  CHECK(p->ci95.hi == Near(0.011360557356175588));
  CHECK(p->p < w->p);
}

TEST_CASE("PairedTTest: sizes must match and n >= 2") {
  std::vector<double> nine(kSleep2.begin(), kSleep2.end() - 1);
  CHECK_FALSE(PairedTTest(kSleep1, nine).has_value());
  std::vector<double> one = {1.0};
  CHECK_FALSE(PairedTTest(one, one).has_value());
}

TEST_CASE("PairedTTest: a constant shift gives p = 0, a zero shift p = 1") {
  // Values whose differences are all exactly 0.5 in binary, so sd(d) is 0.
  std::vector<double> a = {1.0, 2.0, 3.0}, b = {0.5, 1.5, 2.5};
  auto p = PairedTTest(a, b);
  REQUIRE(p);
  CHECK(p->p == 0);
  CHECK(p->ci95.lo == 0.5);
  auto same = PairedTTest(kAccA, kAccA);
  REQUIRE(same);
  CHECK(same->p == 1);
  CHECK(same->t == 0);
}

TEST_CASE("HedgesG: pooled sd and the small-sample correction") {
  // reference.py "hedges": Cohen's d = -0.8321810813495396, J = 1 - 3/71.
  auto g = HedgesG(kSleep1, kSleep2);
  REQUIRE(g);
  CHECK(*g == Near(-0.7970185004474465, 1e-12));
  auto g2 = HedgesG(kAccA, kAccB);
  REQUIRE(g2);
  CHECK(*g2 == Near(1.4313282833201015, 1e-10));
}

TEST_CASE("HedgesG: edge cases") {
  std::vector<double> one = {1.0};
  CHECK_FALSE(HedgesG(one, kSleep2).has_value());
  std::vector<double> a(3, 2.0), b(3, 2.0), c(3, 1.0);
  CHECK(HedgesG(a, b) == 0.0);
  auto inf = HedgesG(a, c);
  REQUIRE(inf);
  CHECK(std::isinf(*inf));
  CHECK(*inf > 0);
}

TEST_CASE("MannWhitneyU: mid-ranks for ties, as R's wilcox.test W") {
  // Sleep data have ties (e.g. -0.1 in both groups): W = 25.5 in R; the
  // pair count in reference.py gives the same.
  auto mw = MannWhitneyU(kSleep1, kSleep2);
  REQUIRE(mw);
  CHECK(mw->u == 25.5);
  CHECK(mw->p_a_gt_b == Near(0.255, 1e-14));
  auto acc = MannWhitneyU(kAccA, kAccB);
  REQUIRE(acc);
  CHECK(acc->u == 85.0);
  CHECK(acc->p_a_gt_b == Near(0.85, 1e-14));
}

TEST_CASE("MannWhitneyU: complete separation, all ties, n = 1") {
  std::vector<double> low = {1, 2, 3}, high = {4, 5};
  CHECK(MannWhitneyU(high, low)->u == 6);
  CHECK(MannWhitneyU(high, low)->p_a_gt_b == 1);
  CHECK(MannWhitneyU(low, high)->p_a_gt_b == 0);
  std::vector<double> same(4, 0.3);
  CHECK(MannWhitneyU(same, same)->p_a_gt_b == 0.5);
  std::vector<double> one = {2.5};
  CHECK(MannWhitneyU(one, low)->u == 2);
  CHECK_FALSE(MannWhitneyU(std::span<const double>{}, low).has_value());
}

TEST_CASE("TwoSidedP: symmetric and bounded") {
  CHECK(TwoSidedP(0, 5) == 1);
  CHECK(TwoSidedP(2.5, 7) == TwoSidedP(-2.5, 7));
  // t_{0.975, 9} = 2.2621571627981893 (reference.py) has p = 0.05.
  CHECK(TwoSidedP(2.2621571627981893, 9) == Near(0.05, 1e-9));
  // t_{0.975, 1} = 12.706204736174751, the first line of every t table.
  CHECK(TwoSidedP(12.706204736174751, 1) == Near(0.05, 1e-9));
}

TEST_CASE("Compare: fills every field, and paired only when asked") {
  auto c = Compare(kSleep1, kSleep2);
  REQUIRE(c);
  CHECK(c->diff == Near(-1.58, 1e-12));
  CHECK(c->a.n == 10);
  CHECK(c->b.mean == Near(2.33, 1e-12));
  CHECK(c->welch);
  CHECK_FALSE(c->paired);
  CHECK(c->hedges_g);
  CHECK(c->mann_whitney);
  REQUIRE(c->bootstrap_ci95);
  CHECK(c->bootstrap_ci95->contains(c->diff));
  auto p = Compare(kSleep1, kSleep2, {.paired = true});
  REQUIRE(p);
  REQUIRE(p->paired);
  CHECK(p->paired->df == 9);
}

TEST_CASE("Compare: the bootstrap follows the pairing") {
  // Golden intervals from reference.py's bootstrap_mean on the per-seed
  // differences (10,000 resamples, seed 1): pairing resamples seeds.
  auto paired = Compare(kAccA, kAccB, {.paired = true});
  REQUIRE(paired);
  REQUIRE(paired->bootstrap_ci95);
  CHECK(paired->bootstrap_ci95->lo == Approx(0.0072).epsilon(1e-12));
  CHECK(paired->bootstrap_ci95->hi == Approx(0.011).epsilon(1e-12));
  auto sleep = Compare(kSleep1, kSleep2, {.paired = true});
  REQUIRE(sleep);
  REQUIRE(sleep->bootstrap_ci95);
  CHECK(sleep->bootstrap_ci95->lo == Approx(-2.37).epsilon(1e-12));
  CHECK(sleep->bootstrap_ci95->hi == Approx(-0.96).epsilon(1e-12));
  // Unpaired: reference.py's bootstrap_diff, [0.0040, 0.0139].
  auto unpaired = Compare(kAccA, kAccB);
  REQUIRE(unpaired);
  REQUIRE(unpaired->bootstrap_ci95);
  CHECK(unpaired->bootstrap_ci95->lo == Approx(0.004).epsilon(1e-12));
  CHECK(unpaired->bootstrap_ci95->hi == Approx(0.0139).epsilon(1e-12));
}

TEST_CASE("Compare: errors for an empty side and unequal paired sizes") {
  auto empty = Compare(std::span<const double>{}, kSleep2);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().kind == ErrorKind::kInvalidArgument);
  std::vector<double> nine(kSleep2.begin(), kSleep2.end() - 1);
  auto unequal = Compare(kSleep1, nine, {.paired = true});
  REQUIRE_FALSE(unequal);
  CHECK(unequal.error().message.find("10 and 9") != std::string::npos);
  CHECK(Compare(kSleep1, nine));  // unpaired is fine
}

TEST_CASE("Compare: n = 1 against n = 1 still gives U and the difference") {
  std::vector<double> a = {0.7}, b = {0.6};
  auto c = Compare(a, b);
  REQUIRE(c);
  CHECK(c->diff == Approx(0.1));
  CHECK_FALSE(c->welch);
  CHECK_FALSE(c->hedges_g);
  CHECK_FALSE(c->bootstrap_ci95);
  REQUIRE(c->mann_whitney);
  CHECK(c->mann_whitney->p_a_gt_b == 1);
}

}  // namespace
}  // namespace trainq::stats

TEST_CASE("BrownForsytheTest equals SciPy's levene(center='median')", "[compare]") {
  // scipy.stats.levene(a, b, center="median"), SciPy 1.10.1.
  using trainq::stats::BrownForsytheTest;
  std::vector<double> sleep1 = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
  std::vector<double> sleep2 = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
  auto t = BrownForsytheTest(sleep1, sleep2);
  REQUIRE(t);
  CHECK(t->f == Approx(0.2482049608355091).epsilon(1e-10));
  CHECK(t->p == Approx(0.6243742854148879).epsilon(1e-10));
  CHECK(t->df2 == 18);
  std::vector<double> wide = {0.70, 0.60, 0.80, 0.65, 0.75};
  std::vector<double> narrow = {0.701, 0.699, 0.702, 0.698, 0.700, 0.7005};
  t = BrownForsytheTest(wide, narrow);
  REQUIRE(t);
  CHECK(t->f == Approx(12.165854463242606).epsilon(1e-10));
  CHECK(t->p == Approx(0.00685213739229344).epsilon(1e-8));
  std::vector<double> x = {1.7, 0.2, -1.1, 2.5, 0.3, 4.4, -2.0};
  std::vector<double> y = {0.1, 0.3, 0.2, 0.25};
  t = BrownForsytheTest(x, y);
  REQUIRE(t);
  CHECK(t->f == Approx(4.774368053772914).epsilon(1e-10));
  CHECK(t->p == Approx(0.05670750934678912).epsilon(1e-8));
  CHECK_FALSE(BrownForsytheTest(std::vector<double>{1}, y));
}

namespace trainq::stats {
namespace {

TEST_CASE("ProbabilityOfImprovement: share of seeds paired, Mann-Whitney unpaired, bootstrap interval") {
  std::vector<double> b = {0.60, 0.70, 0.65, 0.62, 0.68};
  std::vector<double> up = {0.61, 0.71, 0.66, 0.63, 0.69};
  auto all = ProbabilityOfImprovement(up, b, true);
  REQUIRE(all);
  CHECK(all->paired);
  CHECK(all->estimate == 1.0);
  REQUIRE(all->interval);
  CHECK(all->interval->lo == 1.0);  // every resample of the pairs wins every seed
  // Three wins, one tie, one loss: (3 + 0.5) / 5.
  std::vector<double> mixed = {0.61, 0.71, 0.65, 0.61, 0.69};
  auto m = ProbabilityOfImprovement(mixed, b, true);
  CHECK(m->estimate == Approx(0.7));
  CHECK(m->interval->lo < 0.7);
  CHECK(m->interval->hi > 0.7);
  CHECK(m->interval->hi <= 1.0);
  // Unpaired: U / (na nb) with ties half, as MannWhitneyU.
  std::vector<double> x = {1, 2, 3}, y = {2};
  auto u = ProbabilityOfImprovement(x, y, false);
  CHECK(u->estimate == Approx(0.5));
  CHECK_FALSE(u->interval);  // one value on a side: nothing to resample
  CHECK(ProbabilityOfImprovement(x, y, false)->estimate ==
        Approx(MannWhitneyU(x, y)->p_a_gt_b));
  // Paired needs equal sizes.
  CHECK_FALSE(ProbabilityOfImprovement(x, y, true));
  // Seeded: the same interval twice.
  CHECK(ProbabilityOfImprovement(mixed, b, true)->interval == m->interval);
}

}  // namespace
}  // namespace trainq::stats
