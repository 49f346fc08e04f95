#include "agent/commands.h"

#include "agent/baseline.h"

#include <signal.h>
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
#include <set>

#include "agent/change_detect.h"
#include "agent/executor.h"
#include "agent/git_repo.h"
#include "agent/manifest.h"
#include "agent/mirror.h"
#include "agent/server.h"
#include "agent/server_config.h"
#include "agent/server_http.h"
#include "agent/server_worker.h"
#include "agent/webhook.h"
#include "agent/table.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/store.h"
#include "stats/summary.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

namespace {

constexpr const char* kManifestName = "trainq.yaml";
// A machine not heard from for this long is shown as silent.
constexpr TimeMs kMachineSilentMs = 60'000;
// A pool whose provider failed this many calls in a row is reported failing.
constexpr int kPoolFailingAfter = 3;

Result<Store> OpenExisting(const std::string& db) {
  StoreOptions so;
  so.create = false;
  return Store::Open(db, so);
}

std::string Short(const std::string& sha) { return sha.substr(0, 10); }


json SummaryJson(const std::vector<double>& values) {
  auto s = stats::Summarize(values);
  json j = {{"n", s.n}};
  if (s.n > 0) {
    j["mean"] = s.mean;
    j["sd"] = s.n > 1 ? json(s.sd) : json(nullptr);
    j["min"] = s.min;
    j["max"] = s.max;
  }
  return j;
}


json RunJson(const RunRow& r) {
  json j = {{"id", r.id},
            {"batch", r.batch_id},
            {"experiment", r.experiment},
            {"commit", r.sha},
            {"seed", r.seed},
            {"repeat", r.repeat},
            {"state", std::string(RunStateName(r.state))},
            {"attempts", r.attempts},
            {"max_attempts", r.max_attempts},
            {"worker", r.worker},
            {"started_ms", r.started_ms ? json(*r.started_ms) : json(nullptr)},
            {"finished_ms", r.finished_ms ? json(*r.finished_ms) : json(nullptr)},
            {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
            {"metric", r.metric_value ? json(*r.metric_value) : json(nullptr)},
            {"error", r.last_error},
            {"log", r.log_path}};
  if (r.not_before_ms) j["retry_at_ms"] = *r.not_before_ms;
  return j;
}

std::string Oneline(std::string s, size_t max) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

}  // namespace

std::string ProgressText(const BatchProgress& b) {
  std::int64_t total = 0;
  for (auto c : b.counts) total += c;
  std::string text = std::to_string(b.count(RunState::kSucceeded)) + "/" + std::to_string(total) +
                     " done";
  std::int64_t failed = b.count(RunState::kDead) + b.count(RunState::kFailed);
  text += ", " + std::to_string(failed) + " failed";
  if (b.count(RunState::kRunning) + b.count(RunState::kLeased) > 0) {
    text += ", " + std::to_string(b.count(RunState::kRunning) + b.count(RunState::kLeased)) +
            " running";
  }
  if (b.count(RunState::kCancelled) > 0) {
    text += ", " + std::to_string(b.count(RunState::kCancelled)) + " cancelled";
  }
  return text;
}

json BatchJson(const BatchProgress& b) {
  json counts = json::object();
  std::int64_t total = 0;
  for (int i = 0; i < kRunStateCount; ++i) {
    counts[std::string(RunStateName(static_cast<RunState>(i)))] = b.counts[i];
    total += b.counts[i];
  }
  return {{"id", b.id},
          {"repo", b.repo},
          {"commit", b.sha},
          {"parent", b.parent_sha},
          {"subject", b.subject},
          {"experiment", b.experiment},
          {"metric", b.metric_name},
          {"goal", b.metric_goal},
          {"reason", b.reason},
          {"repeats", b.repeats},
          {"runs", total},
          {"counts", counts},
          {"done", b.count(RunState::kSucceeded)},
          {"failed", b.count(RunState::kDead) + b.count(RunState::kFailed)},
          {"values", b.values},
          {"summary", SummaryJson(b.values)}};
}

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
  err << "trainq: warning: uncommitted changes to " << list << " are not part of " << Short(commit.sha)
      << "; the runs use the committed version (commit first, or pass --allow-dirty)\n";
}

