#include "agent/results/sweep.h"

#include <algorithm>
#include <boost/random/mersenne_twister.hpp>
#include <boost/random/uniform_int_distribution.hpp>
#include <boost/random/uniform_real_distribution.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/strings.h"
#include "stats/summary.h"

namespace trainq {

using nlohmann::json;

namespace {

// One generator per point, seeded by (sweep seed, point index) through a
// SplitMix64 mix, so that point k is the same however the points are asked for.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

json Numeric(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<std::int64_t>(v);
  return v;
}

}  // namespace

std::string ValueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == std::floor(d) && std::fabs(d) < 1e15) {
      return std::to_string(static_cast<std::int64_t>(d));
    }
  }
  return v.dump();
}

Result<std::vector<json>> SuggestPoints(const SweepSpec& space, const std::vector<json>& existing,
                                        int count, std::uint64_t seed) {
  std::vector<json> out;
  const std::int64_t grid = space.GridSize();
  for (int i = 0; i < count; ++i) {
    const std::uint64_t k = existing.size() + static_cast<std::uint64_t>(i);
    json point = json::object();
    bool is_explicit = k < space.points.size();
    if (is_explicit) point = space.points[k];
    boost::random::mt19937_64 rng(Mix(Mix(seed) ^ k));
    // Grid: combination (k - explicit) mod grid size, first grid parameter slowest.
    std::int64_t combo = is_explicit ? 0
                                     : static_cast<std::int64_t>(k - space.points.size()) % grid;
    std::int64_t stride = grid;
    std::map<std::string, double> numbers;
    for (const auto& p : space.params) {
      if (p.kind == ParamKind::kExpr) continue;
      json v;
      if (is_explicit && point.contains(p.name)) {
        v = point[p.name];
      } else if (p.kind == ParamKind::kValue) {
        v = p.options[0];
      } else if (p.grid) {
        auto n = static_cast<std::int64_t>(p.options.size());
        stride /= n;
        v = p.options[static_cast<size_t>((combo / stride) % n)];
      } else {
        switch (p.kind) {
          case ParamKind::kUniform:
            v = boost::random::uniform_real_distribution<double>(p.lo, p.hi)(rng);
            break;
          case ParamKind::kLogUniform:
            v = std::exp(boost::random::uniform_real_distribution<double>(std::log(p.lo),
                                                                          std::log(p.hi))(rng));
            v = std::clamp(v.get<double>(), p.lo, p.hi);
            break;
          case ParamKind::kInt: {
            auto lo = static_cast<std::int64_t>(p.lo), hi = static_cast<std::int64_t>(p.hi);
            if (p.log) {
              double x = std::exp(boost::random::uniform_real_distribution<double>(
                  std::log(p.lo), std::log(p.hi + 1.0))(rng));
              v = std::clamp(static_cast<std::int64_t>(std::floor(x)), lo, hi);
            } else {
              v = boost::random::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
            }
            break;
          }
          default: {  // choice / values drawn at random
            auto n = static_cast<std::int64_t>(p.options.size());
            v = p.options[static_cast<size_t>(
                boost::random::uniform_int_distribution<std::int64_t>(0, n - 1)(rng))];
          }
        }
      }
      point[p.name] = v;
      if (v.is_number()) numbers[p.name] = v.get<double>();
    }
    for (const auto& p : space.params) {
      if (p.kind != ParamKind::kExpr) continue;
      auto r = EvalExpr(p.expr, numbers);
      if (!r) return std::unexpected(r.error().Wrap("parameter " + p.name));
      numbers[p.name] = *r;
      point[p.name] = Numeric(*r);
    }
    // Keep the space's order for the record.
    json ordered = json::object();
    for (const auto& p : space.params) ordered[p.name] = point[p.name];
    out.push_back(std::move(ordered));
  }
  return out;
}

std::string PointExperimentName(const std::string& experiment, std::int64_t sweep_id, int idx) {
  return experiment + "@sweep" + std::to_string(sweep_id) + ".p" + std::to_string(idx);
}

