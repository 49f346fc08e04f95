#include "stats/bootstrap.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "stats/summary.h"

namespace trainq::stats {
namespace {

// Golden values come from `python3 tests/stats/reference.py` (section
// "splitmix64 / xoshiro / bootstrap"), a separate transcription of the
// published generators and of this bootstrap, in Python integers and floats.
// If these change, every stored report's intervals change: that is the point.
const std::vector<double> kAccA = {0.662, 0.671, 0.659, 0.668, 0.675,
                                   0.664, 0.669, 0.657, 0.673, 0.666};
const std::vector<double> kAccB = {0.655, 0.661, 0.650, 0.664, 0.659,
                                   0.652, 0.660, 0.648, 0.667, 0.658};
const std::vector<double> kSleep1 = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};

TEST_CASE("SplitMix64 matches the published sequence for seed 1234567") {
  // Also the test vector of Rosetta Code's "Pseudo-random numbers/Splitmix64".
  SplitMix64 sm(1234567);
  CHECK(sm.Next() == 6457827717110365317ULL);
  CHECK(sm.Next() == 3203168211198807973ULL);
  CHECK(sm.Next() == 9817491932198370423ULL);
  CHECK(sm.Next() == 4593380528125082431ULL);
  CHECK(sm.Next() == 16408922859458223821ULL);
}

TEST_CASE("Rng (xoshiro256**) matches the reference transcription") {
  Rng rng(42);
  CHECK(rng.Next() == 1546998764402558742ULL);
  CHECK(rng.Next() == 6990951692964543102ULL);
  CHECK(rng.Next() == 12544586762248559009ULL);
  Rng again(42);
  std::vector<std::uint64_t> draws;
  for (int i = 0; i < 10; ++i) draws.push_back(again.Below(10));
  CHECK(draws == std::vector<std::uint64_t>{2, 2, 9, 3, 6, 4, 4, 7, 8, 5});
}

TEST_CASE("Rng::Below stays in range and reaches every value") {
  Rng rng(7);
  std::vector<int> seen(3, 0);
  for (int i = 0; i < 3000; ++i) {
    auto v = rng.Below(3);
    REQUIRE(v < 3);
    ++seen[v];
  }
  // Each of 3 values expected 1000 times; 800 is more than 7 sd away.
  for (int count : seen) CHECK(count > 800);
  CHECK(rng.Below(1) == 0);
}

TEST_CASE("BootstrapMeanInterval: golden interval, 10,000 resamples, seed 1") {
  auto ci = BootstrapMeanInterval(kAccA, {.resamples = 10'000, .seed = 1});
  REQUIRE(ci);
  CHECK(ci->lo == Approx(0.6629000000000002).epsilon(1e-12));
  CHECK(ci->hi == Approx(0.6698000000000001).epsilon(1e-12));
}

TEST_CASE("BootstrapMeanInterval: golden interval, 2,000 resamples, seed 7") {
  auto ci = BootstrapMeanInterval(kSleep1, {.resamples = 2'000, .seed = 7});
  REQUIRE(ci);
  CHECK(ci->lo == Approx(-0.24).epsilon(1e-12));
  CHECK(ci->hi == Approx(1.85).epsilon(1e-12));
}

TEST_CASE("BootstrapMeanInterval: deterministic per seed, different across seeds") {
  auto a = BootstrapMeanInterval(kSleep1, {.seed = 3});
  auto b = BootstrapMeanInterval(kSleep1, {.seed = 3});
  auto c = BootstrapMeanInterval(kSleep1, {.seed = 4});
  REQUIRE(a);
  REQUIRE(c);
  CHECK(*a == *b);
  CHECK_FALSE(*a == *c);
}

TEST_CASE("BootstrapMeanInterval: close to the t-interval on well-behaved data") {
  // Not a golden value: a sanity bound. The percentile bootstrap is known to
  // be a little narrower than the t-interval at n = 10 (it uses sd/sqrt(n)
  // with divisor n and normal-like quantiles).
  Summary s = Summarize(kAccA);
  auto ci = BootstrapMeanInterval(kAccA);
  REQUIRE(ci);
  CHECK(ci->contains(s.mean));
  CHECK(ci->half_width() < s.ci95->half_width());
  CHECK(ci->half_width() > 0.6 * s.ci95->half_width());
}

TEST_CASE("BootstrapMeanInterval: wider level gives a wider interval") {
  auto ci80 = BootstrapMeanInterval(kSleep1, {.level = 0.80});
  auto ci95 = BootstrapMeanInterval(kSleep1, {.level = 0.95});
  REQUIRE(ci80);
  REQUIRE(ci95);
  CHECK(ci80->lo > ci95->lo);
  CHECK(ci80->hi < ci95->hi);
}

TEST_CASE("BootstrapMeanInterval: n < 2 or no resamples gives no interval") {
  std::vector<double> one = {0.5};
  CHECK_FALSE(BootstrapMeanInterval(one).has_value());
  CHECK_FALSE(BootstrapMeanInterval(std::span<const double>{}).has_value());
  CHECK_FALSE(BootstrapMeanInterval(kAccA, {.resamples = 0}).has_value());
}

TEST_CASE("BootstrapMeanInterval: all values equal give a point, no NaN") {
  std::vector<double> same(4, 0.25);
  auto ci = BootstrapMeanInterval(same);
  REQUIRE(ci);
  CHECK(ci->lo == 0.25);
  CHECK(ci->hi == 0.25);
}

TEST_CASE("BootstrapDiffInterval: golden interval, 10,000 resamples, seed 1") {
  auto ci = BootstrapDiffInterval(kAccA, kAccB, {.resamples = 10'000, .seed = 1});
  REQUIRE(ci);
  CHECK(ci->lo == Approx(0.0040000000000000036).epsilon(1e-12));
  CHECK(ci->hi == Approx(0.013900000000000023).epsilon(1e-12));
}

TEST_CASE("BootstrapDiffInterval: needs 2 values on each side") {
  std::vector<double> one = {0.5};
  CHECK_FALSE(BootstrapDiffInterval(one, kAccB).has_value());
  CHECK_FALSE(BootstrapDiffInterval(kAccA, one).has_value());
}


TEST_CASE("Bootstrap memo: the same input answers from the memo, bit for bit") {
  std::vector<double> a = {0.61, 0.64, 0.66, 0.63, 0.65, 0.62, 0.67, 0.6, 0.64, 0.655};
  std::vector<double> b = a;
  b[3] = std::nextafter(b[3], 1.0);  // one ulp apart: another input
  BootstrapOptions o{.resamples = 2'000, .seed = 7};
  auto before = BootstrapMemo();
  auto first = BootstrapDiffInterval(a, b, o).value();
  auto after_first = BootstrapMemo();
  CHECK(after_first.misses == before.misses + 1);
  auto again = BootstrapDiffInterval(a, b, o).value();
  auto after_again = BootstrapMemo();
  CHECK(after_again.hits == after_first.hits + 1);
  CHECK(after_again.misses == after_first.misses);
  CHECK(std::memcmp(&first, &again, sizeof first) == 0);
  // Swapped sides, another seed, another level: each its own input.
  BootstrapDiffInterval(b, a, o);
  BootstrapDiffInterval(a, b, {.resamples = 2'000, .seed = 8});
  BootstrapDiffInterval(a, b, {.resamples = 2'000, .seed = 7, .level = 0.9});
  BootstrapMeanInterval(a, o);
  CHECK(BootstrapMemo().misses == after_again.misses + 4);
}

TEST_CASE("Bootstrap memo: bounded, whatever the number of distinct inputs") {
  // 30,000 distinct samples of 100 values: 3,000,000 values offered, at most
  // 1,000,000 kept (one resample each keeps it cheap).
  std::vector<double> x(100);
  for (int i = 0; i < 30'000; ++i) {
    for (size_t k = 0; k < x.size(); ++k) x[k] = i * 1000.0 + static_cast<double>(k);
    BootstrapMeanInterval(x, {.resamples = 1});
  }
  CHECK(BootstrapMemo().entries > 1'000);
  CHECK(BootstrapMemo().entries <= 1'000'000 / 106);
}

}  // namespace
}  // namespace trainq::stats