Status CmdSubmit(const SubmitOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto repo, GitRepo::Open(o.repo));
  ASSIGN_OR_RETURN(auto commit, repo.Resolve(o.commit));
  auto text = repo.ReadFile(commit.sha, kManifestName);
  if (!text) {
    if (text.error().kind == ErrorKind::kNotFound) {
      return Fail(ErrorKind::kNotFound,
                  std::string(kManifestName) + " not found at commit " + Short(commit.sha) +
                      " in " + repo.location() +
                      " (add one at the repository root; see examples/trainq.yaml)");
    }
    return std::unexpected(text.error());
  }
  std::string file_label = std::string(kManifestName) + "@" + Short(commit.sha);
  const std::string at = repo.location() + " at " + Short(commit.sha);
  if (auto st = CheckManifestSize(text->size(), kManifestName, o.limits); !st) {
    return std::unexpected(st.error().Wrap(at));
  }
  auto manifest = ParseManifest(*text, kManifestName);
  if (!manifest) return std::unexpected(manifest.error().Wrap(at));
  std::vector<const Experiment*> chosen;
  if (o.experiments.empty()) {
    for (const auto& e : manifest->experiments) chosen.push_back(&e);
  } else {
    for (const auto& name : o.experiments) {
      const Experiment* e = manifest->Find(name);
      if (!e) {
        std::string known;
        for (const auto& n : manifest->Names()) known += (known.empty() ? "" : ", ") + n;
        return Fail(ErrorKind::kNotFound, "unknown experiment '" + name + "' in " + file_label +
                                              " (known: " + known + ")");
      }
      chosen.push_back(e);
    }
  }
  if (o.repeats && *o.repeats <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--repeats: expected a positive integer, got " + std::to_string(*o.repeats));
  }
  auto read = [&](const std::string& path) { return repo.ReadFile(commit.sha, path); };
  if (auto st = CheckExperiments(chosen, kManifestName, read); !st) {
    return std::unexpected(st.error().Wrap(at));
  }
  std::vector<BatchSpec> specs;
  for (const auto* e : chosen) {
    BatchSpec b = e->ToBatchSpec("submitted by hand (trainq submit)");
    if (o.repeats) b.repeats = *o.repeats;
    specs.push_back(std::move(b));
  }
  TRY(CheckSubmitLimits(specs, file_label, o.limits));
  if (!o.allow_dirty) WarnUncommitted(repo, commit, chosen, std::cerr);
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db));
  ASSIGN_OR_RETURN(auto results, store.Submit(repo.location(), commit, specs, clock.Now()));
  // Each new batch is compared with its experiment at the parent commit, or
  // at the nearest ancestor with the same inputs (agent/baseline.h); with
  // --with-baseline a missing one is queued at the parent with the same seeds.
  std::vector<std::string> baselines(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSIGN_OR_RETURN(auto batch, store.Batch(results[i].batch_id));
    if (!batch || !batch->base_sha.empty() || commit.parent_sha.empty()) continue;
    BaselineOptions bo;
    bo.queue_missing = o.with_baseline;
    ASSIGN_OR_RETURN(baselines[i], ChooseBaseline(store, repo.location(), *batch,
                                                  commit.parent_sha, clock.Now(), bo));
    ASSIGN_OR_RETURN(batch, store.Batch(results[i].batch_id));
    if (!batch->baseline_batch_id) baselines[i].clear();
  }

  if (o.json) {
    json j = {{"repo", repo.location()}, {"commit", commit.sha}, {"batches", json::array()}};
    for (size_t i = 0; i < results.size(); ++i) {
      j["batches"].push_back({{"id", results[i].batch_id},
                              {"experiment", results[i].experiment},
                              {"created", results[i].created},
                              {"runs_added", results[i].runs_added},
                              {"baseline", baselines[i]},
                              {"seeds", {specs[i].seed_start, specs[i].seed_start +
                                                                  specs[i].repeats - 1}}});
    }
    out << j.dump(2) << "\n";
    return {};
  }
  out << "commit " << Short(commit.sha) << " \"" << commit.message << "\" in " << repo.location()
      << "\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    out << "  batch " << r.batch_id << "  " << r.experiment << ": ";
    const std::int64_t first = specs[i].seed_start;
    const std::int64_t last = first + specs[i].repeats - 1;
    if (r.created) {
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
    if (!baselines[i].empty()) out << "    baseline: " << baselines[i] << "\n";
  }
  out << "Run them with `trainq serve --db " << o.db << "`; watch with `trainq status`.\n";
  return {};
}

