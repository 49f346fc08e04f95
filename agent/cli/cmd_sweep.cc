// `trainq sweep start|status|best|stop|resume`: hyperparameter sweeps
// (agent/results/sweep.h) from the command line.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "agent/cli/cli.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/sweep.h"
#include "agent/results/sweep_plot.h"
#include "agent/results/table.h"
#include "core/clock.h"
#include "core/strings.h"
#include "queue/sqlite.h"
#include "queue/sweeps.h"
#include "stats/verdict.h"

using nlohmann::json;

namespace trainq {

namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

json JsonOrNull(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json PointJson(const PointResult& p) {
  json j = {{"point", p.idx},
            {"params", p.params},
            {"state", p.state},
            {"batch", p.batch ? json(p.batch->id) : json(nullptr)},
            {"n", p.summary.n},
            {"mean", p.summary.n ? json(p.summary.mean) : json(nullptr)},
            {"bound", JsonOrNull(p.bound)}};
  if (p.summary.ci95) j["ci95"] = {p.summary.ci95->lo, p.summary.ci95->hi};
  if (p.confirm_baseline) j["confirm_baseline"] = true;
  if (p.confirming || p.confirm_baseline) {
    // The fresh seeds after the search: the value to claim for the pick
    // (and, paired with them, the runner-up's).
    auto part = [](const stats::Summary& s) {
      json k = {{"n", s.n}, {"mean", s.n ? json(s.mean) : json(nullptr)}};
      if (s.ci95) k["ci95"] = {s.ci95->lo, s.ci95->hi};
      return k;
    };
    j["search"] = part(p.search);
    j["confirmed"] = part(p.confirmed);
  }
  return j;
}

std::string MeanText(const PointResult& p) {
  if (p.summary.n == 0) return "-";
  std::string s = Num(p.summary.mean);
  if (p.summary.ci95) s += " [" + Num(p.summary.ci95->lo) + ", " + Num(p.summary.ci95->hi) + "]";
  return s;
}

Result<std::int64_t> Latest(Store& store, const std::optional<std::int64_t>& id);

// How the parameters are searched, e.g. "bayes: lr, wd; grid: bs".
std::string StrategyText(const SweepSpec& spec) {
  std::map<std::string, std::string> by;
  std::vector<std::string> order;
  for (const auto& p : spec.params) {
    std::string how = p.kind == ParamKind::kValue || p.kind == ParamKind::kExpr ? ""
                      : p.grid                                                  ? "grid"
                                                  : std::string(ModelName(p.model));
    if (how.empty()) continue;
    if (!by.count(how)) order.push_back(how);
    by[how] += (by[how].empty() ? "" : ", ") + p.name;
  }
  std::string out;
  for (const auto& how : order) out += (out.empty() ? "" : "; ") + how + ": " + by[how];
  return out;
}

struct PlotOptions {
  std::optional<std::int64_t> id;
  std::string out_dir;
};

Status Plot(const std::string& db, const PlotOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  ASSIGN_OR_RETURN(auto id, Latest(store, o.id));
  ASSIGN_OR_RETURN(auto v, LoadSweepView(store, id));
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Fail(ErrorKind::kIo, "--out " + o.out_dir + ": " + ec.message());
  for (const auto& [name, svg] : SweepPlots(v)) {
    auto path = (std::filesystem::path(o.out_dir) / name).string();
    TRY(WriteFile(path, svg));
    out << path << "\n";
  }
  return {};
}

struct StartOptions {
  std::string experiment, repo = ".", commit = "HEAD";
  bool json = false;
};
struct ReadOptions {
  std::optional<std::int64_t> id;
  bool json = false;
  std::string as;
};

Status Start(const std::string& db, const StartOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(auto repo, GitRepo::Open(o.repo));
  ASSIGN_OR_RETURN(auto commit, repo.Resolve(o.commit));
  ASSIGN_OR_RETURN(auto text, repo.ReadFile(commit.sha, kManifestName));
  ASSIGN_OR_RETURN(auto manifest, ParseManifest(text, kManifestName));
  const Experiment* e = manifest.Find(o.experiment);
  if (!e) {
    std::string known;
    for (const auto& n : manifest.Names()) known += (known.empty() ? "" : ", ") + n;
    return Fail(ErrorKind::kNotFound, "unknown experiment '" + o.experiment + "' in " +
                                          kManifestName + " (known: " + known + ")");
  }
  ASSIGN_OR_RETURN(auto spec, LoadSweep(text, kManifestName, o.experiment));
  spec.ResolveRepeats(e->repeats);
  BatchSpec base = e->ToBatchSpec("sweep");
  base.repeats = spec.repeats;
  // Every point must make a batch: checked before anything is written.
  ASSIGN_OR_RETURN(auto first, SuggestPoints(spec, {}, 1, spec.seed));
  TRY(PointBatch(base, first.at(0), 0, 0));

  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  Sweeps::SweepRow row;
  row.repo_url = repo.location();
  row.commit_json = json{{"sha", commit.sha},
                         {"parent_sha", commit.parent_sha},
                         {"message", commit.message},
                         {"author", commit.author},
                         {"committed_ms", commit.committed_ms}}
                        .dump();
  row.experiment = o.experiment;
  row.spec_json = spec.ToJson().dump();
  row.batch_json = BatchSpecJson(base).dump();
  TimeMs now = SystemClock::Get().Now();
  ASSIGN_OR_RETURN(auto id, store.sweeps().AddSweep(row, now));
  ASSIGN_OR_RETURN(int added, StepSweep(store, id, now));
  if (o.json) {
    out << json{{"sweep", id},
                {"experiment", o.experiment},
                {"commit", commit.sha},
                {"points", spec.PointBudget()},
                {"repeats", spec.repeats},
                {"repeats_max", spec.adaptive() ? spec.repeats_max : spec.repeats},
                {"confirm", spec.ConfirmSeeds()},
                {"strategy", StrategyText(spec)},
                {"parallel", spec.parallel},
                {"queued", added}}
               .dump(2)
        << "\n";
    return {};
  }
  out << "sweep " << id << ": " << o.experiment << " at " << ShortSha(commit.sha) << ", ";
  if (spec.adaptive()) {
    out << "up to " << spec.PointBudget() << " points x " << spec.repeats << " seeds (seeds "
        << base.seed_start << ".." << base.seed_start + spec.repeats - 1 << ", up to "
        << spec.repeats_max << " while a point could still be the best)";
  } else {
    out << spec.PointBudget() << " points x " << spec.repeats << " seeds (seeds "
        << base.seed_start << ".." << base.seed_start + spec.repeats - 1 << ")";
    if (spec.ConfirmSeeds() > 0) {
      out << ", then " << spec.ConfirmSeeds() << " fresh seeds for the winner"
          << (spec.PairedConfirm() ? " and the same for the runner-up (paired)" : "");
    }
  }
  if (spec.budget_runs) out << ", at most " << *spec.budget_runs << " runs";
  out << ", " << StrategyText(spec) << ", " << spec.parallel << " in flight; " << added
      << " queued now\n";
  out << "Run them with `trainq serve --db " << sql::RedactUrl(db)
      << "`; watch with `trainq sweep status " << id << "`.\n";
  return {};
}

Result<std::int64_t> Latest(Store& store, const std::optional<std::int64_t>& id) {
  if (id) return *id;
  ASSIGN_OR_RETURN(auto all, store.sweeps().List());
  if (all.empty()) return Fail(ErrorKind::kNotFound, "no sweeps yet (start one: trainq sweep start EXP)");
  return all.front().id;
}

Status Status_(const std::string& db, const ReadOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  TimeMs now = SystemClock::Get().Now();
  if (!o.id) {
    // Steps every running sweep (so sweeps move on even when nothing serves).
    TRY(StepSweeps(store, now));
    ASSIGN_OR_RETURN(auto all, store.sweeps().List());
    json arr = json::array();
    Table t({"ID", "EXPERIMENT", "COMMIT", "STATE", "POINTS", "RUNS"});
    for (const auto& s : all) {
      ASSIGN_OR_RETURN(auto v, LoadSweepView(store, s.id));
      std::string sha = json::parse(s.commit_json).value("sha", "");
      arr.push_back({{"id", s.id},
                     {"experiment", s.experiment},
                     {"commit", sha},
                     {"state", s.state},
                     {"points", v.points.size()},
                     {"budget_points", v.budget_points},
                     {"runs_done", v.runs_done},
                     {"runs_total", v.runs_total}});
      t.Add({std::to_string(s.id), s.experiment, ShortSha(sha), s.state,
             std::to_string(v.points.size()) + "/" + std::to_string(v.budget_points),
             std::to_string(v.runs_done) + "/" + std::to_string(v.runs_total)});
    }
    if (o.json) {
      out << json{{"sweeps", arr}}.dump(2) << "\n";
    } else if (t.empty()) {
      out << "no sweeps yet (start one: trainq sweep start EXP)\n";
    } else {
      out << t.Render();
    }
    return {};
  }
  TRY(StepSweep(store, *o.id, now));
  ASSIGN_OR_RETURN(auto v, LoadSweepView(store, *o.id));
  auto best = PickBest(v);
  if (o.json) {
    json pts = json::array();
    for (const auto& p : v.points) pts.push_back(PointJson(p));
    out << json{{"id", v.row.id},
                {"experiment", v.row.experiment},
                {"state", v.row.state},
                {"metric", v.metric},
                {"goal", v.goal},
                {"budget_points", v.budget_points},
                {"runs_done", v.runs_done},
                {"runs_total", v.runs_total},
                {"leader", best.winner ? json(best.winner->idx) : json(nullptr)},
                {"points", pts}}
               .dump(2)
        << "\n";
    return {};
  }
  out << "sweep " << v.row.id << ": " << v.row.experiment << ", " << v.row.state << ", "
      << v.points.size() << "/" << v.budget_points << " points, " << v.runs_done << "/"
      << v.runs_total << " runs ended; " << v.metric << " (" << v.goal << ")\n";
  Table t({"POINT", "STATE", "N", "MEAN [95% CI]", v.goal == "min" ? "UCB" : "LCB", "PARAMS"});
  for (const auto& p : v.points) {
    std::string mark = best.winner == &p ? " *" : "";
    t.Add({std::to_string(p.idx) + mark, p.state, std::to_string(p.summary.n), MeanText(p),
           p.bound ? Num(*p.bound) : "-", ShortParamsText(p.params)});
  }
  out << t.Render("  ");
  if (best.winner && best.winner->confirming) {
    out << "  * the search's pick, " << (v.row.state == "running" ? "being confirmed" : "confirmed")
        << " on " << v.spec.ConfirmSeeds() << " fresh seeds (trainq sweep best " << v.row.id
        << ")\n";
    for (const auto& p : v.points) {
      if (p.confirm_baseline) {
        out << "  point " << p.idx
            << ", the runner-up, got the same fresh seeds: the two are "
               "compared paired on them\n";
      }
    }
  } else if (best.winner) {
    out << "  * leader by the confidence bound (trainq sweep best " << v.row.id << ")\n";
  }
  return {};
}

Status Best(const std::string& db, const ReadOptions& o, std::ostream& out) {
  if (!o.as.empty() && o.as != "set" && o.as != "yaml") {
    return Fail(ErrorKind::kInvalidArgument, "--as: expected set or yaml, got " + o.as);
  }
  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  ASSIGN_OR_RETURN(auto id, Latest(store, o.id));
  ASSIGN_OR_RETURN(auto v, LoadSweepView(store, id));
  auto best = PickBest(v);
  if (!best.winner) {
    return Fail(ErrorKind::kNotFound, "sweep " + std::to_string(id) +
                                          ": no point has 2 finished seeds yet");
  }
  const auto& w = *best.winner;
  json spec = json::parse(json::parse(v.row.batch_json).value("spec_json", "{}"));
  bool trainer = !spec.value("trainer", "").empty();
  if (o.as == "set") {
    for (const auto& [k, val] : w.params.items()) {
      out << (trainer ? "--set " : "") << k << "=" << ValueText(val) << "\n";
    }
    return {};
  }
  if (o.as == "yaml") {
    auto lines = WinnerLines(v, best);
    out << "# sweep " << id << " (" << v.row.experiment << "), the winner: " << lines[0] << "\n# "
        << lines[1] << "\n";
    if (w.confirming) out << "# " << lines[2] << "\n";
    out << WinnerPatch(v.row.experiment, spec, w.params);
    return {};
  }
  std::string verdict = "no runner-up";
  if (best.vs_runner_up) {
    auto vd = best.vs_runner_up->verdict;
    verdict = vd == stats::Verdict::kBetter ? "better"
              : vd == stats::Verdict::kWorse ? "worse"
                                              : "tie";
  }
  if (o.json) {
    json j = {{"sweep", id},
              {"metric", v.metric},
              {"goal", v.goal},
              {"eligible", best.eligible},
              {"winner", PointJson(w)}};
    if (best.runner_up) j["runner_up"] = PointJson(*best.runner_up);
    if (best.vs_runner_up) {
      j["vs_runner_up"] = ComparisonJson(*best.vs_runner_up);
      j["vs_runner_up"]["result"] = verdict;
      j["vs_runner_up"]["on_fresh_seeds"] = best.on_fresh_seeds;
    }
    out << j.dump(2) << "\n";
    return {};
  }
  out << "sweep " << id << ": best of " << best.eligible
      << " points with at least 2 seeds, by the " << (v.goal == "min" ? "upper" : "lower")
      << " confidence bound\n";
  for (const auto& line : WinnerLines(v, best)) out << "  " << line << "\n";
  return {};
}

Status SetState(const std::string& db, std::int64_t id, const std::string& state,
                std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  ASSIGN_OR_RETURN(auto row, store.sweeps().GetSweep(id));
  if (!row) return Fail(ErrorKind::kNotFound, "no sweep " + std::to_string(id));
  TimeMs now = SystemClock::Get().Now();
  if (state == "running" && row->state == "done") {
    out << "sweep " << id << " is done; nothing to resume\n";
    return {};
  }
  TRY(store.sweeps().SetSweepState(id, state, now));
  if (state == "running") {
    ASSIGN_OR_RETURN(int added, StepSweep(store, id, now));
    out << "sweep " << id << " resumed; " << added << " points queued now\n";
  } else {
    out << "sweep " << id << " stopped: no new points (points in flight finish)\n";
  }
  return {};
}

void Report(const Status& st, int* exit_code) {
  if (st) return;
  std::cerr << "trainq: error: " << st.error().message << "\n";
  *exit_code = 1;
}

}  // namespace

void AddSweepCommands(CLI::App& app, const std::string* db, int* exit_code) {
  auto* c = app.add_subcommand("sweep", "Hyperparameter sweeps: points run as batches, the winner "
                                        "picked with its seed noise");
  c->require_subcommand(1);

  auto start = std::make_shared<StartOptions>();
  auto* c_start = c->add_subcommand("start", "Start the `sweep:` of an experiment at a commit");
  c_start->add_option("EXPERIMENT", start->experiment, "Experiment with a sweep:")->required();
  c_start->add_option("--repo", start->repo, "Git repository holding trainq.yaml")
      ->capture_default_str();
  c_start->add_option("--commit", start->commit, "Revision to run")->capture_default_str();
  c_start->add_flag("--json", start->json, "Print as JSON");
  c_start->callback([=] { Report(Start(*db, *start, std::cout), exit_code); });

  auto status = std::make_shared<ReadOptions>();
  auto* c_status = c->add_subcommand("status", "Sweeps, or the points of one (steps it on)");
  c_status->add_option("ID", status->id, "Sweep id");
  c_status->add_flag("--json", status->json, "Print as JSON");
  c_status->callback([=] { Report(Status_(*db, *status, std::cout), exit_code); });

  auto best = std::make_shared<ReadOptions>();
  auto* c_best = c->add_subcommand("best", "The winner by its confidence bound, vs the runner-up");
  c_best->add_option("ID", best->id, "Sweep id (default: the newest)");
  c_best->add_flag("--json", best->json, "Print as JSON");
  c_best->add_option("--as", best->as, "set: the winner's values (--set lines for a trainer); yaml: a patch to commit (the spec's keys, or the experiment's command)");
  c_best->callback([=] { Report(Best(*db, *best, std::cout), exit_code); });

  auto plot = std::make_shared<PlotOptions>();
  auto* c_plot = c->add_subcommand("plot", "SVG plots: the metric against each parameter, and "
                                           "the pick against runs spent");
  c_plot->add_option("ID", plot->id, "Sweep id (default: the newest)");
  c_plot->add_option("--out", plot->out_dir, "Directory for the .svg files")->required();
  c_plot->callback([=] { Report(Plot(*db, *plot, std::cout), exit_code); });

  auto stop_id = std::make_shared<std::int64_t>(0);
  auto* c_stop = c->add_subcommand("stop", "Add no more points (points in flight finish)");
  c_stop->add_option("ID", *stop_id, "Sweep id")->required();
  c_stop->callback([=] { Report(SetState(*db, *stop_id, "stopped", std::cout), exit_code); });

  auto resume_id = std::make_shared<std::int64_t>(0);
  auto* c_resume = c->add_subcommand("resume", "Go on with a stopped sweep");
  c_resume->add_option("ID", *resume_id, "Sweep id")->required();
  c_resume->callback([=] { Report(SetState(*db, *resume_id, "running", std::cout), exit_code); });
}

}  // namespace trainq
