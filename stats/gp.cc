#include "stats/gp.h"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <boost/random/mersenne_twister.hpp>
#include <boost/random/uniform_real_distribution.hpp>
#include <cmath>
#include <limits>
#include <nlopt.hpp>

namespace trainq::stats {

namespace {

constexpr double kSqrt5 = 2.2360679774997896964;
constexpr double kLog2Pi = 1.8378770664093454836;

double ScaledDistance(std::span<const double> a, std::span<const double> b,
                      const std::vector<double>& lengths) {
  double r2 = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    double d = (a[k] - b[k]) / lengths[k];
    r2 += d * d;
  }
  return std::sqrt(r2);
}

Status CheckShapes(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                   const std::vector<double>& noise, std::size_t dims) {
  if (x.empty()) return Fail(ErrorKind::kInvalidArgument, "gaussian process: no points");
  if (y.size() != x.size() || noise.size() != x.size()) {
    return Fail(ErrorKind::kInvalidArgument, "gaussian process: x, y and noise differ in length");
  }
  for (const auto& row : x) {
    if (row.size() != dims) {
      return Fail(ErrorKind::kInvalidArgument,
                  "gaussian process: every point needs " + std::to_string(dims) + " coordinates");
    }
  }
  for (double v : noise) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return Fail(ErrorKind::kInvalidArgument, "gaussian process: noise must be finite and >= 0");
    }
  }
  return {};
}

Eigen::MatrixXd Kernel(const std::vector<std::vector<double>>& x, const GpHyper& h) {
  const auto n = static_cast<Eigen::Index>(x.size());
  Eigen::MatrixXd k(n, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j <= i; ++j) {
      double v = h.amplitude * Matern52(ScaledDistance(x[static_cast<std::size_t>(i)],
                                                       x[static_cast<std::size_t>(j)], h.lengths));
      k(i, j) = v;
      k(j, i) = v;
    }
  }
  return k;
}

}  // namespace

double Matern52(double r) {
  return (1.0 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
}

double ExpectedImprovement(double mean, double sd, double best) {
  if (!(sd > 0)) return std::max(0.0, mean - best);
  boost::math::normal n;
  double z = (mean - best) / sd;
  return (mean - best) * boost::math::cdf(n, z) + sd * boost::math::pdf(n, z);
}

double GaussianProcess::LogLikelihood(const std::vector<std::vector<double>>& x,
                                      const Eigen::VectorXd& y, const Eigen::VectorXd& noise,
                                      const std::vector<double>& theta,
                                      std::vector<double>* grad) {
  const std::size_t dims = theta.size() - 1;
  GpHyper h;
  h.amplitude = std::exp(theta[0]);
  for (std::size_t k = 0; k < dims; ++k) h.lengths.push_back(std::exp(theta[k + 1]));
  Eigen::MatrixXd kf = Kernel(x, h);
  Eigen::MatrixXd k = kf;
  k.diagonal() += noise;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    if (grad) std::fill(grad->begin(), grad->end(), 0.0);
    return -std::numeric_limits<double>::infinity();
  }
  Eigen::VectorXd alpha = llt.solve(y);
  const auto n = y.size();
  double lml = -0.5 * y.dot(alpha) - llt.matrixLLT().diagonal().array().log().sum() -
               0.5 * static_cast<double>(n) * kLog2Pi;
  if (grad) {
    // d lml / d theta_j = 1/2 tr((alpha alpha^T - K^-1) dK/dtheta_j)
    Eigen::MatrixXd w = alpha * alpha.transpose() -
                        llt.solve(Eigen::MatrixXd::Identity(n, n));
    (*grad)[0] = 0.5 * (w.array() * kf.array()).sum();  // dK/dlog(amplitude) = K_f
    for (std::size_t d = 0; d < dims; ++d) {
      double sum = 0;
      for (Eigen::Index i = 0; i < n; ++i) {
        for (Eigen::Index j = 0; j < n; ++j) {
          const auto& a = x[static_cast<std::size_t>(i)];
          const auto& b = x[static_cast<std::size_t>(j)];
          double r = ScaledDistance(a, b, h.lengths);
          double dk = (a[d] - b[d]) / h.lengths[d];
          double dkdl = h.amplitude * (5.0 / 3.0) * (1.0 + kSqrt5 * r) * std::exp(-kSqrt5 * r) *
                        dk * dk;
          sum += w(i, j) * dkdl;
        }
      }
      (*grad)[d + 1] = 0.5 * sum;
    }
  }
  return lml;
}

