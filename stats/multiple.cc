#include "stats/multiple.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace trainq::stats {

Result<Correction> ParseCorrection(std::string_view text) {
  if (text == "holm") return Correction::kHolm;
  if (text == "bh") return Correction::kBh;
  if (text == "none") return Correction::kNone;
  return Fail(ErrorKind::kInvalidArgument,
              "correction must be holm, bh or none, got \"" + std::string(text) + "\"");
}

std::string_view CorrectionName(Correction c) {
  switch (c) {
    case Correction::kHolm:
      return "holm";
    case Correction::kBh:
      return "bh";
    case Correction::kNone:
      return "none";
  }
  return "?";
}

std::string_view CorrectionTitle(Correction c) {
  switch (c) {
    case Correction::kHolm:
      return "Holm";
    case Correction::kBh:
      return "BH";
    case Correction::kNone:
      return "no correction";
  }
  return "?";
}

namespace {

std::vector<size_t> Ascending(std::span<const double> p) {
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  return order;
}

double Clamp01(double x) { return std::clamp(x, 0.0, 1.0); }

}  // namespace

std::vector<double> HolmAdjust(std::span<const double> p) {
  const size_t m = p.size();
  std::vector<double> out(m);
  double running = 0;
  auto order = Ascending(p);
  for (size_t i = 0; i < m; ++i) {
    running = std::max(running, Clamp01(static_cast<double>(m - i) * p[order[i]]));
    out[order[i]] = running;
  }
  return out;
}

std::vector<double> BhAdjust(std::span<const double> p) {
  const size_t m = p.size();
  std::vector<double> out(m);
  double running = 1;
  auto order = Ascending(p);
  for (size_t k = m; k-- > 0;) {
    running = std::min(running, Clamp01(static_cast<double>(m) * p[order[k]] / static_cast<double>(k + 1)));
    out[order[k]] = running;
  }
  return out;
}

std::vector<double> Adjust(Correction c, std::span<const double> p) {
  switch (c) {
    case Correction::kHolm:
      return HolmAdjust(p);
    case Correction::kBh:
      return BhAdjust(p);
    case Correction::kNone:
      break;
  }
  std::vector<double> out(p.begin(), p.end());
  for (auto& x : out) x = Clamp01(x);
  return out;
}

double IntervalLevel(Correction c, double alpha, int m, int rejections) {
  m = std::max(m, 1);
  switch (c) {
    case Correction::kHolm:
      return 1 - alpha / m;
    case Correction::kBh:
      return 1 - std::max(1, std::min(rejections, m)) * alpha / m;
    case Correction::kNone:
      break;
  }
  return 1 - alpha;
}

}  // namespace trainq::stats