Result<json> StatusJson(Store& store, const std::string& db, TimeMs now) {
  ASSIGN_OR_RETURN(auto counts, store.CountByState());
  ASSIGN_OR_RETURN(auto machines, store.Machines(false, now));
  ASSIGN_OR_RETURN(auto costs, store.Costs(now, false));
  ASSIGN_OR_RETURN(auto health, store.PoolHealth());
  ASSIGN_OR_RETURN(auto pool_states, store.PoolStates());
  ASSIGN_OR_RETURN(auto running, store.Runs(std::nullopt, RunState::kRunning, 0));
  ASSIGN_OR_RETURN(auto leased, store.Runs(std::nullopt, RunState::kLeased, 0));
  running.insert(running.end(), leased.begin(), leased.end());
  // Active batches always; the most recent finished ones after them.
  ASSIGN_OR_RETURN(auto batches, store.Batches(true, 0));
  ASSIGN_OR_RETURN(auto recent, store.Batches(false, 10));
  std::set<std::int64_t> seen;
  for (const auto& b : batches) seen.insert(b.id);
  for (auto& b : recent) {
    // A batch cancelled as a whole is gone from view (`trainq runs` still has it).
    std::int64_t total = 0;
    for (auto c : b.counts) total += c;
    if (total > 0 && b.count(RunState::kCancelled) == total) continue;
    if (!seen.count(b.id)) batches.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(auto push_counts, store.CountPushesByState());
  ASSIGN_OR_RETURN(auto pushes, store.RecentPushes(10));

  // Runs a machine holds: fleet workers lease with the machine's id
  // (live_leases); the in-process executor (`serve --inproc`) leases under its
  // worker name "local/<provider id>" without one.
  std::map<std::string, int> by_worker;
  for (const auto& r : running) ++by_worker[r.worker];
  auto busy_runs = [&](const MachineRow& m) {
    int n = m.live_leases;
    if (n == 0 && m.provider == "local" && !m.provider_id.empty()) {
      if (auto it = by_worker.find("local/" + m.provider_id); it != by_worker.end()) n = it->second;
    }
    return n;
  };
  auto counts_slots = [&](const MachineRow& m) {
    return m.state == "ready" && now - m.last_seen_ms < kMachineSilentMs;
  };

  int slots = 0;
  for (const auto& m : machines) {
    if (counts_slots(m)) slots += m.slots;
  }

  json j;
  j["db"] = db;
  j["now_ms"] = now;
  json c = json::object();
  for (int i = 0; i < kRunStateCount; ++i) {
    c[std::string(RunStateName(static_cast<RunState>(i)))] = counts[i];
  }
  j["counts"] = c;
  j["slots"] = {{"total", slots}, {"busy", running.size()}};
  j["machines"] = json::array();
  for (const auto& m : machines) {
    int busy = busy_runs(m);
    // Idle: a ready machine holding no run, since it last worked (or became
    // ready). Only fleet and registered workers (they have a name) record when
    // they last worked; the in-process executor does not.
    json idle = nullptr;
    if (m.state == "ready" && busy == 0 && !m.name.empty()) {
      TimeMs since = std::max(m.ready_ms.value_or(m.created_ms), m.last_busy_ms.value_or(0));
      idle = std::max<TimeMs>(0, now - since);
    }
    j["machines"].push_back({{"id", m.id},
                             {"pool", m.pool},
                             {"name", m.name},
                             {"provider", m.provider},
                             {"provider_id", m.provider_id},
                             {"hostname", m.hostname},
                             {"state", m.state},
                             {"slots", m.slots},
                             {"gpus", m.gpus},
                             {"busy", busy},
                             {"booted_ms", m.created_ms},
                             {"last_seen_ms", m.last_seen_ms},
                             {"idle_ms", idle},
                             {"last_error", m.last_error},
                             {"silent", now - m.last_seen_ms >= kMachineSilentMs}});
  }
  // Per pool: machines by state, slots on ready machines, machine time billed
  // against time spent running (all machines the pool ever had), and the
  // provider's health. Pools in name order: every pool with a machine now,
  // with a machine once (costs), or with a provider failure on record.
  std::map<std::string, json> pools;
  auto pool_json = [&](const std::string& name) -> json& {
    auto [it, fresh] = pools.try_emplace(name);
    if (fresh) {
      it->second = {{"pool", name},
                    {"machines", json::object()},
                    {"slots", {{"total", 0}, {"busy", 0}}},
                    {"machines_booted", 0},
                    {"billed_ms", 0},
                    {"busy_ms", 0},
                    {"cost", 0.0},
                    {"provider_failures", 0},
                    {"provider_error", ""},
                    {"provider_next_retry_ms", nullptr},
                    {"failing", false}};
    }
    return it->second;
  };
  for (const auto& m : machines) {
    json& p = pool_json(m.pool);
    p["machines"][m.state] = p["machines"].value(m.state, 0) + 1;
    if (counts_slots(m)) {
      p["slots"]["total"] = p["slots"]["total"].get<int>() + m.slots;
      p["slots"]["busy"] = p["slots"]["busy"].get<int>() + busy_runs(m);
    }
  }
  json totals = {{"machines_booted", 0}, {"billed_ms", 0}, {"busy_ms", 0}, {"cost", 0.0}};
  for (const auto& c : costs) {
    json& p = pool_json(c.pool);
    p["machines_booted"] = c.machines;
    p["billed_ms"] = c.billed_ms;
    p["busy_ms"] = c.busy_ms;
    p["cost"] = c.cost;
    totals["machines_booted"] = totals["machines_booted"].get<int>() + c.machines;
    totals["billed_ms"] = totals["billed_ms"].get<TimeMs>() + c.billed_ms;
    totals["busy_ms"] = totals["busy_ms"].get<TimeMs>() + c.busy_ms;
    totals["cost"] = totals["cost"].get<double>() + c.cost;
  }
  for (const auto& h : health) {
    if (h.consecutive_failures == 0 && !pools.count(h.pool)) continue;
    json& p = pool_json(h.pool);
    p["provider_failures"] = h.consecutive_failures;
    p["provider_error"] = h.last_error;
    if (h.consecutive_failures > 0) p["provider_next_retry_ms"] = h.next_retry_ms;
    p["failing"] = h.consecutive_failures >= kPoolFailingAfter;
  }
  // Boot outcomes and budgets (the fleet's pool_state rows; "*" is all pools).
  auto budget_json = [](const Store::PoolStateRow& s) -> json {
    if (s.budget_per_day <= 0 && s.budget_per_month <= 0) return nullptr;
    return {{"per_day", s.budget_per_day},     {"per_month", s.budget_per_month},
            {"spent_day", s.spent_day},        {"spent_month", s.spent_month},
            {"cap", s.cap}};
  };
  j["budget"] = nullptr;
  for (const auto& s : pool_states) {
    if (s.pool == "*") {
      j["budget"] = budget_json(s);
      continue;
    }
    if (s.failed_boots == 0 && !s.failing && budget_json(s).is_null() && !pools.count(s.pool)) {
      continue;
    }
    json& p = pool_json(s.pool);
    p["boots"] = {{"failed", s.failed_boots},
                  {"failing", s.failing},
                  {"next_boot_ms", s.failed_boots > 0 && !s.failing ? json(s.next_boot_ms)
                                                                    : json(nullptr)},
                  {"error", s.failed_boots > 0 || s.failing ? s.boot_error : ""},
                  {"log_tail", s.failed_boots > 0 || s.failing ? s.log_tail : ""}};
    p["budget"] = budget_json(s);
  }
  j["pools"] = json::array();
  for (auto& [name, p] : pools) j["pools"].push_back(std::move(p));
  j["costs"] = totals;
  j["running"] = json::array();
  std::map<std::int64_t, std::string> metric_of;
  for (const auto& b : batches) metric_of[b.id] = b.metric_name;
  for (const auto& r : running) {
    json rj = RunJson(r);
    rj["elapsed_ms"] = r.started_ms ? now - *r.started_ms : 0;
    // Live progress: the latest value of each metric the run has reported so
    // far (workers ship new points with every heartbeat), and its last step.
    ASSIGN_OR_RETURN(auto points, store.Metrics(r.id));
    if (!points.empty()) {
      json latest = json::object();
      std::optional<std::int64_t> step;
      for (const auto& pt : points) {
        latest[pt.name] = pt.value;
        if (pt.step) step = std::max(step.value_or(*pt.step), *pt.step);
      }
      rj["latest"] = {{"metrics", latest},
                      {"step", step ? json(*step) : json(nullptr)},
                      {"metric", metric_of[r.batch_id]}};
    }
    j["running"].push_back(rj);
  }
  j["batches"] = json::array();
  for (const auto& b : batches) j["batches"].push_back(BatchJson(b));
  // Why runnable runs wait: notes `trainq serve` keeps (no pool can serve
  // them, their pool fails to boot), and runs in backoff before a retry.
  ASSIGN_OR_RETURN(auto waiting, store.WaitingBatches(now));
  ASSIGN_OR_RETURN(auto failed, store.Runs(std::nullopt, RunState::kFailed, 0));
  std::map<std::int64_t, std::string> experiment_of;
  for (const auto& b : batches) experiment_of[b.id] = b.experiment;
  j["waiting"] = json::array();
  for (const auto& w : waiting) {
    j["waiting"].push_back({{"batch", w.batch_id},
                            {"experiment", experiment_of[w.batch_id]},
                            {"runs", w.runs},
                            {"reason", w.note}});
  }
  std::map<std::int64_t, std::pair<std::int64_t, TimeMs>> backoff;  // batch -> runs, earliest
  for (const auto& r : failed) {
    if (!r.not_before_ms || *r.not_before_ms <= now) continue;
    auto& [n, at] = backoff.try_emplace(r.batch_id, 0, *r.not_before_ms).first->second;
    ++n;
    at = std::min(at, *r.not_before_ms);
  }
  for (const auto& [batch, v] : backoff) {
    j["waiting"].push_back({{"batch", batch},
                            {"experiment", experiment_of[batch]},
                            {"runs", v.first},
                            {"reason", "backoff until " + FormatTimestamp(v.second) +
                                           " UTC after a failed attempt"},
                            {"until_ms", v.second}});
  }
  // Pushes received by webhook or seen by polling, newest first.
  json pc = json::object();
  for (const auto& [state, n] : push_counts) pc[state] = n;
  j["pushes"] = {{"counts", pc}, {"recent", json::array()}};
  for (const auto& p : pushes) {
    j["pushes"]["recent"].push_back({{"id", p.id},
                                     {"source", p.source},
                                     {"repo", p.repo_url},
                                     {"ref", p.ref},
                                     {"before", p.before_sha},
                                     {"after", p.after_sha},
                                     {"state", p.state},
                                     {"attempts", p.attempts},
                                     {"result", p.result},
                                     {"error", p.error},
                                     {"received_ms", p.received_ms}});
  }
  return j;
}

namespace {

std::string Money(double v) { return fmt::format("${:.2f}", v); }

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

std::string ProgressTextJson(const json& b) {
  BatchProgress p;
  for (int i = 0; i < kRunStateCount; ++i) {
    p.counts[i] = b["counts"].value(std::string(RunStateName(static_cast<RunState>(i))), 0);
  }
  return ProgressText(p);
}

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

// The terminal view of StatusJson's document (the same whether it came from
// the store or from a server's /api/v1/status).
void RenderStatusText(const json& j, std::ostream& out) {
  TimeMs now = j.value("now_ms", TimeMs{0});
  out << "queue:   ";
  for (int i = 0; i < kRunStateCount; ++i) {
    std::string name(RunStateName(static_cast<RunState>(i)));
    out << (i ? " · " : " ") << name << " " << j["counts"].value(name, std::int64_t{0});
  }
  out << "\n";
  std::int64_t slots = j["slots"].value("total", std::int64_t{0});
  const json no_machines = json::array();
  const json& machines = j.contains("machines") ? j["machines"] : no_machines;
  out << "slots:    " << j["slots"].value("busy", std::int64_t{0}) << " busy / " << slots
      << " available";
  if (slots == 0 && machines.empty()) {
    // The fleet keeps no machine while nothing is queued (min 0), so this is
    // also what a running serve looks like between batches.
    out << " (no machine is up: `trainq serve` boots them while runs are queued)";
  }
  out << "\n";
  auto machine_line = [&](const json& m) {
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
    } else {
      out << ", " << m.value("slots", 0) << " slot(s)";
    }
    out << "\n";
  };
  if (!j.contains("pools")) {  // a server from before pools
    for (const auto& m : machines) machine_line(m);
  } else {
    static constexpr std::string_view kStateOrder[] = {
        "ready", "booting", "requested", "draining", "stopping", "failed", "stopped"};
    for (const auto& p : j["pools"]) {
      std::string pool = p.value("pool", "");
      std::vector<std::string> parts;
      for (auto st : kStateOrder) {
        int n = p["machines"].value(std::string(st), 0);
        if (n > 0) parts.push_back(std::to_string(n) + " " + std::string(st));
      }
      out << "pool " << pool << ": "
          << (parts.empty() ? std::string("no machines")
                            : fmt::format("{}", fmt::join(parts, ", ")));
      if (!parts.empty()) {
        out << "; slots " << p["slots"].value("busy", 0) << " busy / "
            << p["slots"].value("total", 0);
      }
      TimeMs billed = p.value("billed_ms", TimeMs{0});
      TimeMs busy = p.value("busy_ms", TimeMs{0});
      if (p.value("machines_booted", 0) > 0) {
        out << "; billed " << FormatDuration(billed) << BusyOf(busy) << ", cost "
            << Money(p.value("cost", 0.0));
      }
      out << "\n";
      if (p.value("failing", false)) {
        out << "          provider failing (" << p.value("provider_failures", 0)
            << " calls in a row";
        if (p["provider_next_retry_ms"].is_number()) {
          TimeMs retry = p["provider_next_retry_ms"].get<TimeMs>();
          out << "; next try " << (retry > now ? "in " + FormatDuration(retry - now) : "now");
        }
        out << "): " << Oneline(p.value("provider_error", ""), 120) << "\n";
      }
      if (p.contains("boots") && p["boots"].is_object()) {
        const json& b = p["boots"];
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
      if (p.contains("budget") && p["budget"].is_object()) {
        out << "          budget: " << BudgetText(p["budget"]) << "\n";
      }
      for (const auto& m : machines) {
        if (m.value("pool", "") == pool) machine_line(m);
      }
    }
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
  if (!j["running"].empty()) {
    out << "running:\n";
    Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "ATTEMPT", "ELAPSED", "WORKER", "LATEST"});
    for (const auto& r : j["running"]) {
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
  const json& pushes = j.contains("pushes") ? j["pushes"]["recent"] : json::array();
  if (!pushes.empty()) {
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
             p.value("after", "").substr(0, 7), state, Oneline(note, 80)});
    }
    out << t.Render("  ");
  }
  auto batches = j["batches"];
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
  size_t hidden = batches.size() > kShown ? batches.size() - kShown : 0;
  size_t i = 0;
  for (const auto& b : batches) {
    if (i++ >= kShown) break;
    t.Add({std::to_string(b.value("id", std::int64_t{0})), b.value("commit", "").substr(0, 7),
           b.value("experiment", ""), ProgressTextJson(b),
           b.value("metric", "") + " " + SummaryTextJson(b)});
  }
  out << t.Render("  ");
  if (hidden) {
    out << "  ... and " << hidden << " more (trainq status --json, trainq report)\n";
  }
}

