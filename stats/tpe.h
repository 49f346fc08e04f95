// Tree-structured Parzen estimator (Bergstra et al. 2011), one dimension at a
// time as Optuna's default sampler does: split the observations into the
// better `gamma` share ("good") and the rest, model each side with a Parzen
// density (plus a flat prior component), draw candidates from the good density
// and keep the one with the largest good/bad density ratio. Pure: the
// generator is the caller's.
#pragma once

#include <boost/random/mersenne_twister.hpp>
#include <cstddef>
#include <vector>

namespace trainq::stats {

// Which observations are "good": the indices of the ceil(gamma * n) best
// (largest) values, at least 1 and at most 25, ties by index.
std::vector<std::size_t> TpeGood(const std::vector<double>& values, double gamma = 0.25);

// A value in [0, 1] for a continuous dimension, given the coordinates of the
// good and the bad observations (each in [0, 1]).
double TpeContinuous(const std::vector<double>& good, const std::vector<double>& bad,
                     boost::random::mt19937_64& rng, int candidates = 24);

// A category in [0, k) given the categories of the good and bad observations.
std::size_t TpeCategorical(const std::vector<std::size_t>& good,
                           const std::vector<std::size_t>& bad, std::size_t k,
                           boost::random::mt19937_64& rng, int candidates = 24);

// The Parzen density on [0, 1] used above (exposed for tests): a mixture of
// normals at `centres` truncated to [0, 1], bandwidths from the neighbours,
// with a flat component of weight 1 / (n + 1).
double TpeDensity(const std::vector<double>& centres, double x);

}  // namespace trainq::stats
