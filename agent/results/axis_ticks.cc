#include "agent/results/axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trainq {

namespace {

// Digits after the point that a step (a 1-2-5 multiple of a power of ten)
// needs.
int DecimalsOf(double step) {
  return std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
}

}  // namespace

AxisTicks NiceTicks(double lo, double hi, int target) {
  AxisTicks out;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo <= 0) {
    out.values = {lo};
    out.decimals = std::fabs(lo) > 0 ? std::min(12, DecimalsOf(std::fabs(lo)) + 3) : 0;
    return out;
  }
  // A step of 1, 2 or 5 times a power of ten at least (hi - lo) / (t - 1):
  // at most t ticks, and 3 at least (t grows until there are).
  for (int t = std::max(2, target); t <= 4 * std::max(2, target); ++t) {
    const double raw = (hi - lo) / (t - 1);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double norm = raw / mag;
    const double step = (norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 5 + 1e-9 ? 5 : 10) * mag;
    // Ticks are k * step for whole k: no error piles up along the axis.
    const double first = std::ceil(lo / step - 1e-9);
    const double last = std::floor(hi / step + 1e-9);
    out.values.clear();
    for (double k = first; k <= last && out.values.size() < 1000; ++k) {
      double v = k * step;
      if (std::fabs(v) < step * 1e-9) v = 0;
      out.values.push_back(v);
    }
    out.decimals = DecimalsOf(step);
    if (out.values.size() >= 3) break;
  }
  return out;
}

AxisTicks LogTicks(double lo, double hi, int target) {
  if (!(lo > 0) || !(hi > 0) || !std::isfinite(lo) || !std::isfinite(hi)) {
    return NiceTicks(lo, hi, target);
  }
  if (hi < lo) std::swap(lo, hi);
  const int e0 = static_cast<int>(std::floor(std::log10(lo) - 1e-9));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi) + 1e-9));
  for (const std::vector<double>& mantissas :
       {std::vector<double>{1}, std::vector<double>{1, 2, 5}}) {
    AxisTicks out;
    for (int e = e0; e <= e1; ++e) {
      for (double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
        out.values.push_back(v);
        out.decimals = std::max(out.decimals, DecimalsOf(v));
      }
    }
    if (out.values.size() >= 3 || (mantissas.size() > 1 && out.values.size() >= 2)) return out;
  }
  return NiceTicks(lo, hi, target);
}

std::string TickLabel(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 15), v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.ends_with('0')) s.pop_back();
    if (s.ends_with('.')) s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

}  // namespace trainq
