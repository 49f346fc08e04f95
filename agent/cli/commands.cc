#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"

#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "agent/results/retry.h"
#include "agent/results/submit.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/repo/change_detect.h"
#include "agent/cli/credentials.h"
#include "agent/cli/read_client.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "agent/results/status.h"
#include "agent/results/table.h"
#include "agent/runner/executor.h"
#include "agent/runner/run_process.h"
#include "agent/triggers/push_pipeline.h"
#include "agent/triggers/server_config.h"
#include "agent/triggers/webhook.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "stats/summary.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

namespace {

Result<Store> OpenExisting(const std::string& db) {
  StoreOptions so;
  so.create = false;
  return Store::Open(db, so);
}

// `trainq init`: the one command that writes a schema into a file that exists
// but holds none (Store::Open refuses such a file everywhere else); a trainq
// database is left as it is.
Status CmdInit(const std::string& db, std::ostream& out) {
  std::error_code ec;
  const bool existed = fs::exists(db, ec);
  StoreOptions so;
  so.initialize_existing = true;
  // A trainq database opens as it is; anything else that is not an empty
  // file fails the same way below.
  const bool before = existed && Store::Open(db, {.create = false}).has_value();
  ASSIGN_OR_RETURN(auto store, Store::Open(db, so));
  if (before) {
    out << db << ": already a trainq database (schema version " << store.schema_version()
        << "); nothing changed\n";
  } else {
    out << db << ": " << (existed ? "initialised a new trainq database in the empty file"
                                  : "created a new trainq database")
        << " (schema version " << store.schema_version() << ")\n";
  }
  return {};
}

std::string Oneline(std::string s, size_t max) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

}  // namespace

std::string UserDbPath() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg && *xdg == '/') return (fs::path(xdg) / "trainq" / "trainq.db").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".local" / "share" / "trainq" / "trainq.db").string();
  return "trainq.db";
}

std::string DefaultDbPath() {
  const char* env = std::getenv("TRAINQ_DB");
  if (env && *env) return env;
  // A ./trainq.db from before the per-user default keeps working.
  std::error_code ec;
  if (fs::exists("trainq.db", ec)) return "trainq.db";
  return UserDbPath();
}

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
  out << "Run them with `trainq serve --db " << o.db << "`; watch with `trainq status`.\n";
  return {};
}

