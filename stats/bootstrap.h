// Seeded percentile bootstrap. Pure functions: the same inputs and seed give
// the same interval on every platform and standard library. Being pure, each
// interval is memoized per exact input (bounded: about 8 MB of values, least
// recently used out first): a long-lived serve answers the dashboard's and
// the report's repeated comparisons of finished batches without resampling
// again (10,000 resamples of 100 seeds a side is about 10 ms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "stats/summary.h"

namespace trainq::stats {

// SplitMix64 (Steele, Lea & Flood 2014): used only to expand one 64-bit seed
// into the xoshiro state, as its authors recommend.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next();

 private:
  std::uint64_t state_;
};

// xoshiro256** 1.0 (Blackman & Vigna 2018). Written out here rather than taken
// from <random> because std::uniform_int_distribution is implementation
// defined: libstdc++ and libc++ would give different bootstrap intervals for
// the same seed, and a report must be reproducible anywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t Next();
  // Uniform integer in [0, bound) without modulo bias: draws below
  // 2^64 mod bound are rejected, so the rest split evenly into `bound` classes
  // (the method of OpenBSD's arc4random_uniform). REQUIRES: bound > 0.
  std::uint64_t Below(std::uint64_t bound);

 private:
  std::uint64_t s_[4];
};

struct BootstrapOptions {
  int resamples = 10'000;
  std::uint64_t seed = 1;
  double level = 0.95;  // two-sided: cuts (1 - level) / 2 off each tail
};

// Percentile bootstrap interval of the mean: `resamples` resamples of x with
// replacement, their means sorted, and the (1-level)/2 and (1+level)/2
// quantiles taken by linear interpolation (type 7). Empty when x.size() < 2 or
// resamples < 1: resampling one value only ever reproduces it.
std::optional<Interval> BootstrapMeanInterval(std::span<const double> x,
                                              const BootstrapOptions& options = {});

// Percentile bootstrap interval of mean(a) - mean(b), resampling each side
// independently (unpaired). Each resample draws all of a, then all of b, from
// one stream. Empty when either side has fewer than 2 values.
std::optional<Interval> BootstrapDiffInterval(std::span<const double> a, std::span<const double> b,
                                              const BootstrapOptions& options = {});

// The memo's use so far in this process (tests, benchmarks).
struct BootstrapMemoCounts {
  std::int64_t hits = 0, misses = 0;
  size_t entries = 0;
};
BootstrapMemoCounts BootstrapMemo();

}  // namespace trainq::stats
