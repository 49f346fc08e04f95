#include "agent/commands.h"

#include <signal.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

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

std::string DefaultDbPath() {
  const char* env = std::getenv("TRAINQ_DB");
  if (env && *env) return env;
  return "trainq.db";
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
  auto manifest = ParseManifest(*text, kManifestName);
  if (!manifest) {
    return std::unexpected(manifest.error().Wrap(repo.location() + " at " + Short(commit.sha)));
  }
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
  std::vector<BatchSpec> specs;
  for (const auto* e : chosen) {
    BatchSpec b = e->ToBatchSpec("submitted by hand (trainq submit)");
    if (o.repeats) b.repeats = *o.repeats;
    specs.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db));
  ASSIGN_OR_RETURN(auto results, store.Submit(repo.location(), commit, specs, clock.Now()));

  if (o.json) {
    json j = {{"repo", repo.location()}, {"commit", commit.sha}, {"batches", json::array()}};
    for (size_t i = 0; i < results.size(); ++i) {
      j["batches"].push_back({{"id", results[i].batch_id},
                              {"experiment", results[i].experiment},
                              {"created", results[i].created},
                              {"runs_added", results[i].runs_added},
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
    if (r.created) {
      out << r.runs_added << " runs queued (seeds " << specs[i].seed_start << ".."
          << specs[i].seed_start + specs[i].repeats - 1 << ")\n";
    } else if (r.runs_added > 0) {
      out << "already submitted; " << r.runs_added << " more runs queued\n";
    } else {
      out << "already submitted; nothing added\n";
    }
  }
  out << "Run them with `trainq serve --db " << o.db << "`; watch with `trainq status`.\n";
  return {};
}

Result<json> StatusJson(Store& store, const std::string& db, TimeMs now) {
  ASSIGN_OR_RETURN(auto counts, store.CountByState());
  ASSIGN_OR_RETURN(auto machines, store.Machines(false));
  ASSIGN_OR_RETURN(auto running, store.Runs(std::nullopt, RunState::kRunning, 0));
  ASSIGN_OR_RETURN(auto leased, store.Runs(std::nullopt, RunState::kLeased, 0));
  running.insert(running.end(), leased.begin(), leased.end());
  // Active batches always; the most recent finished ones after them.
  ASSIGN_OR_RETURN(auto batches, store.Batches(true, 0));
  ASSIGN_OR_RETURN(auto recent, store.Batches(false, 10));
  std::set<std::int64_t> seen;
  for (const auto& b : batches) seen.insert(b.id);
  for (auto& b : recent) {
    if (!seen.count(b.id)) batches.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(auto push_counts, store.CountPushesByState());
  ASSIGN_OR_RETURN(auto pushes, store.RecentPushes(10));

  int slots = 0;
  for (const auto& m : machines) {
    if (m.state == "ready" && now - m.last_seen_ms < kMachineSilentMs) slots += m.slots;
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
    j["machines"].push_back({{"id", m.id},
                             {"pool", m.pool},
                             {"provider", m.provider},
                             {"provider_id", m.provider_id},
                             {"state", m.state},
                             {"slots", m.slots},
                             {"gpus", m.gpus},
                             {"last_seen_ms", m.last_seen_ms},
                             {"silent", now - m.last_seen_ms >= kMachineSilentMs}});
  }
  j["running"] = json::array();
  for (const auto& r : running) {
    json rj = RunJson(r);
    rj["elapsed_ms"] = r.started_ms ? now - *r.started_ms : 0;
    j["running"].push_back(rj);
  }
  j["batches"] = json::array();
  for (const auto& b : batches) j["batches"].push_back(BatchJson(b));
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
  out << "slots:    " << j["slots"].value("busy", std::int64_t{0}) << " busy / " << slots
      << " available";
  if (slots == 0) out << " (no `trainq serve` is running against this database)";
  out << "\n";
  for (const auto& m : j["machines"]) {
    TimeMs last_seen = m.value("last_seen_ms", TimeMs{0});
    out << "          " << m.value("provider", "") << " " << m.value("provider_id", "") << ": "
        << m.value("slots", 0) << " slot(s), "
        << (m.value("silent", false) ? "silent for " + FormatDuration(now - last_seen)
                                     : m.value("state", ""))
        << "\n";
  }
  if (!j["running"].empty()) {
    out << "running:\n";
    Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "ATTEMPT", "ELAPSED", "WORKER"});
    for (const auto& r : j["running"]) {
      t.Add({std::to_string(r.value("id", std::int64_t{0})),
             std::to_string(r.value("batch", std::int64_t{0})), r.value("experiment", ""),
             std::to_string(r.value("seed", std::int64_t{0})),
             std::to_string(r.value("attempts", 0)) + "/" + std::to_string(r.value("max_attempts", 0)),
             r["started_ms"].is_number() ? FormatDuration(r.value("elapsed_ms", TimeMs{0}))
                                         : "starting",
             r.value("worker", "")});
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
           r.metric_value ? FormatDouble(*r.metric_value, 4) : "-", Oneline(note, 80)});
  }
  out << t.Render();
  return {};
}

Status CmdCancel(const CancelOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  if (o.run) {
    ASSIGN_OR_RETURN(int n, store.CancelRun(o.id, clock.Now()));
    out << (n ? "run " + std::to_string(o.id) + " cancelled\n"
              : "run " + std::to_string(o.id) + " had already ended; nothing to cancel\n");
    return {};
  }
  ASSIGN_OR_RETURN(int n, store.CancelBatch(o.id, clock.Now()));
  out << "batch " << o.id << ": " << n << " run(s) cancelled\n";
  return {};
}

}  // namespace trainq