namespace {

// ", busy 3m10s": run time on the machines, next to their billed time (a
// machine with several slots can be busy longer than it was billed). Busy
// time counts runs leased by fleet workers; the in-process executor's runs
// are not tied to its machine row, so no busy time says nothing about them.
std::string BusyOf(TimeMs busy) { return busy > 0 ? ", busy " + FormatDuration(busy) : ""; }

// "$12.30 of $50.00 today, $120.00 of $800.00 this month; CAP REACHED: ..."
std::string BudgetText(const json& b) {
  std::vector<std::string> parts;
  if (b.value("per_day", 0.0) > 0) {
    parts.push_back(Money(b.value("spent_day", 0.0)) + " of " + Money(b.value("per_day", 0.0)) +
                    " today (UTC)");
  }
  if (b.value("per_month", 0.0) > 0) {
    parts.push_back(Money(b.value("spent_month", 0.0)) + " of " +
                    Money(b.value("per_month", 0.0)) + " this month");
  }
  std::string text = fmt::format("{}", fmt::join(parts, ", "));
  if (!b.value("cap", "").empty()) text += "; AT CAP, no boots: " + b.value("cap", "");
  return text;
}

BatchProgress CountsOfJson(const json& b) {
  BatchProgress p;
  for (int i = 0; i < kRunStateCount; ++i) {
    p.counts[i] = b["counts"].value(std::string(RunStateName(static_cast<RunState>(i))), 0);
  }
  return p;
}

std::string ProgressTextJson(const json& b) { return ProgressText(CountsOfJson(b)); }

bool IsActiveJson(const json& b) { return CountsOfJson(b).active(); }

std::string SummaryTextJson(const json& b) {
  const json& s = b["summary"];
  int n = s.value("n", 0);
  if (n == 0) return "-";
  double mean = s.value("mean", 0.0);
  if (n == 1) return FormatDouble(mean, 4) + " (n=1)";
  double sd = s["sd"].is_number() ? s["sd"].get<double>() : 0.0;
  return FormatDouble(mean, 4) + " ± " + FormatDouble(sd, 4) + " (n=" + std::to_string(n) + ")";
}

// "step 1350 · accuracy 0.9512 · loss 0.3100": a running run's latest points,
// the experiment's metric first, then loss, then up to two more.
std::string LatestText(const json& run) {
  if (!run.contains("latest") || !run["latest"].is_object()) return "";
  const json& l = run["latest"];
  const json& m = l["metrics"];
  std::string out;
  if (l["step"].is_number()) out = "step " + std::to_string(l["step"].get<std::int64_t>());
  std::vector<std::string> names;
  std::string metric = l.value("metric", "");
  if (m.contains(metric)) names.push_back(metric);
  if (metric != "loss" && m.contains("loss")) names.push_back("loss");
  for (const auto& [name, v] : m.items()) {
    if (names.size() >= 4) break;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const auto& n : names) {
    if (!m[n].is_number()) continue;
    out += (out.empty() ? "" : " · ") + n + " " + FormatDouble(m[n].get<double>(), 4);
  }
  return out;
}

// One machine under its pool: its state, and slots or how long it has been
// silent, booting or idle.
void RenderMachineLine(const json& m, TimeMs now, std::ostream& out) {
  TimeMs last_seen = m.value("last_seen_ms", TimeMs{0});
  std::string name = m.value("name", "");
  if (name.empty()) name = m.value("provider", "") + " " + m.value("provider_id", "");
  std::string state = m.value("state", "");
  out << "          " << name << ": ";
  if (m.value("silent", false) && (state == "ready" || state == "draining")) {
    out << "silent for " << FormatDuration(now - last_seen) << "\n";
    return;
  }
  out << state;
  if (state == "ready") {
    out << ", " << m.value("busy", 0) << "/" << m.value("slots", 0) << " slot(s) busy";
    if (m.contains("idle_ms") && m["idle_ms"].is_number()) {
      out << ", idle " << FormatDuration(m["idle_ms"].get<TimeMs>());
    }
  } else if (state == "requested" || state == "booting") {
    out << " for " << FormatDuration(now - m.value("booted_ms", now));
    // Why it is not up yet, as its provider says (a pod's scheduler message).
    if (auto why = m.value("last_error", ""); !why.empty()) out << ": " << Oneline(why, 160);
  } else {
    out << ", " << m.value("slots", 0) << " slot(s)";
  }
  out << "\n";
}

// "queue: ..." and "slots: ..." lines.
void RenderQueueLines(const json& j, const json& machines, std::ostream& out) {
  out << "queue:   ";
  for (int i = 0; i < kRunStateCount; ++i) {
    std::string name(RunStateName(static_cast<RunState>(i)));
    out << (i ? " · " : " ") << name << " " << j["counts"].value(name, std::int64_t{0});
  }
  out << "\n";
  std::int64_t slots = j["slots"].value("total", std::int64_t{0});
  out << "slots:    " << j["slots"].value("busy", std::int64_t{0}) << " busy / " << slots
      << " available";
  if (slots == 0 && machines.empty()) {
    // The fleet keeps no machine while nothing is queued (min 0), so this is
    // also what a running serve looks like between batches.
    out << " (no machine is up: `trainq serve` boots them while runs are queued)";
  }
  out << "\n";
}

// A pool's failed boots: how many, when the next boot may come, and the end
// of the last one's log.
void RenderPoolBoots(const json& b, const std::string& pool, TimeMs now, std::ostream& out) {
  int failed = b.value("failed", 0);
  if (b.value("failing", false)) {
    out << "          FAILING: " << failed << " boots in a row failed; no more boots until "
        << "its config changes, `trainq pools reset " << pool
        << "`, or a worker of the pool registers\n"
        << "          last: " << Oneline(b.value("error", ""), 160) << "\n";
  } else if (failed > 0) {
    out << "          " << failed << " failed boot(s) in a row; one machine at a time";
    if (b["next_boot_ms"].is_number()) {
      TimeMs next = b["next_boot_ms"].get<TimeMs>();
      if (next > now) out << ", next boot in " << FormatDuration(next - now);
    }
    out << "\n          last: " << Oneline(b.value("error", ""), 160) << "\n";
  }
  if (failed > 0 || b.value("failing", false)) {
    auto lines = Split(b.value("log_tail", ""), '\n');
    std::vector<std::string> kept;
    for (const auto& l : lines) {
      if (!Trim(l).empty()) kept.push_back(std::string(l));
    }
    size_t from = kept.size() > 5 ? kept.size() - 5 : 0;
    if (!kept.empty()) out << "          its log ends:\n";
    for (size_t i = from; i < kept.size(); ++i) {
      out << "            | " << Oneline(kept[i], 150) << "\n";
    }
  }
}

// One pool: machines by state, slots, cost, losses, provider and boot
// failures, budget, then its machines.
void RenderPool(const json& p, const json& machines, TimeMs now, std::ostream& out) {
  static constexpr std::string_view kStateOrder[] = {
      "ready", "booting", "requested", "draining", "stopping", "failed", "stopped"};
  std::string pool = p.value("pool", "");
  std::vector<std::string> parts;
  for (auto st : kStateOrder) {
    int n = p["machines"].value(std::string(st), 0);
    if (n > 0) parts.push_back(std::to_string(n) + " " + std::string(st));
  }
  out << "pool " << pool << ": "
      << (parts.empty() ? std::string("no machines") : fmt::format("{}", fmt::join(parts, ", ")));
  if (!parts.empty()) {
    out << "; slots " << p["slots"].value("busy", 0) << " busy / " << p["slots"].value("total", 0);
  }
  TimeMs billed = p.value("billed_ms", TimeMs{0});
  TimeMs busy = p.value("busy_ms", TimeMs{0});
  if (p.value("machines_booted", 0) > 0) {
    out << "; billed " << FormatDuration(billed) << BusyOf(busy) << ", cost "
        << Money(p.value("cost", 0.0));
  }
  out << "\n";
  if (p.contains("lost") && p["lost"].is_object()) {
    const json& l = p["lost"];
    const json& last = l["last"];
    TimeMs at = last.value("at_ms", now);
    out << "          lost in the last hour: " << l.value("last_hour", 0) << "; last "
        << last.value("name", "") << " " << FormatDuration(now - at) << " ago ("
        << Oneline(last.value("reason", ""), 120) << ")\n";
  }
  if (p.value("failing", false)) {
    out << "          provider failing (" << p.value("provider_failures", 0) << " calls in a row";
    if (p["provider_next_retry_ms"].is_number()) {
      TimeMs retry = p["provider_next_retry_ms"].get<TimeMs>();
      out << "; next try " << (retry > now ? "in " + FormatDuration(retry - now) : "now");
    }
    out << "): " << Oneline(p.value("provider_error", ""), 120) << "\n";
  }
  if (p.contains("boots") && p["boots"].is_object()) RenderPoolBoots(p["boots"], pool, now, out);
  if (p.contains("budget") && p["budget"].is_object()) {
    out << "          budget: " << BudgetText(p["budget"]) << "\n";
  }
  for (const auto& m : machines) {
    if (m.value("pool", "") == pool) RenderMachineLine(m, now, out);
  }
}

// Every pool, the budget of all pools and what all machines cost.
void RenderPools(const json& j, const json& machines, TimeMs now, std::ostream& out) {
  for (const auto& p : j["pools"]) RenderPool(p, machines, now, out);
  if (j.contains("budget") && j["budget"].is_object()) {
    out << "budget:   all pools: " << BudgetText(j["budget"]) << "\n";
  }
  const json& c = j["costs"];
  if (c.value("machines_booted", 0) > 0) {
    TimeMs billed = c.value("billed_ms", TimeMs{0});
    TimeMs busy = c.value("busy_ms", TimeMs{0});
    out << "machines: billed " << FormatDuration(billed) << BusyOf(busy) << ", cost "
        << Money(c.value("cost", 0.0)) << " in all (" << c.value("machines_booted", 0)
        << " machine(s); `trainq machines --all` for each)\n";
  }
}

void RenderRunning(const json& running, std::ostream& out) {
  if (running.empty()) return;
  out << "running:\n";
  Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "ATTEMPT", "ELAPSED", "WORKER", "LATEST"});
  for (const auto& r : running) {
    t.Add({std::to_string(r.value("id", std::int64_t{0})),
           std::to_string(r.value("batch", std::int64_t{0})), r.value("experiment", ""),
           std::to_string(r.value("seed", std::int64_t{0})),
           std::to_string(r.value("attempts", 0)) + "/" + std::to_string(r.value("max_attempts", 0)),
           r["started_ms"].is_number() ? FormatDuration(r.value("elapsed_ms", TimeMs{0}))
                                       : "starting",
           r.value("worker", ""), LatestText(r)});
  }
  out << t.Render("  ");
}

