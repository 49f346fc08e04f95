#include "agent/results/sweep_model.h"

#include <algorithm>
#include <boost/random/uniform_real_distribution.hpp>
#include <cmath>
#include <limits>
#include <nlopt.hpp>

#include "stats/gp.h"
#include "stats/tpe.h"

namespace trainq {

using nlohmann::json;

namespace {

bool LogScale(const SweepParam& p) {
  return p.kind == ParamKind::kLogUniform || (p.kind == ParamKind::kInt && p.log);
}

// The index of `v` among a list parameter's options, or -1.
int OptionIndex(const SweepParam& p, const json& v) {
  for (std::size_t i = 0; i < p.options.size(); ++i) {
    const json& o = p.options[i];
    if (o == v || (o.is_number() && v.is_number() && o.get<double>() == v.get<double>())) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool IsRange(const SweepParam& p) {
  return p.kind == ParamKind::kUniform || p.kind == ParamKind::kLogUniform ||
         p.kind == ParamKind::kInt;
}

// Observations whose value of every parameter in `params` can be encoded.
bool Encodable(const std::vector<const SweepParam*>& params, const json& point) {
  for (const auto* p : params) {
    if (!point.contains(p->name)) return false;
    const json& v = point[p->name];
    if (IsRange(*p) ? !v.is_number() : OptionIndex(*p, v) < 0) return false;
  }
  return true;
}

Result<json> ProposeBayes(const std::vector<const SweepParam*>& params, json point,
                          const SweepHistory& h, boost::random::mt19937_64& rng) {
  std::vector<std::vector<double>> x;
  std::vector<double> y, noise;
  auto var = VarianceOfMeans(h.observed);
  for (std::size_t i = 0; i < h.observed.size(); ++i) {
    const auto& o = h.observed[i];
    if (!Encodable(params, o.params)) continue;
    std::vector<double> row;
    for (const auto* p : params) row.push_back(EncodeUnit(*p, o.params[p->name]));
    x.push_back(std::move(row));
    y.push_back(h.maximise ? o.mean : -o.mean);
    noise.push_back(var[i]);
  }
  boost::random::uniform_real_distribution<double> unit(0, 1);
  const std::size_t d = params.size();
  auto random_fill = [&]() {
    for (const auto* p : params) point[p->name] = DecodeUnit(*p, unit(rng));
    return point;
  };
  if (x.size() < 2) return random_fill();
  // Standardise y; noise in the same units, with a small floor for stability.
  double mean = 0, sd = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  for (double v : y) sd += (v - mean) * (v - mean);
  sd = std::sqrt(sd / static_cast<double>(y.size()));
  if (!(sd > 0)) sd = 1;
  for (auto& v : y) v = (v - mean) / sd;
  for (auto& v : noise) v = std::max(v / (sd * sd), 1e-6);
  stats::GpHyper start;
  start.lengths.assign(d, 0.3);
  stats::GpFitOptions fo;
  fo.amplitude_lo = 1e-2;
  fo.amplitude_hi = 1e2;
  fo.length_lo = 1e-2;
  fo.length_hi = 1e1;
  fo.restarts = 3;
  fo.seed = rng();
  ASSIGN_OR_RETURN(auto gp, stats::GaussianProcess::FitMaxLikelihood(x, y, noise, start, fo));
  // The incumbent: the best posterior mean at a measured point.
  double incumbent = -std::numeric_limits<double>::infinity();
  for (const auto& row : x) incumbent = std::max(incumbent, gp.Predict(row).mean);
  // Points in flight: believed at their posterior mean (kriging believer).
  std::size_t n_measured = x.size();
  for (const auto& pend : h.pending) {
    if (!Encodable(params, pend)) continue;
    std::vector<double> row;
    for (const auto* p : params) row.push_back(EncodeUnit(*p, pend[p->name]));
    double m = gp.Predict(row).mean;
    x.push_back(std::move(row));
    y.push_back(m);
    noise.push_back(1e-6);
  }
  if (x.size() > n_measured) {
    ASSIGN_OR_RETURN(gp, stats::GaussianProcess::Fit(x, y, noise, gp.hyper()));
  }
  auto ei = [&](const std::vector<double>& u) {
    auto pr = gp.Predict(u);
    return stats::ExpectedImprovement(pr.mean, std::sqrt(pr.var), incumbent);
  };
  // Random candidates, then a bounded local search from the best few.
  std::vector<std::pair<double, std::vector<double>>> cands;
  for (int c = 0; c < 512; ++c) {
    std::vector<double> u(d);
    for (auto& v : u) v = unit(rng);
    cands.push_back({ei(u), u});
  }
  std::partial_sort(cands.begin(), cands.begin() + 3, cands.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> best = cands[0].second;
  double best_ei = cands[0].first;
  for (int s = 0; s < 3; ++s) {
    std::vector<double> u = cands[static_cast<std::size_t>(s)].second;
    nlopt::opt opt(nlopt::LN_BOBYQA, static_cast<unsigned>(d));
    opt.set_lower_bounds(std::vector<double>(d, 0.0));
    opt.set_upper_bounds(std::vector<double>(d, 1.0));
    auto f = [](const std::vector<double>& v, std::vector<double>&, void* data) {
      return (*static_cast<decltype(ei)*>(data))(v);
    };
    opt.set_max_objective(f, &ei);
    opt.set_maxeval(60);
    opt.set_xtol_rel(1e-6);
    double value = 0;
    try {
      opt.optimize(u, value);
    } catch (const std::exception&) {
      value = ei(u);
    }
    if (value > best_ei) {
      best_ei = value;
      best = u;
    }
  }
  for (std::size_t k = 0; k < d; ++k) point[params[k]->name] = DecodeUnit(*params[k], best[k]);
  return point;
}

json ProposeTpe(const SweepParam& p, const SweepHistory& h, boost::random::mt19937_64& rng) {
  std::vector<const PointObservation*> obs;
  for (const auto& o : h.observed) {
    if (Encodable({&p}, o.params)) obs.push_back(&o);
  }
  boost::random::uniform_real_distribution<double> unit(0, 1);
  if (obs.size() < 2) {
    if (IsRange(p)) return DecodeUnit(p, unit(rng));
    auto k = static_cast<std::size_t>(unit(rng) * static_cast<double>(p.options.size()));
    return p.options[std::min(k, p.options.size() - 1)];
  }
  std::vector<double> values;
  for (const auto* o : obs) values.push_back(h.maximise ? o->mean : -o->mean);
  auto good_idx = stats::TpeGood(values);
  std::vector<bool> is_good(obs.size(), false);
  for (auto i : good_idx) is_good[i] = true;
  if (IsRange(p)) {
    std::vector<double> good, bad;
    for (std::size_t i = 0; i < obs.size(); ++i) {
      (is_good[i] ? good : bad).push_back(EncodeUnit(p, obs[i]->params[p.name]));
    }
    return DecodeUnit(p, stats::TpeContinuous(good, bad, rng));
  }
  std::vector<std::size_t> good, bad;
  for (std::size_t i = 0; i < obs.size(); ++i) {
    (is_good[i] ? good : bad)
        .push_back(static_cast<std::size_t>(OptionIndex(p, obs[i]->params[p.name])));
  }
  return p.options[stats::TpeCategorical(good, bad, p.options.size(), rng)];
}

}  // namespace

double EncodeUnit(const SweepParam& p, const json& v) {
  if (!IsRange(p)) return OptionIndex(p, v);
  double x = v.get<double>();
  double u = LogScale(p) ? (std::log(x) - std::log(p.lo)) / (std::log(p.hi) - std::log(p.lo))
                         : (x - p.lo) / (p.hi - p.lo);
  return std::clamp(u, 0.0, 1.0);
}

json DecodeUnit(const SweepParam& p, double u) {
  u = std::clamp(u, 0.0, 1.0);
  if (!IsRange(p)) {
    auto k = static_cast<std::size_t>(std::llround(u));
    return p.options[std::min(k, p.options.size() - 1)];
  }
  double x = LogScale(p) ? std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo)))
                         : p.lo + u * (p.hi - p.lo);
  x = std::clamp(x, p.lo, p.hi);
  if (p.kind == ParamKind::kInt) {
    return std::clamp(static_cast<std::int64_t>(std::llround(x)), static_cast<std::int64_t>(p.lo),
                      static_cast<std::int64_t>(p.hi));
  }
  return x;
}

std::vector<double> VarianceOfMeans(const std::vector<PointObservation>& observed) {
  double ss = 0, df = 0;
  for (const auto& o : observed) {
    if (o.n >= 2) {
      ss += (o.n - 1) * o.var;
      df += o.n - 1;
    }
  }
  const double pooled = df > 0 ? ss / df : 0;
  const double k = 2;  // pseudo-degrees of freedom of the pooled variance
  std::vector<double> out;
  for (const auto& o : observed) {
    double own_df = std::max(0, o.n - 1);
    double s2 = df > 0 ? (own_df * o.var + k * pooled) / (own_df + k) : o.var;
    out.push_back(o.n > 0 ? s2 / o.n : 0);
  }
  return out;
}

Result<json> ProposeWithModels(const SweepSpec& space, json point, const SweepHistory& history,
                               boost::random::mt19937_64& rng) {
  std::vector<const SweepParam*> bayes;
  for (const auto& p : space.params) {
    if (p.grid) continue;
    if (p.model == SweepParam::Model::kBayes) bayes.push_back(&p);
  }
  if (!bayes.empty()) {
    ASSIGN_OR_RETURN(point, ProposeBayes(bayes, std::move(point), history, rng));
  }
  for (const auto& p : space.params) {
    if (p.grid || p.model != SweepParam::Model::kTpe) continue;
    point[p.name] = ProposeTpe(p, history, rng);
  }
  return point;
}

std::vector<std::size_t> PointsNeedingSeeds(const std::vector<PointEstimate>& points,
                                            bool maximise, int max_seeds, double z) {
  // Work in "larger is better" terms.
  auto lcb = [&](const PointEstimate& p) {
    return (maximise ? p.mean : -p.mean) - z * p.se;
  };
  auto ucb = [&](const PointEstimate& p) {
    return (maximise ? p.mean : -p.mean) + z * p.se;
  };
  std::optional<std::size_t> leader;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (points[i].n == 0) continue;
    if (!leader || lcb(points[i]) > lcb(points[*leader])) leader = i;
  }
  std::vector<std::size_t> out;
  if (!leader) return out;
  const double bar = lcb(points[*leader]);
  bool contested = false;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i == *leader || points[i].n == 0) continue;
    if (ucb(points[i]) >= bar) contested = true;
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (p.n == 0 || p.active || p.n >= max_seeds) continue;
    bool could_win = i == *leader ? contested : ucb(p) >= bar;
    if (could_win) out.push_back(i);
  }
  return out;
}

}  // namespace trainq