Result<BatchSpec> PointBatch(const BatchSpec& base, const json& params, std::int64_t sweep_id,
                             int idx) {
  BatchSpec b = base;
  b.experiment = PointExperimentName(base.experiment, sweep_id, idx);
  json spec = json::parse(base.spec_json, nullptr, false);
  if (spec.is_discarded() || !spec.is_object()) spec = json::object();
  std::string command = spec.value("command", "");
  std::string trainer = spec.value("trainer", "");
  if (!command.empty()) {
    std::string out;
    for (size_t i = 0; i < command.size(); ++i) {
      if (command[i] == '{') {
        size_t j = command.find('}', i + 1);
        if (j != std::string::npos) {
          std::string name = command.substr(i + 1, j - i - 1);
          if (params.contains(name)) {
            out += ShellQuote(ValueText(params[name]));
            i = j;
            continue;
          }
          auto unknown = CommandPlaceholders(command.substr(i, j - i + 1));
          if (!unknown.empty()) {
            return Fail(ErrorKind::kInvalidArgument,
                        "experiment " + base.experiment + ": the command has a placeholder {" +
                            name + "} that is not a parameter of the sweep");
          }
        }
      }
      out += command[i];
    }
    b.command = out;
  } else {
    for (const auto& [name, v] : params.items()) {
      b.command += " --set " + ShellQuote(name + "=" + ValueText(v));
    }
  }
  // A point is its own batch: not fused with plain trainer runs (that would
  // drop the --set values), no adaptive rounds, no baseline at the parent.
  if (!trainer.empty()) {
    spec.erase("trainer");
    spec["sweep_trainer"] = trainer;
  }
  spec.erase("adaptive");
  spec["baseline"] = "off";
  spec["sweep"] = {{"id", sweep_id}, {"point", idx}, {"params", params}};
  b.spec_json = spec.dump();
  b.reason = "sweep " + std::to_string(sweep_id) + " point " + std::to_string(idx);
  return b;
}

json BatchSpecJson(const BatchSpec& b) {
  return {{"experiment", b.experiment},   {"command", b.command},
          {"metric_name", b.metric_name}, {"metric_goal", b.metric_goal},
          {"metric_regex", b.metric_regex}, {"repeats", b.repeats},
          {"seed_start", b.seed_start},   {"gpus", b.gpus},
          {"timeout_s", b.timeout_s},     {"max_attempts", b.max_attempts},
          {"reason", b.reason},           {"spec_json", b.spec_json},
          {"pool", b.pool}};
}

Result<BatchSpec> BatchSpecFromJson(const json& j) {
  try {
    BatchSpec b;
    b.experiment = j.at("experiment").get<std::string>();
    b.command = j.at("command").get<std::string>();
    b.metric_name = j.at("metric_name").get<std::string>();
    b.metric_goal = j.at("metric_goal").get<std::string>();
    b.metric_regex = j.at("metric_regex").get<std::string>();
    b.repeats = j.at("repeats").get<int>();
    b.seed_start = j.at("seed_start").get<std::int64_t>();
    b.gpus = j.at("gpus").get<int>();
    b.timeout_s = j.at("timeout_s").get<std::int64_t>();
    b.max_attempts = j.at("max_attempts").get<int>();
    b.reason = j.at("reason").get<std::string>();
    b.spec_json = j.at("spec_json").get<std::string>();
    b.pool = j.at("pool").get<std::string>();
    return b;
  } catch (const json::exception& e) {
    return Fail(ErrorKind::kInvalidArgument, std::string("stored sweep batch: ") + e.what());
  }
}

namespace {

Result<CommitInfo> CommitFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Fail(ErrorKind::kInvalidArgument, "stored sweep commit: bad JSON");
  CommitInfo c;
  c.sha = j.value("sha", "");
  c.parent_sha = j.value("parent_sha", "");
  c.message = j.value("message", "");
  c.author = j.value("author", "");
  c.committed_ms = j.value("committed_ms", TimeMs{0});
  return c;
}

}  // namespace

