// Chart axis ticks at round numbers, for the SVG plots (report.cc,
// sweep_plot.cc): steps of 1, 2 or 5 times a power of ten, so that an axis
// reads 0.95 0.96 0.97 0.98 rather than 0.9483 0.9652 0.9821, and 5 10 15 20
// rather than 2.1 7.05 12 16.95. The dashboard draws its charts with the same
// rule (niceTicks in agent/daemon/web/format.mjs).
#pragma once

#include <string>
#include <vector>

namespace trainq {

struct AxisTicks {
  std::vector<double> values;  // inside [lo, hi], ascending
  int decimals = 0;            // what the step needs after the point
};

// At most `target` ticks over [lo, hi], and at least 3 (more than `target`
// only where 3 need it); one at lo when lo == hi; none when either is not
// finite.
AxisTicks NiceTicks(double lo, double hi, int target = 5);
// A log axis over [lo, hi] (values, both > 0): the powers of ten inside it
// when there are 3 or more, else 1, 2 and 5 times them, else NiceTicks.
AxisTicks LogTicks(double lo, double hi, int target = 5);
// The label of tick `v`: at most `decimals` digits after the point, trailing
// zeros dropped, never "-0".
std::string TickLabel(double v, int decimals);

}  // namespace trainq