// The five newest pushes.
void RenderPushes(const json& pushes, std::ostream& out) {
  if (pushes.empty()) return;
  out << "pushes:\n";
  Table t({"PUSH", "SOURCE", "REF", "COMMIT", "STATE", "NOTE"});
  size_t shown = 0;
  for (const auto& p : pushes) {
    if (++shown > 5) break;
    std::string ref = p.value("ref", "");
    for (std::string_view prefix : {"refs/heads/", "refs/tags/"}) {
      if (ref.starts_with(prefix)) ref = ref.substr(prefix.size());
    }
    std::string state = p.value("state", "");
    std::string note = p.value("error", "");
    if (state == "pending" && !note.empty()) {
      note = "retrying (attempt " + std::to_string(p.value("attempts", 0)) + "): " + note;
    } else if (note.empty()) {
      note = p.value("result", "");
    }
    t.Add({std::to_string(p.value("id", std::int64_t{0})), p.value("source", ""), ref,
           ShortSha(p.value("after", ""), kReportShaChars), state, Oneline(note, 80)});
  }
  out << t.Render("  ");
}

// Why runs wait, then the newest batches, then what the batch table has no
// column for: determinism checks and drift.
void RenderBatches(const json& j, TimeMs now, std::ostream& out) {
  const json& batches = j["batches"];
  if (batches.empty()) {
    out << "batches:  none yet (queue some with `trainq submit --repo DIR`)\n";
    return;
  }
  if (j.contains("waiting") && !j["waiting"].empty()) {
    out << "waiting:\n";
    for (const auto& w : j["waiting"]) {
      out << "  batch " << w.value("batch", std::int64_t{0}) << " ("
          << w.value("experiment", "") << "): " << w.value("runs", std::int64_t{0})
          << " run(s): " << w.value("reason", "") << "\n";
    }
  }
  out << "batches:\n";
  Table t({"BATCH", "COMMIT", "EXPERIMENT", "PROGRESS", "METRIC (mean ± sd)"});
  // A terminal shows the newest batches; --json and `trainq report` have them all.
  constexpr size_t kShown = 20;
  // batches_total: the list's full length when only the newest were read.
  const size_t total =
      std::max<size_t>(batches.size(), j.value("batches_total", std::int64_t{0}));
  size_t hidden = total > kShown ? total - kShown : 0;
  size_t i = 0;
  for (const auto& b : batches) {
    if (i++ >= kShown) break;
    std::string progress = ProgressTextJson(b);
    if (b.contains("eta_ms") && IsActiveJson(b)) {
      // "eta 12m": from the measured durations of the experiment's runs.
      TimeMs eta = b["eta_ms"].is_number() ? b["eta_ms"].get<TimeMs>() : -1;
      progress += eta >= 0 ? ", eta " + FormatDuration(std::max<TimeMs>(0, eta - now)) : ", eta ?";
    }
    t.Add({std::to_string(b.value("id", std::int64_t{0})),
           ShortSha(b.value("commit", ""), kReportShaChars), b.value("experiment", ""), progress,
           b.value("metric", "") + " " + SummaryTextJson(b)});
  }
  out << t.Render("  ");
  if (hidden) {
    out << "  ... and " << hidden << " more (trainq status --json, trainq report)\n";
  }
  i = 0;
  for (const auto& b : batches) {
    if (i++ >= kShown) break;
    for (const char* key : {"determinism", "drift"}) {
      if (b.contains(key) && b[key].is_string()) {
        out << "  batch " << b.value("id", std::int64_t{0}) << " " << b.value("experiment", "")
            << ": " << b[key].get<std::string>() << "\n";
      }
    }
  }
}