Result<GaussianProcess> GaussianProcess::Fit(std::vector<std::vector<double>> x,
                                             std::vector<double> y, std::vector<double> noise,
                                             const GpHyper& hyper) {
  const std::size_t dims = hyper.lengths.size();
  TRY(CheckShapes(x, y, noise, dims));
  if (!(hyper.amplitude > 0)) {
    return Fail(ErrorKind::kInvalidArgument, "gaussian process: amplitude must be > 0");
  }
  for (double l : hyper.lengths) {
    if (!(l > 0)) return Fail(ErrorKind::kInvalidArgument, "gaussian process: lengths must be > 0");
  }
  GaussianProcess gp;
  gp.x_ = std::move(x);
  gp.hyper_ = hyper;
  Eigen::MatrixXd k = Kernel(gp.x_, hyper);
  Eigen::VectorXd yv = Eigen::Map<const Eigen::VectorXd>(y.data(), static_cast<Eigen::Index>(y.size()));
  Eigen::VectorXd nv =
      Eigen::Map<const Eigen::VectorXd>(noise.data(), static_cast<Eigen::Index>(noise.size()));
  k.diagonal() += nv;
  // Jitter only when the matrix as given cannot be factorised (duplicate
  // points without noise): the exact sklearn semantics otherwise.
  double jitter = 0;
  for (int tries = 0; tries < 8; ++tries) {
    gp.llt_.compute(k);
    if (gp.llt_.info() == Eigen::Success) break;
    double add = jitter == 0 ? 1e-10 * hyper.amplitude : jitter * 9;
    k.diagonal().array() += add;
    jitter += add;
  }
  if (gp.llt_.info() != Eigen::Success) {
    return Fail(ErrorKind::kInternal, "gaussian process: kernel matrix is not positive definite");
  }
  gp.alpha_ = gp.llt_.solve(yv);
  gp.lml_ = -0.5 * yv.dot(gp.alpha_) - gp.llt_.matrixLLT().diagonal().array().log().sum() -
            0.5 * static_cast<double>(yv.size()) * kLog2Pi;
  return gp;
}

Result<GaussianProcess> GaussianProcess::FitMaxLikelihood(std::vector<std::vector<double>> x,
                                                          std::vector<double> y,
                                                          std::vector<double> noise,
                                                          const GpHyper& start,
                                                          const GpFitOptions& o) {
  const std::size_t dims = start.lengths.size();
  TRY(CheckShapes(x, y, noise, dims));
  Eigen::VectorXd yv = Eigen::Map<const Eigen::VectorXd>(y.data(), static_cast<Eigen::Index>(y.size()));
  Eigen::VectorXd nv =
      Eigen::Map<const Eigen::VectorXd>(noise.data(), static_cast<Eigen::Index>(noise.size()));
  std::vector<double> lo(dims + 1), hi(dims + 1);
  lo[0] = std::log(o.amplitude_lo);
  hi[0] = std::log(o.amplitude_hi);
  for (std::size_t k = 1; k <= dims; ++k) {
    lo[k] = std::log(o.length_lo);
    hi[k] = std::log(o.length_hi);
  }
  struct Context {
    const std::vector<std::vector<double>>* x;
    const Eigen::VectorXd* y;
    const Eigen::VectorXd* noise;
    std::vector<double> best_theta;
    double best = -std::numeric_limits<double>::infinity();
  } ctx{&x, &yv, &nv, {}, -std::numeric_limits<double>::infinity()};
  auto objective = [](const std::vector<double>& theta, std::vector<double>& grad, void* data) {
    auto* c = static_cast<Context*>(data);
    double v = LogLikelihood(*c->x, *c->y, *c->noise, theta, grad.empty() ? nullptr : &grad);
    if (v > c->best) {
      c->best = v;
      c->best_theta = theta;
    }
    return std::isfinite(v) ? v : -1e300;
  };
  std::vector<std::vector<double>> starts;
  std::vector<double> first = {std::log(start.amplitude)};
  for (double l : start.lengths) first.push_back(std::log(l));
  for (std::size_t k = 0; k <= dims; ++k) first[k] = std::clamp(first[k], lo[k], hi[k]);
  starts.push_back(first);
  boost::random::mt19937_64 rng(o.seed);
  for (int r = 0; r < o.restarts; ++r) {
    std::vector<double> t(dims + 1);
    for (std::size_t k = 0; k <= dims; ++k) {
      t[k] = boost::random::uniform_real_distribution<double>(lo[k], hi[k])(rng);
    }
    starts.push_back(t);
  }
  for (auto theta : starts) {
    nlopt::opt opt(nlopt::LD_LBFGS, static_cast<unsigned>(dims + 1));
    opt.set_lower_bounds(lo);
    opt.set_upper_bounds(hi);
    opt.set_max_objective(objective, &ctx);
    opt.set_ftol_rel(1e-12);
    opt.set_xtol_rel(1e-10);
    opt.set_maxeval(400);
    double value = 0;
    try {
      opt.optimize(theta, value);
    } catch (const std::exception&) {
      // roundoff_limited and friends: the best point seen is kept in ctx.
    }
  }
  if (ctx.best_theta.empty()) {
    return Fail(ErrorKind::kInternal, "gaussian process: no hyperparameters could be fitted");
  }
  GpHyper h;
  h.amplitude = std::exp(ctx.best_theta[0]);
  for (std::size_t k = 1; k <= dims; ++k) h.lengths.push_back(std::exp(ctx.best_theta[k]));
  return Fit(std::move(x), std::move(y), std::move(noise), h);
}

GaussianProcess::Prediction GaussianProcess::Predict(std::span<const double> at) const {
  const auto n = static_cast<Eigen::Index>(x_.size());
  Eigen::VectorXd ks(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    ks(i) = hyper_.amplitude *
            Matern52(ScaledDistance(x_[static_cast<std::size_t>(i)], at, hyper_.lengths));
  }
  Prediction p;
  p.mean = ks.dot(alpha_);
  Eigen::VectorXd v = llt_.matrixL().solve(ks);
  p.var = std::max(0.0, hyper_.amplitude - v.squaredNorm());
  return p;
}

}  // namespace trainq::stats
