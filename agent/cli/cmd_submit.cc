// `trainq submit` and `trainq repro`: read trainq.yaml at a commit, plan the
// batches, queue or reuse them through SubmitCommit (agent/results/submit.h)
// and choose their baselines.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/cli/cli.h"
#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "agent/results/submit.h"
#include "agent/runner/run_process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

// `trainer:` runs need trainq-train where they run. Each worker reports at
// register the trainq-train it found (beside itself or on PATH; "" = none).
// Warns when the machines of an experiment's pool that reported have none, or,
// when none reported, when this trainq has none (a `trainq serve` started
// from here could not run it).
static void WarnNoTrainer(Store& store, const std::vector<const Experiment*>& chosen,
                          std::ostream& err) {
  auto machines = store.machines().List(/*include_stopped=*/true);
  if (!machines) return;
  for (const auto* e : chosen) {
    if (e->trainer.empty()) continue;
    std::set<std::string> without;
    bool with = false;
    for (const auto& m : *machines) {
      if (!e->pool.empty() && m.pool != e->pool) continue;
      auto r = nlohmann::json::parse(m.resources_json, nullptr, false);
      if (!r.is_object() || !r.contains("trainer") || !r["trainer"].is_string()) continue;
      if (!r["trainer"].get<std::string>().empty()) {
        with = true;
        break;
      }
      without.insert(m.name.empty() ? m.hostname : m.name);
    }
    if (with) continue;
    const std::string where = e->pool.empty() ? "any pool" : "pool '" + e->pool + "'";
    if (!without.empty()) {
      std::string names;
      size_t i = 0;
      for (const auto& n : without) {
        if (i++ == 5) break;
        names += (names.empty() ? "" : ", ") + n;
      }
      if (without.size() > 5) names += " and " + std::to_string(without.size() - 5) + " more";
      err << "trainq: warning: " << e->name << " is a `trainer:` experiment, but no worker of "
          << where << " has trainq-train (they reported none beside trainq or on PATH: " << names
          << "); its runs fail until trainq-train and libtorch are installed there\n";
    } else if (FindTrainqTrain(SelfDir(), PathEnv()).empty()) {
      err << "trainq: warning: " << e->name << " is a `trainer:` experiment, but trainq-train is "
          << "neither beside this trainq (" << SelfDir() << ") nor on PATH: a `trainq serve` "
          << "started from here cannot run it (install trainq-train beside trainq)\n";
    }
  }
}

// `trainq submit` of the checked-out commit: the runs use the committed files,
// so an edit not committed yet to trainq.yaml, a trainer spec or a watched
// path would not run. Say so, naming the files.
static void WarnUncommitted(GitRepo& repo, const CommitInfo& commit,
                     const std::vector<const Experiment*>& chosen, std::ostream& err) {
  auto head = repo.Resolve("HEAD");
  if (!head || head->sha != commit.sha) return;
  auto dirty = repo.UncommittedPaths();
  if (!dirty) {
    spdlog::debug("uncommitted changes not checked: {}", dirty.error().message);
    return;
  }
  std::vector<std::string> relevant;
  for (const auto& path : *dirty) {
    bool hit = path == kManifestName;
    for (const auto* e : chosen) {
      if (hit) break;
      if (!e->trainer.empty() && fs::path(e->trainer).lexically_normal() == fs::path(path)) hit = true;
      for (const auto& g : e->watch) hit = hit || GlobMatch(g, path);
    }
    if (hit) relevant.push_back(path);
  }
  if (relevant.empty()) return;
  std::string list;
  for (size_t i = 0; i < relevant.size() && i < 10; ++i) list += (i ? ", " : "") + relevant[i];
  if (relevant.size() > 10) list += " and " + std::to_string(relevant.size() - 10) + " more";
  err << "trainq: warning: uncommitted changes to " << list << " are not part of " << ShortSha(commit.sha)
      << "; the runs use the committed version (commit first, or pass --allow-dirty)\n";
}