// The terminal view of StatusJson's document (the same whether it came from
// the store or from a server's /api/v1/status), section by section.
void RenderStatusText(const json& j, std::ostream& out) {
  const TimeMs now = j.value("now_ms", TimeMs{0});
  const json no_machines = json::array();
  const json& machines = j.contains("machines") ? j["machines"] : no_machines;
  RenderQueueLines(j, machines, out);
  if (!j.contains("pools")) {  // a server from before pools
    for (const auto& m : machines) RenderMachineLine(m, now, out);
  } else {
    RenderPools(j, machines, now, out);
  }
  RenderRunning(j["running"], out);
  RenderPushes(j.contains("pushes") ? j["pushes"]["recent"] : json::array(), out);
  RenderBatches(j, now, out);
}

Result<json> FetchServerStatus(const std::string& server, const std::string& token_file) {
  std::string base = server;
  while (!base.empty() && base.back() == '/') base.pop_back();
  ASSIGN_OR_RETURN(auto token, ReadToken(token_file, server));
  CurlHttpClient http;
  ASSIGN_OR_RETURN(auto resp, http.Send({"GET", base + "/api/v1/status",
                                         {{"Authorization", "Bearer " + token}}, "", 10'000}));
  if (!resp.ok()) {
    std::string reason;
    auto err = json::parse(resp.body, nullptr, false);
    if (err.is_object() && err.contains("reason") && err["reason"].is_string()) {
      reason = ": " + err["reason"].get<std::string>();
    }
    return Fail(resp.status >= 500 ? ErrorKind::kUnavailable : ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base) + ": HTTP " + std::to_string(resp.status) +
                    " from /api/v1/status" + reason);
  }
  json j = json::parse(resp.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("counts")) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base) + ": /api/v1/status did not answer a status document");
  }
  return j;
}

}  // namespace

