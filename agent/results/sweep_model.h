// The model strategies of a sweep (strategy: bayes | tpe) and the rule that
// gives a point more seeds. Pure functions over what the points measured.
//
// Parameters are searched on the unit cube: uniform linearly, log_uniform and
// int with log: true in log space, choice/values (TPE only) as categories.
// Bayes: a Gaussian process (stats/gp.h) over the bayes parameters whose
// observation noise at each point is that point's variance of the mean
// (its seeds' variance shrunk toward the pooled one, divided by n); expected
// improvement over the best posterior mean at an observed point (a noisy
// incumbent, not the best single run); points in flight enter as "kriging
// believer" observations so that a batch of suggestions spreads out.
// TPE (stats/tpe.h): each tpe parameter on its own, good = the best quarter of
// the points by mean.
#pragma once

#include <boost/random/mersenne_twister.hpp>
#include <nlohmann/json.hpp>
#include <vector>

#include "agent/repo/sweep_spec.h"
#include "core/result.h"

namespace trainq {

// What one point has measured so far.
struct PointObservation {
  nlohmann::json params;
  int n = 0;         // finished seeds
  double mean = 0;
  double var = 0;    // sample variance of its seeds (0 when n < 2)
};

// Points the search knows: measured ones, the ones still running, and the goal.
struct SweepHistory {
  std::vector<PointObservation> observed;  // n >= 1
  std::vector<nlohmann::json> pending;     // suggested, nothing measured yet
  bool maximise = true;
};

// The variance of each observed point's mean: its seeds' variance shrunk
// toward the pooled variance of all points with two or more seeds (two
// pseudo-degrees of freedom, so that a 2-seed spread does not dominate), over n.
// With no point of two seeds, 0 for all.
std::vector<double> VarianceOfMeans(const std::vector<PointObservation>& observed);

// `point` (grid, random and fixed values already set) with its bayes and
// tpe parameters proposed from `history`. `rng` is the point's own generator.
Result<nlohmann::json> ProposeWithModels(const SweepSpec& space, nlohmann::json point,
                                         const SweepHistory& history,
                                         boost::random::mt19937_64& rng);

// One point's estimate for the adaptive-repeats rule.
struct PointEstimate {
  int n = 0;          // finished seeds; 0: not measured (ignored)
  double mean = 0;
  double se = 0;      // standard error of the mean (shrunk, as VarianceOfMeans)
  bool active = false;  // runs still queued or running: not given more now
};

// Adaptive repeats: the points (indices) that should get more seeds now. A
// point could still be the best while its upper confidence bound (mean + z se
// for goal max) reaches the leader's lower bound; the leader is the point
// with the best lower bound, and it gets more only while another point still
// reaches it. Points at `max_seeds` or still running get none.
std::vector<std::size_t> PointsNeedingSeeds(const std::vector<PointEstimate>& points,
                                            bool maximise, int max_seeds, double z = 1.645);

// Unit-cube coordinate of a parameter value and back (exposed for tests).
double EncodeUnit(const SweepParam& p, const nlohmann::json& v);
nlohmann::json DecodeUnit(const SweepParam& p, double u);

}  // namespace trainq
