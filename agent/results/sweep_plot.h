// SVG plots of a sweep, hand-written (no plotting library or tool needed):
// the metric against each searched parameter (each point's mean with its 95%
// interval, log axes for log parameters, one column per option for lists),
// and the progress of the pick (the leader by the confidence bound, its mean
// and interval) against runs spent.
#pragma once

#include <map>
#include <string>

#include "agent/results/sweep.h"

namespace trainq {

// File name -> SVG text: "progress.svg" and "param-NAME.svg" per parameter
// that varies (not `value`), names made safe for a file system.
std::map<std::string, std::string> SweepPlots(const SweepView& v);

}  // namespace trainq