namespace {

// Nothing queued, leased, running or waiting for a retry.
bool IdleJson(const json& j) {
  for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
    if (j["counts"].value(std::string(RunStateName(s)), std::int64_t{0}) > 0) return false;
  }
  return true;
}

// `trainq status --watch`: one frame per interval. On a terminal each frame
// is drawn over the last (cursor home, every line cleared to its end, the
// rest of the screen cleared), so the view updates without scrolling;
// elsewhere (a pipe, a log) frames follow each other.
Status WatchStatus(const StatusOptions& o, const Clock& clock, std::ostream& out) {
  std::optional<Store> store;
  if (o.server.empty()) {
    ASSIGN_OR_RETURN(auto s, OpenExisting(o.db));
    store.emplace(std::move(s));
  }
  bool first = true;
  while (true) {
    json j;
    if (store) {
      ASSIGN_OR_RETURN(j, StatusJson(*store, o.db, clock.Now(), 20));
    } else {
      ASSIGN_OR_RETURN(j, FetchServerStatus(o.server, o.token_file));
    }
    const bool idle = IdleJson(j);
    std::ostringstream frame;
    frame << "trainq status, every " << fmt::format("{:g}s", o.interval_ms / 1000.0) << " at "
          << FormatTimestamp(clock.Now()) << " UTC"
          << (o.until_idle ? " until nothing is left to run" : "") << " (Ctrl-C to stop)\n";
    RenderStatusText(j, frame);
    if (o.terminal) {
      out << (first ? "\x1b[H\x1b[2J" : "\x1b[H");
      std::string text = frame.str();
      // A frame taller than the terminal would scroll: it is cut to fit.
      int lines = 0;
      for (std::size_t at = 0; at < text.size();) {
        std::size_t nl = text.find('\n', at);
        if (nl == std::string::npos) nl = text.size();
        if (o.rows > 1 && ++lines >= o.rows) {
          out << "... (the terminal is too short for the rest)\x1b[K";
          break;
        }
        out << std::string_view(text).substr(at, nl - at) << "\x1b[K\n";
        at = nl + 1;
      }
      out << "\x1b[J";
    } else {
      out << (first ? "" : "\n") << frame.str();
    }
    out.flush();
    first = false;
    if ((o.until_idle && idle) || (o.stop && o.stop->load())) break;
    clock.SleepFor(o.interval_ms);
    if (o.stop && o.stop->load()) break;
  }
  return {};
}

}  // namespace

Status CmdStatus(const StatusOptions& o, const Clock& clock, std::ostream& out) {
  if (o.watch) {
    if (o.json) return Fail(ErrorKind::kInvalidArgument, "--watch draws text; leave out --json");
    if (o.interval_ms < 100) {
      return Fail(ErrorKind::kInvalidArgument, "--interval: at least 0.1 seconds");
    }
    return WatchStatus(o, clock, out);
  }
  json j;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(j, FetchServerStatus(o.server, o.token_file));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    // The text view shows the newest 20 batches: read only those (and count
    // the rest), so a deep queue costs what the screen shows.
    ASSIGN_OR_RETURN(j, StatusJson(store, o.db, clock.Now(), o.json ? 0 : 20));
  }
  if (o.json) {
    out << j.dump(2) << "\n";
    return {};
  }
  RenderStatusText(j, out);
  return {};
}