Result<json> FetchServerStatus(const std::string& server) {
  std::string base = server;
  while (!base.empty() && base.back() == '/') base.pop_back();
  CurlHttpClient http;
  ASSIGN_OR_RETURN(auto resp, http.Send({"GET", base + "/api/v1/status", {}, "", 10'000}));
  if (!resp.ok()) {
    return Fail(ErrorKind::kUnavailable, "--server " + UrlForLog(base) + ": HTTP " +
                                             std::to_string(resp.status) + " from /api/v1/status");
  }
  json j = json::parse(resp.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("counts")) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base) + ": /api/v1/status did not answer a status document");
  }
  return j;
}

}  // namespace

Status CmdStatus(const StatusOptions& o, const Clock& clock, std::ostream& out) {
  json j;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(j, FetchServerStatus(o.server));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    ASSIGN_OR_RETURN(j, StatusJson(store, o.db, clock.Now()));
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
    ASSIGN_OR_RETURN(auto b, store.Batch(*o.batch));
    if (!b) return Fail(ErrorKind::kNotFound, "batch " + std::to_string(*o.batch) +
                                                  " does not exist");
  }
  ASSIGN_OR_RETURN(auto runs, store.Runs(o.batch, state, o.limit));
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
    ASSIGN_OR_RETURN(int n, store.CancelRun(o.id, clock.Now()));
    if (o.json) {
      out << json{{"run", o.id}, {"cancelled", n}}.dump(2) << "\n";
      return {};
    }
    out << (n ? "run " + std::to_string(o.id) + " cancelled\n"
              : "run " + std::to_string(o.id) + " had already ended; nothing to cancel\n");
    return {};
  }
  ASSIGN_OR_RETURN(int n, store.CancelBatch(o.id, clock.Now()));
  if (o.json) {
    out << json{{"batch", o.id}, {"cancelled", n}}.dump(2) << "\n";
    return {};
  }
  out << "batch " << o.id << ": " << n << " run(s) cancelled\n";
  return {};
}

}  // namespace trainq
