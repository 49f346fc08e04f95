// SVG plots of a sweep, hand-written (no plotting library or tool needed):
// the metric against each searched parameter (each point's mean with its 95%
// interval, log axes for log parameters, one column per option for lists),
// the progress of the pick (the leader by the confidence bound, its mean
// and interval) against runs spent, parallel coordinates (one line per point
// across every searched parameter, coloured by its mean) and the parameters'
// importance.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/results/sweep.h"

namespace trainq {

// How much of the ordering of the points' means a parameter explains: eta
// squared (between-group over total sum of squares) of the ranks of the
// means (as Kruskal-Wallis does, so one far-off point cannot hide an
// ordering), grouped by the parameter's value: by option for lists, else in
// up to four bins of equal counts (on the log scale for log parameters). 1
// means the parameter alone orders the means; near 0 that it does not matter
// (or that the sweep has too few points to tell: with k groups, chance alone
// gives about (k - 1) / (points - 1)). Points without a finished run are
// left out.
struct ParamImportance {
  std::string name;
  double eta2 = 0;
  int groups = 0;
  int points = 0;
};
// Varying parameters (not `value`) with at least 3 measured points, in file order.
std::vector<ParamImportance> SweepImportance(const SweepView& v);

// File name -> SVG text: "progress.svg", "parallel.svg", "importance.svg"
// and "param-NAME.svg" per parameter that varies (not `value`), names made
// safe for a file system.
std::map<std::string, std::string> SweepPlots(const SweepView& v);

}  // namespace trainq