namespace {

// trainq.yaml at the commit, read and parsed; errors name the commit.
Result<Manifest> ReadSubmitManifest(GitRepo& repo, const CommitInfo& commit,
                                    const SubmitOptions& o) {
  auto text = repo.ReadFile(commit.sha, kManifestName);
  if (!text) {
    if (text.error().kind == ErrorKind::kNotFound) {
      return Fail(ErrorKind::kNotFound,
                  std::string(kManifestName) + " not found at commit " + ShortSha(commit.sha) +
                      " in " + repo.location() +
                      " (add one at the repository root; see examples/trainq.yaml)");
    }
    return std::unexpected(text.error());
  }
  const std::string at = repo.location() + " at " + ShortSha(commit.sha);
  if (auto st = CheckManifestSize(text->size(), kManifestName, o.limits); !st) {
    return std::unexpected(st.error().Wrap(at));
  }
  auto manifest = ParseManifest(*text, kManifestName);
  if (!manifest) return std::unexpected(manifest.error().Wrap(at));
  return std::move(*manifest);
}

// The experiments to queue: those named, or every one with a plain batch
// (the others' reasons into `skipped`).
Result<std::vector<const Experiment*>> ChooseSubmitted(const Manifest& manifest,
                                                       const SubmitOptions& o,
                                                       const std::string& file_label,
                                                       std::vector<std::string>& skipped) {
  std::vector<const Experiment*> chosen;
  if (o.experiments.empty()) {
    for (const auto& e : manifest.experiments) {
      if (auto why = e.NoPlainBatch()) {
        skipped.push_back(*why);
      } else {
        chosen.push_back(&e);
      }
    }
    if (chosen.empty() && !skipped.empty()) {
      return Fail(ErrorKind::kInvalidArgument, file_label + ": nothing to queue: " + skipped[0]);
    }
    return chosen;
  }
  for (const auto& name : o.experiments) {
    const Experiment* e = manifest.Find(name);
    if (!e) {
      std::string known;
      for (const auto& n : manifest.Names()) known += (known.empty() ? "" : ", ") + n;
      return Fail(ErrorKind::kNotFound, "unknown experiment '" + name + "' in " + file_label +
                                            " (known: " + known + ")");
    }
    if (auto why = e->NoPlainBatch()) {
      return Fail(ErrorKind::kInvalidArgument, file_label + ": " + *why);
    }
    chosen.push_back(e);
  }
  return chosen;
}

// One batch spec per chosen experiment with its inputs' fingerprint, plus
// --runs' determinism checks (the experiments' own are added to what is
// queued by SubmitCommit).
Result<std::vector<BatchSpec>> SubmitSpecs(GitRepo& repo, const CommitInfo& commit,
                                           const Manifest& manifest,
                                           const std::vector<const Experiment*>& chosen,
                                           const SubmitOptions& o) {
  std::vector<BatchSpec> specs;
  for (const auto* e : chosen) {
    BatchSpec b = e->ToBatchSpec("submitted by hand (trainq submit)");
    if (o.repeats) b.repeats = *o.repeats;
    specs.push_back(std::move(b));
  }
  TRY(AddInputsFingerprints(repo, commit.sha, manifest, specs));
  if (!o.repro_runs) return specs;
  if (*o.repro_runs < 1) {
    return Fail(ErrorKind::kInvalidArgument,
                "--runs: expected a positive integer, got " + std::to_string(*o.repro_runs));
  }
  size_t n = specs.size();
  for (size_t i = 0; i < n; ++i) {
    specs[i].repeats = std::max(specs[i].repeats, *o.repro_runs);
    specs.push_back(ReproSpec(specs[i], *o.repro_runs));
  }
  return specs;
}

// "reused batch 2 of 1a2b3c4d5e (same inputs; --rerun runs it again)" for a
// batch that reuses another's runs, "" for one with its own.
Result<std::string> ReusedText(Store& store, const SubmittedBatch& b) {
  if (b.reused) {
    return "reused batch " + std::to_string(b.reused->batch.id) + " of " +
           ShortSha(b.reused->at_sha) + " (same inputs; --rerun runs it again)";
  }
  if (!b.already_reusing) return std::string();
  ASSIGN_OR_RETURN(auto batch, store.runs().Batch(b.result.batch_id));
  return (batch ? ReuseText(*batch) : std::string("reused")) + "; --rerun runs it again";
}

void PrintSubmitJson(const GitRepo& repo, const CommitInfo& commit,
                     const std::vector<SubmittedBatch>& batches,
                     const std::vector<std::string>& reused,
                     const std::vector<std::string>& skipped, std::ostream& out) {
  json j = {{"repo", repo.location()}, {"commit", commit.sha}, {"batches", json::array()},
            {"not_queued", skipped}};
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto& b = batches[i];
    j["batches"].push_back({{"id", b.result.batch_id},
                            {"experiment", b.result.experiment},
                            {"created", b.result.created},
                            {"runs_added", b.result.runs_added},
                            {"reused", reused[i].empty() ? json(nullptr) : json(reused[i])},
                            {"baseline", b.baseline_batch ? b.baseline : std::string()},
                            {"seeds", {b.spec.seed_start, b.spec.seed_start +
                                                              b.spec.repeats - 1}}});
  }
  out << j.dump(2) << "\n";
}