Result<int> StepSweep(Store& store, std::int64_t id, TimeMs now) {
  ASSIGN_OR_RETURN(auto row, store.GetSweep(id));
  if (!row) return Fail(ErrorKind::kNotFound, "no sweep " + std::to_string(id));
  if (row->state != "running") return 0;
  auto spec_j = json::parse(row->spec_json, nullptr, false);
  auto batch_j = json::parse(row->batch_json, nullptr, false);
  if (spec_j.is_discarded() || batch_j.is_discarded()) {
    return Fail(ErrorKind::kInvalidArgument, "sweep " + std::to_string(id) + ": bad stored JSON");
  }
  ASSIGN_OR_RETURN(auto spec, SweepSpec::FromJson(spec_j));
  ASSIGN_OR_RETURN(auto base, BatchSpecFromJson(batch_j));
  ASSIGN_OR_RETURN(auto commit, CommitFromJson(row->commit_json));
  ASSIGN_OR_RETURN(auto points, store.SweepPoints(id));

  auto submit = [&](const Store::SweepPointRow& p) -> Status {
    json params = json::parse(p.params_json, nullptr, false);
    ASSIGN_OR_RETURN(auto b, PointBatch(base, params, id, p.idx));
    ASSIGN_OR_RETURN(auto res, store.Submit(row->repo_url, commit, {b}, now));
    return store.SetSweepPointBatch(id, p.idx, res.at(0).batch_id);
  };

  int in_flight = 0;
  std::vector<json> existing;
  for (const auto& p : points) {
    existing.push_back(json::parse(p.params_json, nullptr, false));
    if (!p.batch_id) {
      // Written before a kill: its batch may or may not exist; Submit is
      // idempotent per (commit, experiment), so this never makes a second.
      TRY(submit(p));
      ++in_flight;
      continue;
    }
    ASSIGN_OR_RETURN(auto b, store.Batch(*p.batch_id));
    if (b && b->active()) ++in_flight;
  }
  int budget = spec.PointBudget();
  int want = std::min(spec.parallel - in_flight, budget - static_cast<int>(points.size()));
  int added = 0;
  if (want > 0) {
    ASSIGN_OR_RETURN(auto fresh, SuggestPoints(spec, existing, want, spec.seed));
    for (const auto& params : fresh) {
      Store::SweepPointRow p;
      p.sweep_id = id;
      p.idx = static_cast<int>(points.size()) + added;
      p.params_json = params.dump();
      ASSIGN_OR_RETURN(auto stored, store.AddSweepPoint(p, now));
      if (!stored.batch_id) TRY(submit(stored));
      ++added;
    }
  }
  if (added == 0 && in_flight == 0 && static_cast<int>(points.size()) >= budget) {
    TRY(store.SetSweepState(id, "done", now));
  }
  return added;
}

Result<int> StepSweeps(Store& store, TimeMs now) {
  ASSIGN_OR_RETURN(auto running, store.Sweeps("running"));
  int added = 0;
  for (const auto& s : running) {
    ASSIGN_OR_RETURN(int n, StepSweep(store, s.id, now));
    added += n;
  }
  return added;
}

Result<SweepView> LoadSweepView(Store& store, std::int64_t id) {
  ASSIGN_OR_RETURN(auto row, store.GetSweep(id));
  if (!row) return Fail(ErrorKind::kNotFound, "no sweep " + std::to_string(id));
  SweepView v;
  v.row = *row;
  ASSIGN_OR_RETURN(v.spec, SweepSpec::FromJson(json::parse(row->spec_json, nullptr, false)));
  ASSIGN_OR_RETURN(auto base, BatchSpecFromJson(json::parse(row->batch_json, nullptr, false)));
  v.goal = base.metric_goal;
  v.metric = base.metric_name;
  v.budget_points = v.spec.PointBudget();
  v.runs_total = v.budget_points * v.spec.repeats;
  ASSIGN_OR_RETURN(auto points, store.SweepPoints(id));
  for (const auto& p : points) {
    PointResult r;
    r.idx = p.idx;
    r.params = json::parse(p.params_json, nullptr, false);
    r.state = "queued";
    if (p.batch_id) {
      ASSIGN_OR_RETURN(r.batch, store.Batch(*p.batch_id));
    }
    if (r.batch) {
      const auto& b = *r.batch;
      r.summary = stats::Summarize(b.values);
      for (auto s : {RunState::kSucceeded, RunState::kDead, RunState::kCancelled}) {
        v.runs_done += static_cast<int>(b.count(s));
      }
      if (b.active()) {
        r.state = b.count(RunState::kRunning) + b.count(RunState::kLeased) > 0 ? "running"
                                                                                : "queued";
      } else {
        r.state = b.values.empty() ? "failed" : "done";
      }
      if (r.summary.n >= 2) {
        auto ci = stats::MeanInterval(r.summary, 0.90);  // one-sided 95 % bounds
        if (ci) r.bound = v.goal == "min" ? ci->hi : ci->lo;
      }
    }
    v.points.push_back(std::move(r));
  }
  return v;
}

SweepBest PickBest(const SweepView& v) {
  SweepBest best;
  std::vector<const PointResult*> eligible;
  for (const auto& p : v.points) {
    if (p.bound && p.batch) eligible.push_back(&p);
  }
  best.eligible = static_cast<int>(eligible.size());
  bool max = v.goal != "min";
  std::stable_sort(eligible.begin(), eligible.end(),
                   [max](const PointResult* a, const PointResult* b) {
                     return max ? *a->bound > *b->bound : *a->bound < *b->bound;
                   });
  if (!eligible.empty()) best.winner = eligible[0];
  if (eligible.size() > 1) {
    best.runner_up = eligible[1];
    best.vs_runner_up = CompareBatches(*best.winner->batch, *best.runner_up->batch);
  }
  return best;
}

}  // namespace trainq