Status CmdRuns(const RunsOptions& o, std::ostream& out) {
  std::optional<RunState> state;
  if (!o.state.empty()) {
    state = ParseRunState(o.state);
    if (!state) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--state: unknown state '" + o.state +
                      "' (queued, leased, running, succeeded, failed, dead, cancelled)");
    }
  }
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  if (o.batch) {
    ASSIGN_OR_RETURN(auto b, store.runs().Batch(*o.batch));
    if (!b) return Fail(ErrorKind::kNotFound, "batch " + std::to_string(*o.batch) +
                                                  " does not exist");
  }
  ASSIGN_OR_RETURN(auto runs, store.runs().Runs(o.batch, state, o.limit));
  if (o.json) {
    json j = json::array();
    for (const auto& r : runs) j.push_back(RunJson(r));
    out << j.dump(2) << "\n";
    return {};
  }
  if (runs.empty()) {
    out << "no runs\n";
    return {};
  }
  Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "STATE", "ATTEMPTS", "METRIC", "NOTE"});
  for (const auto& r : runs) {
    std::string note = r.last_error;
    if (r.state == RunState::kFailed && r.not_before_ms) {
      note = "retry at " + FormatTimestamp(*r.not_before_ms) + " UTC: " + note;
    }
    t.Add({std::to_string(r.id), std::to_string(r.batch_id), r.experiment,
           std::to_string(r.seed), std::string(RunStateName(r.state)),
           std::to_string(r.attempts) + "/" + std::to_string(r.max_attempts),
           r.metric_value ? FormatDouble(*r.metric_value, 4) : "-", Oneline(note, 120)});
  }
  out << t.Render();
  return {};
}

Status CmdCancel(const CancelOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  if (o.run) {
    ASSIGN_OR_RETURN(int n, store.runs().CancelRun(o.id, clock.Now()));
    if (n) AuditLocal(store, "cancel_run", "run " + std::to_string(o.id), "1 run(s)", clock.Now());
    if (o.json) {
      out << json{{"run", o.id}, {"cancelled", n}}.dump(2) << "\n";
      return {};
    }
    out << (n ? "run " + std::to_string(o.id) + " cancelled\n"
              : "run " + std::to_string(o.id) + " had already ended; nothing to cancel\n");
    return {};
  }
  ASSIGN_OR_RETURN(auto batch, store.runs().Batch(o.id));
  if (batch && batch->reuses_batch_id) {
    // Its runs are another batch's: cancelling them here would take them
    // from every commit that reuses them, so that is said, not done.
    std::int64_t source = *batch->reuses_batch_id;
    if (o.json) {
      out << json{{"batch", o.id}, {"cancelled", 0}, {"reuses_batch", source}}.dump(2) << "\n";
      return {};
    }
    out << "batch " << o.id << ": nothing to cancel: it has no runs of its own, it reuses batch "
        << source << "'s (at " << ShortSha(batch->reused_from_sha) << "); `trainq cancel "
        << source << "` cancels those, for every commit that reuses them\n";
    return {};
  }
  ASSIGN_OR_RETURN(int n, store.runs().CancelBatch(o.id, clock.Now()));
  if (n) {
    AuditLocal(store, "cancel_batch", "batch " + std::to_string(o.id),
               std::to_string(n) + " run(s)", clock.Now());
  }
  if (o.json) {
    out << json{{"batch", o.id}, {"cancelled", n}}.dump(2) << "\n";
    return {};
  }
  out << "batch " << o.id << ": " << n << " run(s) cancelled\n";
  return {};
}

// `trainq submit`, `repro`, `status`, `runs`, `cancel`.
Status CmdRetry(const RetryOptions& o, const Clock& clock, std::ostream& out) {
  json retried;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadAdminToken(o.token_file, o.server));
    ReadClient client(o.server, token);
    ASSIGN_OR_RETURN(retried, client.Retry(o.id, o.batch));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    ASSIGN_OR_RETURN(retried, RetryRuns(store, o.id, o.batch, clock.Now(), LocalWho()));
    if (!retried["retried"].empty()) {
      AuditLocal(store, o.batch ? "retry_batch" : "retry_run",
                 std::string(o.batch ? "batch " : "run ") + std::to_string(o.id),
                 std::to_string(retried["retried"].size()) + " run(s)", clock.Now());
    }
  }
  if (o.json) {
    out << retried.dump(2) << "\n";
  } else {
    PrintRetried(retried, o.id, o.batch, out);
  }
  return {};
}

