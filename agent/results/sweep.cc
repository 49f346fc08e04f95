#include "agent/results/sweep.h"

#include <algorithm>
#include <boost/random/mersenne_twister.hpp>
#include <boost/random/uniform_int_distribution.hpp>
#include <boost/random/uniform_real_distribution.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <yaml-cpp/yaml.h>

#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sweeps.h"
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

}  // namespace

Result<std::vector<json>> SuggestPoints(const SweepSpec& space, const std::vector<json>& existing,
                                        int count, std::uint64_t seed,
                                        const SweepHistory& history) {
  std::vector<json> out;
  const std::int64_t grid = space.GridSize();
  // Points suggested in this call are in flight for the ones after them.
  SweepHistory h = history;
  for (int i = 0; i < count; ++i) {
    const std::uint64_t k = existing.size() + static_cast<std::uint64_t>(i);
    json point = json::object();
    bool is_explicit = k < space.points.size();
    if (is_explicit) {
      ASSIGN_OR_RETURN(auto complete, CompletePoint(space, space.points[k]));
      h.pending.push_back(complete);
      out.push_back(std::move(complete));
      continue;
    }
    boost::random::mt19937_64 rng(Mix(Mix(seed) ^ k));
    // Grid: combination (k - explicit) mod grid size, first grid parameter slowest.
    std::int64_t combo = static_cast<std::int64_t>(k - space.points.size()) % grid;
    std::int64_t stride = grid;
    for (const auto& p : space.params) {
      if (p.kind == ParamKind::kExpr) continue;
      json v;
      if (p.kind == ParamKind::kValue) {
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
    }
    // Past the initial random points, the models propose their parameters
    // (the random draws above stay as a fallback while too little is known).
    const std::uint64_t first_model = space.points.size() + static_cast<std::uint64_t>(space.InitialPoints());
    if (space.HasModel() && k >= first_model && h.observed.size() >= 2) {
      boost::random::mt19937_64 model_rng(Mix(Mix(seed) ^ k) ^ 0x6d6f64656cULL);
      ASSIGN_OR_RETURN(point, ProposeWithModels(space, std::move(point), h, model_rng));
    }
    ASSIGN_OR_RETURN(auto complete, CompletePoint(space, point));
    h.pending.push_back(complete);
    out.push_back(std::move(complete));
  }
  return out;
}

bool IsSweepPointExperiment(std::string_view name) {
  auto at = name.rfind("@sweep");
  if (at == std::string_view::npos) return false;
  auto rest = name.substr(at + 6);
  auto dot = rest.find(".p");
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return dot != std::string_view::npos && digits(rest.substr(0, dot)) && digits(rest.substr(dot + 2));
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
    ASSIGN_OR_RETURN(b.command, FillSweepCommand(command, params, base.experiment));
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

namespace {

PointObservation Observe(const json& params, const std::vector<double>& values) {
  PointObservation o;
  o.params = params;
  auto s = stats::Summarize(values);
  o.n = static_cast<int>(s.n);
  o.mean = s.mean;
  o.var = s.sd * s.sd;
  return o;
}

}  // namespace

Result<int> StepSweep(Store& store, std::int64_t id, TimeMs now) {
  ASSIGN_OR_RETURN(auto row, store.sweeps().GetSweep(id));
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
  ASSIGN_OR_RETURN(auto points, store.sweeps().SweepPoints(id));
  const bool maximise = base.metric_goal != "min";

  auto submit = [&](const Sweeps::SweepPointRow& p) -> Status {
    json params = json::parse(p.params_json, nullptr, false);
    ASSIGN_OR_RETURN(auto b, PointBatch(base, params, id, p.idx));
    ASSIGN_OR_RETURN(auto res, store.runs().Submit(row->repo_url, commit, {b}, now));
    return store.sweeps().SetSweepPointBatch(id, p.idx, res.at(0).batch_id);
  };

  // Everything below is derived from the store, so a restarted serve makes
  // the same decisions; Submit and ExtendBatch are idempotent.
  int in_flight = 0;
  std::int64_t runs_used = 0;
  std::vector<json> existing;
  SweepHistory history;
  history.maximise = maximise;
  struct Known {
    std::optional<std::int64_t> batch_id;
    int repeats = 0;
    std::optional<std::size_t> observed;  // index into history.observed
    bool active = false;
  };
  std::vector<Known> known;
  std::vector<json> failed;
  for (const auto& p : points) {
    json params = json::parse(p.params_json, nullptr, false);
    existing.push_back(params);
    Known k;
    if (!p.batch_id) {
      // Written before a kill: its batch may or may not exist; Submit is
      // idempotent per (commit, experiment), so this never makes a second.
      TRY(submit(p));
      ++in_flight;
      runs_used += spec.repeats;
      history.pending.push_back(params);
      known.push_back(k);
      continue;
    }
    ASSIGN_OR_RETURN(auto b, store.runs().Batch(*p.batch_id));
    k.batch_id = p.batch_id;
    k.repeats = b ? b->repeats : spec.repeats;
    runs_used += k.repeats;
    k.active = b && b->active();
    if (k.active) ++in_flight;
    if (b && !b->values.empty()) {
      k.observed = history.observed.size();
      history.observed.push_back(Observe(params, b->values));
    } else if (k.active) {
      history.pending.push_back(params);
    } else if (b && spec.failed_worst) {
      failed.push_back(params);  // every run died
    }
    known.push_back(k);
  }
  // `failed_points: worst`: the models see a dead point as the worst mean so
  // far (one seed), so they steer away from where runs crash.
  if (!failed.empty() && !history.observed.empty()) {
    double worst = history.observed.front().mean;
    for (const auto& o : history.observed) {
      worst = maximise ? std::min(worst, o.mean) : std::max(worst, o.mean);
    }
    for (auto& params : failed) history.observed.push_back(Observe(params, {worst}));
  }
  // `confirm`: once the search has ended, its pick gets fresh seeds. With
  // fixed repeats that point is the one batch grown past `repeats`, so the
  // store says whether it happened; its runs are kept out of the search's
  // runs budget until then.
  // Since schema 22 the pick is marked (role "confirm") together with the
  // runner-up that gets the same fresh seeds ("confirm_baseline"); a sweep
  // confirmed before that is known by its one batch grown past `repeats`.
  const int confirm = spec.ConfirmSeeds();
  const bool marked = std::any_of(points.begin(), points.end(), [](const Sweeps::SweepPointRow& p) {
    return p.role == "confirm";
  });
  bool confirming = marked;
  for (const auto& k : known) confirming = confirming || spec.IsConfirmBatch(k.repeats);
  auto runs_left = [&]() -> std::int64_t {
    return spec.budget_runs ? *spec.budget_runs - runs_used - (confirming ? 0 : spec.ConfirmRuns())
                            : std::numeric_limits<std::int64_t>::max();
  };
  int extended = 0;
  // A step cut between marking the confirmation and growing its batches
  // grows them now (ExtendBatch is idempotent).
  if (marked) {
    for (std::size_t i = 0; i < points.size() && i < known.size(); ++i) {
      if (points[i].role.empty() || !known[i].batch_id ||
          known[i].repeats >= spec.repeats + confirm) {
        continue;
      }
      ASSIGN_OR_RETURN(int n,
                       store.runs().ExtendBatch(*known[i].batch_id, spec.repeats + confirm, now));
      if (n > 0) {
        ++in_flight;
        ++extended;
      }
    }
  }

  // Adaptive repeats: more seeds for finished points that could still win.
  if (spec.adaptive()) {
    auto var = VarianceOfMeans(history.observed);
    std::vector<PointEstimate> est(known.size());
    for (std::size_t i = 0; i < known.size(); ++i) {
      if (!known[i].observed) continue;
      const auto& o = history.observed[*known[i].observed];
      est[i] = {o.n, o.mean, std::sqrt(var[*known[i].observed]), known[i].active};
    }
    for (auto i : PointsNeedingSeeds(est, maximise, spec.repeats_max)) {
      if (in_flight >= spec.parallel) break;
      int target = std::min(known[i].repeats + spec.step(), spec.repeats_max);
      int add = target - known[i].repeats;
      if (add <= 0 || add > runs_left()) continue;
      ASSIGN_OR_RETURN(int n, store.runs().ExtendBatch(*known[i].batch_id, target, now));
      (void)n;
      runs_used += add;
      ++in_flight;
      ++extended;
    }
  }

  int budget = spec.PointBudget();
  std::int64_t want = std::min(spec.parallel - in_flight, budget - static_cast<int>(points.size()));
  if (confirming) want = 0;
  want = std::min<std::int64_t>(want, runs_left() / spec.repeats);
  int added = 0;
  if (want > 0) {
    ASSIGN_OR_RETURN(auto fresh,
                     SuggestPoints(spec, existing, static_cast<int>(want), spec.seed, history));
    for (const auto& params : fresh) {
      Sweeps::SweepPointRow p;
      p.sweep_id = id;
      p.idx = static_cast<int>(points.size()) + added;
      p.params_json = params.dump();
      ASSIGN_OR_RETURN(auto stored, store.sweeps().AddSweepPoint(p, now));
      if (!stored.batch_id) TRY(submit(stored));
      ++added;
    }
  }
  if (added == 0 && extended == 0 && in_flight == 0) {
    if (confirm > 0 && !confirming) {
      // The search is over: its pick gets `confirm` fresh seeds.
      ASSIGN_OR_RETURN(auto view, LoadSweepView(store, id));
      auto best = PickBest(view);
      if (best.winner && best.winner->batch) {
        // Paired (issue 40): the runner-up gets the same fresh seeds, so
        // the pick is compared with it on seeds nobody selected on. Only
        // when both numbered their seeds from the same start and ran as
        // many (fixed repeats: always).
        const BatchProgress& w = *best.winner->batch;
        std::optional<int> pair;
        const BatchProgress* r = best.runner_up ? &*best.runner_up->batch : nullptr;
        if (spec.PairedConfirm() && r && r->seed_start == w.seed_start && r->repeats == w.repeats) {
          pair = best.runner_up->idx;
        }
        TRY(store.sweeps().SetConfirmRoles(id, best.winner->idx, pair));
        ASSIGN_OR_RETURN(int n, store.runs().ExtendBatch(w.id, w.repeats + confirm, now));
        if (pair) {
          ASSIGN_OR_RETURN(int m, store.runs().ExtendBatch(r->id, r->repeats + confirm, now));
          n += m;
        }
        if (n > 0) return 1;
      }
    }
    TRY(store.sweeps().SetSweepState(id, "done", now));
  }
  return added + extended;
}

Result<int> StepSweeps(Store& store, TimeMs now) {
  ASSIGN_OR_RETURN(auto running, store.sweeps().List("running"));
  int added = 0;
  for (const auto& s : running) {
    ASSIGN_OR_RETURN(int n, StepSweep(store, s.id, now));
    added += n;
  }
  return added;
}

Result<int> SweepDriver::Step(Store& store, TimeMs now) {
  ASSIGN_OR_RETURN(auto mark, store.sweeps().SweepActivity());
  if (mark == last_mark_ && now < next_full_ms_) return 0;
  ASSIGN_OR_RETURN(int n, StepSweeps(store, now));
  // What the pass itself changed (points queued, sweeps done) is not news.
  ASSIGN_OR_RETURN(last_mark_, store.sweeps().SweepActivity());
  next_full_ms_ = now + kFullPassMs;
  return n;
}

Result<SweepView> LoadSweepView(Store& store, std::int64_t id) {
  ASSIGN_OR_RETURN(auto row, store.sweeps().GetSweep(id));
  if (!row) return Fail(ErrorKind::kNotFound, "no sweep " + std::to_string(id));
  SweepView v;
  v.row = *row;
  ASSIGN_OR_RETURN(v.spec, SweepSpec::FromJson(json::parse(row->spec_json, nullptr, false)));
  ASSIGN_OR_RETURN(auto base, BatchSpecFromJson(json::parse(row->batch_json, nullptr, false)));
  v.goal = base.metric_goal;
  v.metric = base.metric_name;
  v.budget_points = v.spec.PointBudget();
  v.runs_total = v.spec.budget_runs ? *v.spec.budget_runs
                                    : v.budget_points * v.spec.repeats + v.spec.ConfirmRuns();
  ASSIGN_OR_RETURN(auto points, store.sweeps().SweepPoints(id));
  const bool marked = std::any_of(points.begin(), points.end(),
                                  [](const Sweeps::SweepPointRow& p) { return !p.role.empty(); });
  for (const auto& p : points) {
    PointResult r;
    r.idx = p.idx;
    r.params = json::parse(p.params_json, nullptr, false);
    r.state = "queued";
    if (p.batch_id) {
      ASSIGN_OR_RETURN(r.batch, store.runs().Batch(*p.batch_id));
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
      r.confirming = p.role == "confirm" || (!marked && v.spec.IsConfirmBatch(b.repeats));
      r.confirm_baseline = p.role == "confirm_baseline";
      if (r.confirming || r.confirm_baseline) {
        std::vector<double> search, fresh;
        for (std::size_t i = 0; i < b.values.size() && i < b.seeds.size(); ++i) {
          (b.seeds[i] < b.seed_start + v.spec.repeats ? search : fresh).push_back(b.values[i]);
        }
        r.search = stats::Summarize(search);
        r.confirmed = stats::Summarize(fresh);
      }
    }
    v.points.push_back(std::move(r));
  }
  return v;
}

namespace {

// The batch with only its seeds after the first `repeats` (the
// confirmation's fresh seeds).
BatchProgress FreshSeedsOf(const BatchProgress& b, int repeats) {
  BatchProgress f = b;
  f.values.clear();
  f.seeds.clear();
  for (std::size_t i = 0; i < b.values.size() && i < b.seeds.size(); ++i) {
    if (b.seeds[i] < b.seed_start + repeats) continue;
    f.values.push_back(b.values[i]);
    f.seeds.push_back(b.seeds[i]);
  }
  return f;
}

}  // namespace

SweepBest PickBest(const SweepView& v) {
  SweepBest best;
  std::vector<const PointResult*> eligible;
  for (const auto& p : v.points) {
    if (p.bound && p.batch) eligible.push_back(&p);
  }
  best.eligible = static_cast<int>(eligible.size());
  bool max = v.goal != "min";
  // The point being confirmed was the pick when the search ended; it stays
  // the winner whatever its fresh seeds say (they are its claimed value).
  // The runner-up that got the same fresh seeds stays the runner-up.
  std::stable_sort(eligible.begin(), eligible.end(),
                   [max](const PointResult* a, const PointResult* b) {
                     if (a->confirming != b->confirming) return a->confirming;
                     if (a->confirm_baseline != b->confirm_baseline) return a->confirm_baseline;
                     return max ? *a->bound > *b->bound : *a->bound < *b->bound;
                   });
  if (!eligible.empty()) best.winner = eligible[0];
  if (eligible.size() > 1) {
    best.runner_up = eligible[1];
    const PointResult& w = *best.winner;
    const PointResult& r = *best.runner_up;
    if (w.confirming && r.confirm_baseline && w.confirmed.n > 0 && r.confirmed.n > 0) {
      // A paired confirmation: the two compared on the fresh seeds alone,
      // which neither was picked on (the search's seeds read the pick high).
      best.on_fresh_seeds = true;
      best.vs_runner_up = CompareBatches(FreshSeedsOf(*w.batch, v.spec.repeats),
                                         FreshSeedsOf(*r.batch, v.spec.repeats));
    } else {
      best.vs_runner_up = CompareBatches(*w.batch, *r.batch);
    }
  }
  return best;
}

}  // namespace trainq

namespace trainq {

namespace {
std::string Sig4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
}  // namespace

namespace {

YAML::Node YamlValue(const json& v) {
  if (v.is_boolean()) return YAML::Node(v.get<bool>());
  if (v.is_number_integer()) return YAML::Node(v.get<std::int64_t>());
  if (v.is_number()) return YAML::Node(v.get<double>());
  if (v.is_string()) return YAML::Node(v.get<std::string>());
  YAML::Node n(v.is_array() ? YAML::NodeType::Sequence : YAML::NodeType::Map);
  for (const auto& [k, child] : v.items()) {
    if (v.is_array()) {
      n.push_back(YamlValue(child));
    } else {
      n[k] = YamlValue(child);
    }
  }
  return n;
}

}  // namespace

std::string WinnerPatch(const std::string& experiment, const json& spec, const json& params) {
  YAML::Emitter e;
  e.SetDoublePrecision(17);
  std::string trainer = spec.value("trainer", "");
  std::string note;
  if (!trainer.empty()) {
    json nested = json::object();
    for (const auto& [path, val] : params.items()) {
      json* at = &nested;
      for (const auto& part : Split(path, '.')) {
        if (!at->is_object()) *at = json::object();
        at = &(*at)[part];
      }
      *at = val;
    }
    e << YamlValue(nested);
    note = "# merge into " + trainer + " (the values the sweep gave as --set)\n";
  } else {
    auto filled = FillSweepCommand(spec.value("command", ""), params, experiment);
    if (!filled) return "# " + filled.error().message + "\n";
    YAML::Node root;
    root["experiments"][experiment]["command"] = *filled;
    e << root;
    note = "# in trainq.yaml: the experiment's command with the winning values "
           "(drop or keep its sweep: for the next search)\n";
  }
  return note + e.c_str() + "\n";
}

std::string ShortParamsText(const nlohmann::json& params) {
  std::string out;
  for (const auto& [k, v] : params.items()) {
    std::string text = v.is_number_float() ? Sig4(v.get<double>()) : ValueText(v);
    out += (out.empty() ? "" : " ") + k + "=" + text;
  }
  return out;
}

namespace {
std::string MeanText(const stats::Summary& s) {
  if (s.n == 0) return "-";
  std::string t = Sig4(s.mean);
  if (s.ci95) t += " [" + Sig4(s.ci95->lo) + ", " + Sig4(s.ci95->hi) + "]";
  return t;
}
}  // namespace

std::string PointMeanText(const PointResult& p) { return MeanText(p.summary); }

std::vector<std::string> WinnerLines(const SweepView& v, const SweepBest& best) {
  std::vector<std::string> lines;
  if (!best.winner) return lines;
  const auto& w = *best.winner;
  lines.push_back("point " + std::to_string(w.idx) + ": " + ShortParamsText(w.params));
  lines.push_back(v.metric + " " + PointMeanText(w) + " (mean [95% CI], n=" +
                  std::to_string(w.summary.n) + ")");
  if (w.confirming) {
    const int want = v.spec.ConfirmSeeds();
    std::string line = "confirmed on " + std::to_string(w.confirmed.n) + " fresh seed" +
                       (w.confirmed.n == 1 ? "" : "s");
    if (w.confirmed.n < static_cast<std::size_t>(want)) {
      line += " (of " + std::to_string(want) + ", still running)";
    }
    line += ": " + MeanText(w.confirmed);
    if (w.confirmed.n > 0 && w.search.n > 0) {
      double d = w.confirmed.mean - w.search.mean;
      line += "; the " + std::to_string(w.search.n) + " seeds it was picked on read " +
              Sig4(w.search.mean) + " (" + (d >= 0 ? "+" : "") + Sig4(d) + " fresh)";
    }
    lines.push_back(line);
  }
  if (best.runner_up && best.vs_runner_up) {
    bool tie = best.vs_runner_up->verdict != stats::Verdict::kBetter &&
               best.vs_runner_up->verdict != stats::Verdict::kWorse;
    std::string on =
        best.on_fresh_seeds
            ? " on the " + std::to_string(best.vs_runner_up->shared_seeds) + " fresh seeds both ran"
            : "";
    lines.push_back("vs point " + std::to_string(best.runner_up->idx) + " (" +
                    PointMeanText(*best.runner_up) +
                    ", n=" + std::to_string(best.runner_up->summary.n) + ")" + on + ": " +
                    (tie ? "tie: " : "") + ComparisonText(*best.vs_runner_up));
  }
  return lines;
}

}  // namespace trainq
