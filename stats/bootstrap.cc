#include "stats/bootstrap.h"

#include <algorithm>
#include <vector>

namespace trainq::stats {

namespace {

std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double ResampledMean(std::span<const double> x, Rng& rng) {
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += x[rng.Below(x.size())];
  return sum / static_cast<double>(x.size());
}

Interval PercentileInterval(std::vector<double>& estimates, double level) {
  std::sort(estimates.begin(), estimates.end());
  double tail = (1 - level) / 2;
  return {SortedQuantile(estimates, tail), SortedQuantile(estimates, 1 - tail)};
}

}  // namespace

std::uint64_t SplitMix64::Next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(std::uint64_t seed) {
  SplitMix64 sm(seed);
  for (auto& word : s_) word = sm.Next();
}

std::uint64_t Rng::Next() {
  std::uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

std::uint64_t Rng::Below(std::uint64_t bound) {
  // 2^64 mod bound, computed in 64 bits as (2^64 - bound) mod bound.
  std::uint64_t threshold = (0 - bound) % bound;
  while (true) {
    std::uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

std::optional<Interval> BootstrapMeanInterval(std::span<const double> x,
                                              const BootstrapOptions& options) {
  if (x.size() < 2 || options.resamples < 1) return std::nullopt;
  Rng rng(options.seed);
  std::vector<double> means(static_cast<std::size_t>(options.resamples));
  for (auto& m : means) m = ResampledMean(x, rng);
  return PercentileInterval(means, options.level);
}

std::optional<Interval> BootstrapDiffInterval(std::span<const double> a, std::span<const double> b,
                                              const BootstrapOptions& options) {
  if (a.size() < 2 || b.size() < 2 || options.resamples < 1) return std::nullopt;
  Rng rng(options.seed);
  std::vector<double> diffs(static_cast<std::size_t>(options.resamples));
  for (auto& d : diffs) {
    double ma = ResampledMean(a, rng);
    double mb = ResampledMean(b, rng);
    d = ma - mb;
  }
  return PercentileInterval(diffs, options.level);
}

}  // namespace trainq::stats
