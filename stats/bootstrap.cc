#include "stats/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace trainq::stats {

namespace {

std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double ResampledMean(std::span<const double> x, Rng& rng) {
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += x[rng.Below(x.size())];
  return sum / static_cast<double>(x.size());
}

// SortedQuantile's type 7 quantile of v, found by selection instead of a
// whole sort (the same two order statistics, so the same value). Reorders v.
double SelectedQuantile(std::vector<double>& v, double p) {
  double h = static_cast<double>(v.size() - 1) * p;
  auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= v.size()) return *std::max_element(v.begin(), v.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  double a = v[lo];
  double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  double frac = h - static_cast<double>(lo);
  return a + frac * (b - a);
}

Interval PercentileInterval(std::vector<double>& estimates, double level) {
  double tail = (1 - level) / 2;
  double lo = SelectedQuantile(estimates, tail);
  return {lo, SelectedQuantile(estimates, 1 - tail)};
}

// The memo: an interval per exact input (both samples' values, the options),
// least recently used first out once the stored values pass a bound.
class Memo {
 public:
  static Memo& Get() {
    static Memo memo;
    return memo;
  }

  static std::vector<double> Key(int kind, std::span<const double> a, std::span<const double> b,
                                 const BootstrapOptions& o) {
    std::vector<double> key;
    key.reserve(a.size() + b.size() + 6);
    double seed;
    static_assert(sizeof(seed) == sizeof(o.seed));
    std::memcpy(&seed, &o.seed, sizeof(seed));
    key.insert(key.end(), {static_cast<double>(kind), static_cast<double>(o.resamples), o.level,
                           seed, static_cast<double>(a.size()), static_cast<double>(b.size())});
    key.insert(key.end(), a.begin(), a.end());
    key.insert(key.end(), b.begin(), b.end());
    return key;
  }

  std::optional<Interval> Find(const std::vector<double>& key) {
    std::lock_guard lock(mu_);
    auto [b, e] = index_.equal_range(Hash(key));
    for (auto it = b; it != e; ++it) {
      if (SameBits(it->second->key, key)) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++counts_.hits;
        return it->second->interval;
      }
    }
    ++counts_.misses;
    return std::nullopt;
  }

  void Put(std::vector<double> key, Interval interval) {
    std::lock_guard lock(mu_);
    if (key.size() > kMaxValues / 4) return;  // a huge sample is not kept
    size_t h = Hash(key);
    stored_ += key.size();
    lru_.push_front({std::move(key), interval, h});
    index_.emplace(h, lru_.begin());
    while (stored_ > kMaxValues && !lru_.empty()) {
      auto last = std::prev(lru_.end());
      auto [b, e] = index_.equal_range(last->hash);
      for (auto i = b; i != e; ++i) {
        if (i->second == last) {
          index_.erase(i);
          break;
        }
      }
      stored_ -= last->key.size();
      lru_.erase(last);
    }
    counts_.entries = lru_.size();
  }

  BootstrapMemoCounts Counts() {
    std::lock_guard lock(mu_);
    return counts_;
  }

 private:
  // At most this many values stored (8 bytes each): 8 MB.
  static constexpr size_t kMaxValues = 1'000'000;

  struct Entry {
    std::vector<double> key;
    Interval interval;
    size_t hash;
  };

  static bool SameBits(const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
  }

  static size_t Hash(const std::vector<double>& key) {
    // FNV-1a over the bytes: a table index only (entries compare exactly).
    std::uint64_t h = 1469598103934665603ULL;
    const auto* p = reinterpret_cast<const unsigned char*>(key.data());
    for (size_t i = 0; i < key.size() * sizeof(double); ++i) h = (h ^ p[i]) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }

  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_multimap<size_t, std::list<Entry>::iterator> index_;
  size_t stored_ = 0;
  BootstrapMemoCounts counts_;
};

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
  auto key = Memo::Key(0, x, {}, options);
  if (auto hit = Memo::Get().Find(key)) return hit;
  Rng rng(options.seed);
  std::vector<double> means(static_cast<std::size_t>(options.resamples));
  for (auto& m : means) m = ResampledMean(x, rng);
  auto interval = PercentileInterval(means, options.level);
  Memo::Get().Put(std::move(key), interval);
  return interval;
}

std::optional<Interval> BootstrapDiffInterval(std::span<const double> a, std::span<const double> b,
                                              const BootstrapOptions& options) {
  if (a.size() < 2 || b.size() < 2 || options.resamples < 1) return std::nullopt;
  auto key = Memo::Key(1, a, b, options);
  if (auto hit = Memo::Get().Find(key)) return hit;
  Rng rng(options.seed);
  std::vector<double> diffs(static_cast<std::size_t>(options.resamples));
  for (auto& d : diffs) {
    double ma = ResampledMean(a, rng);
    double mb = ResampledMean(b, rng);
    d = ma - mb;
  }
  auto interval = PercentileInterval(diffs, options.level);
  Memo::Get().Put(std::move(key), interval);
  return interval;
}

BootstrapMemoCounts BootstrapMemo() { return Memo::Get().Counts(); }

}  // namespace trainq::stats