// "  batch 3  mnist: 5 runs queued (seeds 1..5)" per batch.
void PrintSubmitText(const GitRepo& repo, const CommitInfo& commit,
                     const std::vector<SubmittedBatch>& batches,
                     const std::vector<std::string>& reused,
                     const std::vector<std::string>& skipped, std::ostream& out) {
  out << "commit " << ShortSha(commit.sha) << " \"" << commit.message << "\" in " << repo.location()
      << "\n";
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto& r = batches[i].result;
    out << "  batch " << r.batch_id << "  " << r.experiment << ": ";
    const std::int64_t first = batches[i].spec.seed_start;
    const std::int64_t last = first + batches[i].spec.repeats - 1;
    if (!reused[i].empty()) {
      out << reused[i] << "\n";
    } else if (r.created) {
      out << r.runs_added << (r.runs_added == 1 ? " run" : " runs") << " queued ("
          << (first == last ? "seed " + std::to_string(first)
                            : "seeds " + std::to_string(first) + ".." + std::to_string(last))
          << ")\n";
    } else if (r.runs_added > 0) {
      out << "already submitted; " << r.runs_added << (r.runs_added == 1 ? " more run" : " more runs")
          << " queued (up to seed " << last << ")\n";
    } else {
      out << "already submitted; nothing added\n";
    }
    if (batches[i].baseline_batch) out << "    baseline: " << batches[i].baseline << "\n";
  }
  for (const auto& why : skipped) out << "  not queued: " << why << "\n";
}

}  // namespace

// Read and check, plan the specs, queue or reuse, choose baselines, print.
Status CmdSubmit(const SubmitOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto repo, GitRepo::Open(o.repo));
  ASSIGN_OR_RETURN(auto commit, repo.Resolve(o.commit));
  ASSIGN_OR_RETURN(auto manifest, ReadSubmitManifest(repo, commit, o));
  const std::string file_label = std::string(kManifestName) + "@" + ShortSha(commit.sha);
  std::vector<std::string> skipped;  // swept experiments without a default point
  ASSIGN_OR_RETURN(auto chosen, ChooseSubmitted(manifest, o, file_label, skipped));
  if (o.repeats && *o.repeats <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--repeats: expected a positive integer, got " + std::to_string(*o.repeats));
  }
  auto read = [&](const std::string& path) { return repo.ReadFile(commit.sha, path); };
  if (auto st = CheckExperiments(chosen, kManifestName, read); !st) {
    return std::unexpected(st.error().Wrap(repo.location() + " at " + ShortSha(commit.sha)));
  }
  ASSIGN_OR_RETURN(auto specs, SubmitSpecs(repo, commit, manifest, chosen, o));
  TRY(CheckSubmitLimits(specs, file_label, o.limits));
  if (!o.allow_dirty) WarnUncommitted(repo, commit, chosen, std::cerr);
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db));
  // Each batch is compared with its experiment at the parent commit, or at
  // the nearest ancestor with the same inputs (agent/results/baseline.h);
  // with --with-baseline a missing one is queued at the parent with the
  // same seeds.
  SubmitRequest req;
  req.commit = commit;
  req.specs = specs;
  req.rerun = o.rerun;
  req.determinism_checks = !o.repro_runs;
  if (!commit.parent_sha.empty()) req.base_sha = commit.parent_sha;
  req.baseline.queue_missing = o.with_baseline;
  ASSIGN_OR_RETURN(auto batches, SubmitCommit(store, repo, req, clock.Now()));
  WarnNoTrainer(store, chosen, std::cerr);
  std::vector<std::string> reused;
  for (const auto& b : batches) {
    if (b.baseline_error) return std::unexpected(*b.baseline_error);
    ASSIGN_OR_RETURN(auto text, ReusedText(store, b));
    reused.push_back(std::move(text));
  }
  if (o.json) {
    PrintSubmitJson(repo, commit, batches, reused, skipped, out);
    return {};
  }
  PrintSubmitText(repo, commit, batches, reused, skipped, out);
  if (o.repro_runs) {
    // What the determinism check says now (once the runs end, `trainq show`).
    for (const auto& b : batches) {
      const SubmitResult& r = b.result;
      if (IsReproExperiment(r.experiment)) continue;
      ASSIGN_OR_RETURN(auto batch, store.runs().Batch(r.batch_id));
      if (!batch) continue;
      ASSIGN_OR_RETURN(auto check, ReproOf(store, *batch));
      if (check) out << "  " << r.experiment << ": " << check->text << "\n";
    }
  }
  out << "Run them with `trainq serve --db " << sql::RedactUrl(o.db)
      << "`; watch with `trainq status`.\n";
  return {};
}

