// `sweep:` on an experiment in trainq.yaml: the search space of a
// hyperparameter sweep, its budget and how many points run at once.
//
//   sweep:
//     budget: {points: 20}          # or {runs: 60}
//     parallel: 4                   # points in flight
//     repeats: 3                    # seeds s..s+2 for every point (points pair)
//     # or repeats: {min: 3, max: 10, step: 2}: more seeds only for points
//     # that could still be the best (agent/results/sweep.h, NeedsMoreSeeds)
//     confirm: 3                    # fresh seeds for the winner once the search
//                                   # ends (default: repeats; 0: none; fixed
//                                   # repeats only): its claimed value
//     seed: 7                       # the sweep's own RNG seed
//     strategy: bayes               # default for ranges: random | bayes (GP) | tpe
//     initial: 6                    # random points before a model proposes any
//     parameters:
//       lr:     {log_uniform: [1.0e-4, 0.3]}
//       wd:     {uniform: [0, 0.1]}
//       width:  {int: [16, 512], log: true}
//       opt:    {choice: [sgd, adam]}
//       bs:     {values: [32, 64]}          # grid (strategy: grid by default)
//       epochs: {value: 10}
//       min_lr: {expr: "lr / 100"}          # + - * / ( ) min max log exp int
//     points:
//       - {lr: 0.001, wd: 0, width: 64, opt: adam, bs: 32}
//
// Every error names the file, the line and the key path, e.g.
//   trainq.yaml:14: experiments.mlp.sweep.parameters.lr.log_uniform: bounds must be > 0
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq {

enum class ParamKind { kUniform, kLogUniform, kInt, kChoice, kValues, kValue, kExpr };
std::string_view ParamKindName(ParamKind k);

struct SweepParam {
  std::string name;
  ParamKind kind = ParamKind::kUniform;
  double lo = 0, hi = 0;              // uniform, log_uniform, int
  bool log = false;                   // int: drawn log-uniformly
  std::vector<nlohmann::json> options;  // choice, values; value: one entry
  std::string expr;                   // derived
  bool grid = false;                  // values/choice: cycled through (strategy: grid)
  // Who proposes the value when it is neither fixed nor grid: drawn at
  // random, a Gaussian process (ranges only) or TPE.
  enum class Model { kRandom, kBayes, kTpe } model = Model::kRandom;
};
std::string_view ModelName(SweepParam::Model m);

struct SweepSpec {
  std::vector<SweepParam> params;        // in file order
  std::vector<nlohmann::json> points;    // explicit points, tried first
  std::optional<int> budget_points;
  std::optional<int> budget_runs;
  int parallel = 4;
  int repeats = 3;       // seeds every point starts with
  int repeats_max = 0;   // adaptive: up to this many seeds (0: fixed at `repeats`;
                         // -1: the experiment's repeats, until ResolveRepeats)
  int repeats_step = 0;  // adaptive: seeds added at a time (0: `repeats`)
  int initial = 0;       // points drawn at random before a model proposes (0: auto)
  // A point whose every run died: left out of the models (false), or shown
  // to them as the worst mean measured so far (true, `failed_points: worst`),
  // so that they steer away from where runs crash. Never a winner either way.
  bool failed_worst = false;
  // Fresh seeds for the winner once the search has ended: the search's seeds
  // picked it among many points, so their mean reads high (the winner's
  // curse); the mean of seeds nobody selected on is the value to claim. -1:
  // the default (repeats, or 0 with adaptive repeats, which already give the
  // leaders more seeds, or when fewer than 3 points fit the budget).
  int confirm = -1;
  std::uint64_t seed = 1;

  bool adaptive() const { return repeats_max > repeats; }
  void ResolveRepeats(int experiment_repeats);
  int step() const { return repeats_step > 0 ? repeats_step : repeats; }
  // Seeds the winner gets after the search (`confirm`, resolved; 0 with
  // adaptive repeats).
  int ConfirmSeeds() const;
  // Whether the runner-up gets the same fresh seeds as the pick (a paired
  // confirmation, issue 40): whenever seeds are confirmed and a runs budget,
  // if any, holds two points and both confirmations.
  bool PairedConfirm() const {
    return ConfirmSeeds() > 0 && (!budget_runs || *budget_runs >= 2 * (repeats + ConfirmSeeds()));
  }
  // The runs the confirmation takes: `confirm`, twice when paired.
  int ConfirmRuns() const { return ConfirmSeeds() * (PairedConfirm() ? 2 : 1); }
  // Whether a point's batch of `batch_repeats` runs is the search's pick
  // being confirmed, in a sweep stored before schema 22 marked the pick
  // (Sweeps::SweepPointRow::role): with fixed repeats, the only batch grown
  // past `repeats`.
  bool IsConfirmBatch(int batch_repeats) const {
    return ConfirmSeeds() > 0 && batch_repeats > repeats;
  }
  // Random points before the model: `initial`, or max(4, 2 x model parameters).
  int InitialPoints() const;
  bool HasModel() const;

  const SweepParam* Find(std::string_view name) const;
  // Number of grid combinations (1 when no grid parameter).
  std::int64_t GridSize() const;
  // How many points the sweep runs: budget points, (runs - confirmation) /
  // repeats rounded up,
  // or (without a budget, all parameters grid/value/expr) explicit + grid.
  int PointBudget() const;
  nlohmann::json ToJson() const;
  static Result<SweepSpec> FromJson(const nlohmann::json& j);
};

// Parses the `sweep:` mapping `node` at key path `path` (for messages) of `file`.
Result<SweepSpec> ParseSweep(const YAML::Node& node, const std::string& path,
                             std::string_view file);

// The `sweep:` of experiment `experiment` in the text of a trainq.yaml.
// kNotFound when the experiment has none.
Result<SweepSpec> LoadSweep(std::string_view text, std::string_view file,
                            const std::string& experiment);

// Derived parameters: a small safe expression language over numbers and
// parameter names with + - * / unary minus, parentheses and the functions
// min(a, b), max(a, b), log(x), exp(x), int(x) (truncation). No shell, no I/O.
// Names are looked up in `vars`; an unknown name is an error.
Result<double> EvalExpr(std::string_view expr, const std::map<std::string, double>& vars);
// The parameter names an expression reads (checked at parse time).
Result<std::vector<std::string>> ExprNames(std::string_view expr);

struct Experiment;
// Checks that the sweep's values reach the experiment's runs: for a `command:`
// every `{name}` placeholder is a parameter (or a run-time one) and every drawn
// parameter appears as `{name}`; a `trainer:` spec gets them as `--set name=value`.
Status CheckSweepTarget(const SweepSpec& spec, const Experiment& e, const YAML::Node& node,
                        const std::string& path, std::string_view file);

// The `{name}` placeholders (core/placeholders.h) of a command that are not
// run-time ones ({seed}, {repeat}, {output_dir}, {run_id}).
std::vector<std::string> CommandPlaceholders(std::string_view command);

// A value as it is written into a command or a --set.
std::string ValueText(const nlohmann::json& v);

// `command` with each `{name}` that is a key of `params` replaced by its
// shell-quoted value; run-time placeholders stay for the executor. A
// placeholder that is neither is an error naming `experiment`.
Result<std::string> FillSweepCommand(std::string_view command, const nlohmann::json& params,
                                     std::string_view experiment);

// An explicit point with the fixed (`value`) and derived (`expr`) parameters
// added, in the space's order.
Result<nlohmann::json> CompletePoint(const SweepSpec& space, const nlohmann::json& given);

}  // namespace trainq
