// A Gaussian-process regression surrogate for sweeps: Matern 5/2 kernel with
// one length scale per dimension (ARD) and an amplitude, and a noise variance
// per observation (a heteroscedastic nugget: each sweep point's variance of
// its mean, measured from its seeds). Zero prior mean: callers standardise y.
//
// Semantics match scikit-learn's GaussianProcessRegressor with
//   kernel = ConstantKernel(amplitude) * Matern(length_scale=[...], nu=2.5)
//   alpha = noise (per point), normalize_y=False
// (tests/stats/gp_test.cc checks that against sklearn itself).
// Hyperparameters by maximum marginal likelihood: NLopt's L-BFGS on the log
// parameters with the analytic gradient, from the given start plus restarts.
// Pure and deterministic for a given seed. Not thread-safe to share while fitting.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"

namespace trainq::stats {

struct GpHyper {
  double amplitude = 1.0;           // the kernel's variance (sklearn's constant_value)
  std::vector<double> lengths;      // one per dimension
};

struct GpFitOptions {
  double amplitude_lo = 1e-5, amplitude_hi = 1e5;
  double length_lo = 1e-5, length_hi = 1e5;
  int restarts = 4;                 // random starts (log-uniform in the bounds) besides `start`
  std::uint64_t seed = 1;
};

class GaussianProcess {
 public:
  struct Prediction {
    double mean = 0;
    double var = 0;  // of the latent function, without observation noise
  };

  // x: n rows of d coordinates; y: n values; noise: n variances added to the
  // diagonal. Errors: sizes disagree, no points, or a kernel that is not
  // positive definite even with jitter.
  static Result<GaussianProcess> Fit(std::vector<std::vector<double>> x, std::vector<double> y,
                                     std::vector<double> noise, const GpHyper& hyper);
  // As Fit, with the hyperparameters that maximise the log marginal
  // likelihood (the best of `start` and options.restarts random starts).
  static Result<GaussianProcess> FitMaxLikelihood(std::vector<std::vector<double>> x,
                                                  std::vector<double> y, std::vector<double> noise,
                                                  const GpHyper& start,
                                                  const GpFitOptions& options = {});

  Prediction Predict(std::span<const double> x) const;
  double log_marginal_likelihood() const { return lml_; }
  const GpHyper& hyper() const { return hyper_; }

  // The log marginal likelihood at log-parameters theta = (log amplitude,
  // log lengths...) and its gradient (when grad is not null). -inf when the
  // kernel cannot be factorised.
  static double LogLikelihood(const std::vector<std::vector<double>>& x, const Eigen::VectorXd& y,
                              const Eigen::VectorXd& noise, const std::vector<double>& theta,
                              std::vector<double>* grad);

 private:
  std::vector<std::vector<double>> x_;
  GpHyper hyper_;
  Eigen::VectorXd alpha_;                 // K^-1 y
  Eigen::LLT<Eigen::MatrixXd> llt_;
  double lml_ = 0;
};

// Matern 5/2 correlation at scaled distance r: (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r).
double Matern52(double r);

// Expected improvement over `best` of a normal posterior (mean, sd) when
// larger is better; 0 when sd is 0 and mean <= best.
double ExpectedImprovement(double mean, double sd, double best);

}  // namespace trainq::stats
