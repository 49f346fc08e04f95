// The objectives of bench_sweep: a run = one seed at one point, maximised.
//
//   branin     negated Branin on [-5, 10] x [0, 15], max -0.397887 (3 optima)
//   hartmann6  negated Hartmann-6 on [0, 1]^6, max 3.32237
//   digits     a tabulated grid of real trainq-train runs (bench/data/digits_grid.csv):
//              90 points (lr x width x batch size) x 10 seeds of test accuracy
//
// Synthetic noise (research/sweeps.md, section 4): a run of point x with seed
// s in sweep r is
//   y = f(x) + sigma(x) (0.5 z[r, s] + 0.866 z[r, s, x])
// z[r, s] a seed effect shared by every point (what paired seeds cancel),
// z[r, s, x] point noise keyed by x rounded to 1e-9, so every strategy sees
// the same value for the same (x, seed). sigma(x) = sigma0 (0.5 + 1.5 g(x)),
// g rising from 0 to 1 toward part of the space, so that lucky draws there
// tempt single-run picks: Branin g = logistic(x1 - 2.5) (two of the three
// optima are in the noisy half), Hartmann-6 g = logistic((x2 - 0.5) / 0.1)
// (noisy toward its second-best mode, 3.2032 at x2 = 0.88; quiet at the
// global one, x2 = 0.15).
//
// The table: the "true" value of a grid point is its 10-seed mean; seed s of
// sweep r reads tabulated seed perm_r(s) (a per-sweep permutation of 1..10,
// so a seed is the same seed at every point: its effect is shared, as in real
// runs), and noise level k scales the deviation: y = mean + k (acc - mean).
// Points are proposed on continuous ranges and snapped to the nearest grid
// value in log space.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/repo/sweep_spec.h"

namespace trainq::bench {

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // Range parameters (kUniform / kLogUniform / kInt); strategies set `model`.
  virtual std::vector<SweepParam> params() const = 0;
  virtual double optimum() const = 0;  // the true maximum
  virtual double True(const nlohmann::json& p) const = 0;
  // One run of `p` with seed `seed` (1-based) in sweep `sweep` at noise level `noise`.
  virtual double Run(const nlohmann::json& p, int seed, std::uint64_t sweep,
                     double noise) const = 0;
  // The true standard deviation of one run of `p` (for 1-seed claims).
  virtual double RunSd(const nlohmann::json& p, double noise) const = 0;
  // The point actually evaluated (the nearest grid point for the table).
  virtual nlohmann::json Snap(const nlohmann::json& p) const { return p; }
  virtual int budget() const = 0;          // runs per sweep
  virtual int initial() const = 0;         // random points before a model
  virtual std::vector<double> noise_levels() const = 0;
  virtual int max_seeds() const { return 1000; }
};

double Branin(double x1, double x2);
double Hartmann6(const std::array<double, 6>& x);  // the usual (negative) form, min -3.32237

std::uint64_t Mix(std::uint64_t x);
double Normal(std::uint64_t key);

class SyntheticObjective : public Objective {
 public:
  double Run(const nlohmann::json& p, int seed, std::uint64_t sweep, double noise) const override;
  double RunSd(const nlohmann::json& p, double noise) const override;

 protected:
  virtual double Shape(const nlohmann::json& p) const = 0;  // g(x) in [0, 1]
};

class BraninObjective : public SyntheticObjective {
 public:
  std::string name() const override { return "branin"; }
  std::vector<SweepParam> params() const override;
  double optimum() const override { return -0.39788735772973816; }
  double True(const nlohmann::json& p) const override;
  int budget() const override { return 100; }
  int initial() const override { return 10; }
  std::vector<double> noise_levels() const override { return {0, 0.5, 2}; }

 protected:
  double Shape(const nlohmann::json& p) const override;
};

class Hartmann6Objective : public SyntheticObjective {
 public:
  std::string name() const override { return "hartmann6"; }
  std::vector<SweepParam> params() const override;
  double optimum() const override { return 3.322368011415515; }
  double True(const nlohmann::json& p) const override;
  int budget() const override;
  int initial() const override { return 12; }
  std::vector<double> noise_levels() const override { return {0, 0.05, 0.2}; }

 protected:
  double Shape(const nlohmann::json& p) const override;
};

class DigitsTable : public Objective {
 public:
  // Reads lr,width,batch_size,seed,accuracy rows; throws std::runtime_error
  // naming the file and line on anything unexpected.
  explicit DigitsTable(const std::string& csv_path);
  std::string name() const override { return "digits"; }
  std::vector<SweepParam> params() const override;
  double optimum() const override { return best_; }
  double True(const nlohmann::json& p) const override;
  double Run(const nlohmann::json& p, int seed, std::uint64_t sweep, double noise) const override;
  double RunSd(const nlohmann::json& p, double noise) const override;
  nlohmann::json Snap(const nlohmann::json& p) const override;
  int budget() const override { return 60; }
  int initial() const override { return 10; }
  std::vector<double> noise_levels() const override { return {0, 1, 2}; }
  int max_seeds() const override { return 10; }
  std::size_t points() const { return cells_.size(); }

 private:
  struct Cell {
    std::vector<double> acc;  // by seed 1..10
    double mean = 0, sd = 0;
  };
  const Cell& At(const nlohmann::json& p) const;
  std::vector<double> lrs_, widths_, batches_;
  std::map<std::array<int, 3>, Cell> cells_;
  double best_ = 0;
};

}  // namespace trainq::bench