void AddReproCommand(CLI::App& app, const CliContext& ctx) {
  auto repro = std::make_shared<SubmitOptions>();
  auto repro_name = std::make_shared<std::string>();
  auto* c_repro = app.add_subcommand(
      "repro",
      "Determinism check: run an experiment's first seed(s) a second time at a commit; "
      "`trainq show` then says reproducible or not");
  c_repro->add_option("EXPERIMENT", *repro_name, "Experiment to check")->required();
  c_repro->add_option("--repo", repro->repo, "Git repository holding trainq.yaml")
      ->capture_default_str();
  c_repro->add_option("--commit", repro->commit, "Revision to check (sha, branch, tag)")
      ->capture_default_str();
  auto repro_runs = std::make_shared<int>(1);
  c_repro->add_option("--runs", *repro_runs, "How many seeds to run twice (seeds s..s+K-1)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c_repro->add_flag("--json", repro->json, "Print the result as JSON");
  c_repro->add_flag("--allow-dirty", repro->allow_dirty,
                    "No warning about uncommitted changes to its files");
  c_repro->callback([=] {
    repro->db = *ctx.db;
    repro->experiments = {*repro_name};
    repro->repro_runs = *repro_runs;
    *ctx.exit_code = ReportStatus(CmdSubmit(*repro, *ctx.clock, std::cout));
  });
}

void AddSubmitCommand(CLI::App& app, const CliContext& ctx) {
  auto submit = std::make_shared<SubmitOptions>();
  auto* c_submit = app.add_subcommand("submit", "Queue N repeated runs of experiments at a commit");
  c_submit->add_option("--repo", submit->repo, "Git repository holding trainq.yaml")
      ->capture_default_str();
  c_submit->add_option("--commit", submit->commit, "Revision to run (sha, branch, tag, HEAD~1)")
      ->capture_default_str();
  c_submit->add_option("--experiment,-e", submit->experiments,
                       "Experiment to run (repeatable; default: all)");
  c_submit->add_option("--repeats,-n", submit->repeats, "Runs per experiment (overrides trainq.yaml)");
  c_submit->add_flag("--json", submit->json, "Print the result as JSON");
  c_submit->add_flag("--with-baseline", submit->with_baseline,
                     "Queue the parent commit's runs (same seeds) when no baseline batch exists");
  c_submit->add_flag("--rerun", submit->rerun,
                     "Queue runs even when an ancestor's batch had the same inputs (default: "
                     "reuse that batch)");
  c_submit->add_flag("--allow-dirty", submit->allow_dirty,
                     "No warning when trainq.yaml, a trainer spec or a watched file has "
                     "uncommitted changes");
  c_submit->add_option("--max-experiments", submit->limits.max_experiments,
                       "Refuse a submission of more experiments than this")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c_submit->add_option("--max-runs", submit->limits.max_runs,
                       "Refuse a submission of more runs than this (all experiments together)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c_submit->callback([=] {
    submit->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdSubmit(*submit, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