void AddQueueCommands(CLI::App& app, const CliContext& ctx) {
  // repro
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

  // submit
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

  // status
  auto status = std::make_shared<StatusOptions>();
  auto* c_status = app.add_subcommand("status", "Queue depth, running runs, slots and batch progress");
  c_status->add_flag("--json", status->json, "Print as JSON");
  c_status->add_option("--server", status->server,
                       "Ask a running `trainq serve` (its base URL; needs its read token) "
                       "instead of the database")
      ->envname("TRAINQ_SERVER");
  c_status->add_option("--token-file", status->token_file,
                       "File holding the server's read token (default: $TRAINQ_READ_TOKEN)");
  auto status_interval_s = std::make_shared<double>(2.0);
  auto* watch_flag = c_status->add_flag(
      "--watch", status->watch, "Redraw every --interval seconds (in place on a terminal) until Ctrl-C");
  c_status->add_option("--interval", *status_interval_s, "Seconds between redraws with --watch")
      ->check(CLI::PositiveNumber)
      ->needs(watch_flag);
  c_status->add_flag("--until-idle", status->until_idle,
                     "With --watch: stop once nothing is queued, running or waiting for a retry")
      ->needs(watch_flag);
  c_status->callback([=] {
    status->db = *ctx.db;
    status->interval_ms = static_cast<TimeMs>(*status_interval_s * 1000);
    if (status->watch) {
      CatchStopSignals();
      status->stop = &StopFlag();
      status->terminal = isatty(STDOUT_FILENO) != 0;
      struct winsize ws{};
      if (status->terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) status->rows = ws.ws_row;
    }
    *ctx.exit_code = ReportStatus(CmdStatus(*status, *ctx.clock, std::cout));
  });

  // runs
  auto runs = std::make_shared<RunsOptions>();
  auto* c_runs = app.add_subcommand("runs", "List runs with their state, metric and last error");
  c_runs->add_option("--batch,-b", runs->batch, "Only this batch");
  c_runs->add_option("--state", runs->state, "Only runs in this state");
  c_runs->add_option("--limit", runs->limit, "At most this many, the newest (0: all)");
  c_runs->add_flag("--json", runs->json, "Print as JSON");
  c_runs->callback([=] {
    runs->db = *ctx.db;
    // An unknown --state is a usage error: exit 2, as documented.
    bool bad_state = !runs->state.empty() && !ParseRunState(runs->state);
    *ctx.exit_code = ReportStatus(CmdRuns(*runs, std::cout)) + (bad_state ? 1 : 0);
  });

  // cancel
  auto cancel = std::make_shared<CancelOptions>();
  auto* c_cancel = app.add_subcommand("cancel", "Cancel a batch (or one run with --run)");
  c_cancel->add_option("ID", cancel->id, "Batch id (run id with --run)")->required();
  c_cancel->add_flag("--run", cancel->run, "ID names a run");
  c_cancel->add_flag("--json", cancel->json, "Print what was cancelled as JSON");
  c_cancel->callback([=] {
    cancel->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdCancel(*cancel, *ctx.clock, std::cout));
  });

  // retry
  auto retry = std::make_shared<RetryOptions>();
  auto* c_retry = app.add_subcommand(
      "retry", "Put a dead or cancelled run back in the queue (every dead run of a batch with "
               "--batch)");
  c_retry->add_option("ID", retry->id, "Run id (batch id with --batch)")->required();
  c_retry->add_flag("--batch", retry->batch, "ID names a batch: retry each of its dead runs");
  c_retry->add_flag("--json", retry->json, "Print what was retried as JSON");
  c_retry->add_option("--server", retry->server,
                      "Ask this trainq serve (base URL) instead of the database; needs its "
                      "admin token");
  c_retry->add_option("--token-file", retry->token_file,
                      "With --server: file holding the server's admin_token (else "
                      "$TRAINQ_ADMIN_TOKEN)");
  c_retry->callback([=] {
    retry->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdRetry(*retry, *ctx.clock, std::cout));
  });

  // init
  auto* c_init = app.add_subcommand(
      "init", "Create the database (--db), or write the schema into an existing empty file");
  c_init->callback([=] { *ctx.exit_code = ReportStatus(CmdInit(*ctx.db, std::cout)); });
}

}  // namespace trainq
