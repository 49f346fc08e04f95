// What `trainq status` and GET /api/v1/status show, as JSON: batches with their
// progress and summaries, machines, pools, pushes. The CLI renders it as text
// (agent/cli/commands.cc RenderStatusText); the daemon serves it as it is.
#include "agent/results/status.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "stats/summary.h"

using nlohmann::json;

namespace trainq {

namespace {

// A machine not heard from for this long is shown as silent.
constexpr TimeMs kMachineSilentMs = 60'000;
// A pool whose provider failed this many calls in a row is reported failing.
constexpr int kPoolFailingAfter = 3;

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

}  // namespace

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
  if (r.retries > 0) j["retries"] = r.retries;
  return j;
}

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

std::optional<TimeMs> EstimateRemaining(std::vector<TimeMs> durations,
                                        const std::vector<TimeMs>& running_elapsed,
                                        std::int64_t waiting, int slots) {
  if (durations.empty()) return std::nullopt;
  std::sort(durations.begin(), durations.end());
  const std::size_t n = durations.size();
  const TimeMs typical = n % 2 ? durations[n / 2] : (durations[n / 2 - 1] + durations[n / 2]) / 2;
  slots = std::max<int>(slots, static_cast<int>(running_elapsed.size()));
  if (slots <= 0) return waiting > 0 ? std::nullopt : std::optional<TimeMs>(0);
  // When each slot is free: after the run it holds (one past the typical time
  // is taken to end about now), or at once.
  std::priority_queue<TimeMs, std::vector<TimeMs>, std::greater<>> free_at;
  TimeMs end = 0;
  for (TimeMs e : running_elapsed) {
    TimeMs left = std::max<TimeMs>(0, typical - e);
    free_at.push(left);
    end = std::max(end, left);
  }
  while (static_cast<int>(free_at.size()) < slots) free_at.push(0);
  for (std::int64_t i = 0; i < waiting; ++i) {
    TimeMs start = free_at.top();
    free_at.pop();
    free_at.push(start + typical);
    end = std::max(end, start + typical);
  }
  return end;
}

Result<json> StatusJson(Store& store, const std::string& db, TimeMs now, int max_active) {
  ASSIGN_OR_RETURN(auto counts, store.runs().CountByState());
  ASSIGN_OR_RETURN(auto machines, store.machines().List(false, now));
  ASSIGN_OR_RETURN(auto costs, store.machines().Costs(now, false));
  ASSIGN_OR_RETURN(auto health, store.machines().PoolHealth());
  ASSIGN_OR_RETURN(auto pool_states, store.machines().PoolStates());
  ASSIGN_OR_RETURN(auto running, store.runs().Runs(std::nullopt, RunState::kRunning, 0));
  ASSIGN_OR_RETURN(auto leased, store.runs().Runs(std::nullopt, RunState::kLeased, 0));
  running.insert(running.end(), leased.begin(), leased.end());
  // Active batches always; the most recent finished ones after them.
  ASSIGN_OR_RETURN(auto batches, store.runs().Batches(true, std::max(0, max_active)));
  std::int64_t active_total = static_cast<std::int64_t>(batches.size());
  if (max_active > 0 && active_total >= max_active) {
    ASSIGN_OR_RETURN(active_total, store.runs().CountActiveBatches());
  }
  ASSIGN_OR_RETURN(auto recent, store.runs().Batches(false, 10));
  std::set<std::int64_t> seen;
  for (const auto& b : batches) seen.insert(b.id);
  std::int64_t recent_added = 0;
  for (auto& b : recent) {
    // A batch cancelled as a whole is gone from view (`trainq runs` still has it).
    std::int64_t total = 0;
    for (auto c : b.counts) total += c;
    if (total > 0 && b.count(RunState::kCancelled) == total) continue;
    if (seen.count(b.id)) continue;
    // Active but past max_active: counted in active_total already.
    if (max_active > 0 && b.active()) continue;
    batches.push_back(std::move(b));
    ++recent_added;
  }
  ASSIGN_OR_RETURN(auto push_counts, store.pushes().CountPushesByState());
  ASSIGN_OR_RETURN(auto pushes, store.pushes().RecentPushes(10));

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
    // The machine as `trainq machines --json` has it, and what status adds.
    json mj = MachineJson(m, now);
    mj["busy"] = busy;
    mj["idle_ms"] = idle;
    mj["silent"] = now - m.last_seen_ms >= kMachineSilentMs;
    j["machines"].push_back(std::move(mj));
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
  auto budget_json = [](const Machines::PoolStateRow& s) -> json {
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
  // Machines lost in the last hour (their worker went silent or never
  // registered): gone from the list above, so counted here with the newest.
  ASSIGN_OR_RETURN(auto lost, store.machines().LostMachines(now - 3'600'000));
  for (const auto& m : lost) {
    json& p = pool_json(m.pool);
    if (!p.contains("lost")) {
      p["lost"] = {{"last_hour", 0},
                   {"last", {{"name", m.name},
                             {"at_ms", m.stopped_ms.value_or(now)},
                             {"reason", m.last_error.substr(kLostPrefix.size())}}}};
    }
    p["lost"]["last_hour"] = p["lost"]["last_hour"].get<int>() + 1;
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
    ASSIGN_OR_RETURN(auto points, store.runs().Metrics(r.id));
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
  // Estimated ends of active batches: the slots a batch can use are the
  // ready slots not held by other batches' runs (at least those it holds).
  int busy_total = static_cast<int>(running.size());
  j["batches"] = json::array();
  std::map<std::string, std::vector<BatchProgress>> drift_cache;  // per experiment
  for (const auto& b : batches) {
    json bj = BatchJson(b);
    // `determinism: check`: whether the seed run twice agreed.
    ASSIGN_OR_RETURN(auto repro, ReproOf(store, b));
    bj["determinism"] = repro ? json(repro->text) : json(nullptr);
    // Noise drift against earlier batches with the same inputs: said only when found.
    ASSIGN_OR_RETURN(auto drift, DriftOf(store, b, &drift_cache));
    bj["drift"] = drift && drift->drift ? json(drift->text) : json(nullptr);
    bj["eta_ms"] = nullptr;
    bj["eta_measured_runs"] = 0;
    if (b.active()) {
      std::vector<TimeMs> elapsed;
      for (const auto& r : running) {
        if (r.batch_id == b.id) elapsed.push_back(r.started_ms ? now - *r.started_ms : 0);
      }
      ASSIGN_OR_RETURN(auto durations, store.runs().RecentRunDurations(b.id, 20));
      const int usable = slots - (busy_total - static_cast<int>(elapsed.size()));
      const std::int64_t waiting = b.count(RunState::kQueued) + b.count(RunState::kFailed);
      bj["eta_measured_runs"] = durations.size();
      if (auto left = EstimateRemaining(durations, elapsed, waiting, usable)) {
        bj["eta_ms"] = now + *left;
      }
    }
    j["batches"].push_back(std::move(bj));
  }
  j["batches_total"] = active_total + recent_added;
  // Why runnable runs wait: notes `trainq serve` keeps (no pool can serve
  // them, their pool fails to boot), and runs in backoff before a retry.
  ASSIGN_OR_RETURN(auto waiting, store.machines().WaitingBatches(now));
  ASSIGN_OR_RETURN(auto failed, store.runs().Runs(std::nullopt, RunState::kFailed, 0));
  std::map<std::int64_t, std::string> experiment_of;
  for (const auto& b : batches) experiment_of[b.id] = b.experiment;
  // A waiting batch past max_active: its experiment read on its own.
  auto experiment = [&](std::int64_t id) -> Result<std::string> {
    if (auto it = experiment_of.find(id); it != experiment_of.end()) return it->second;
    ASSIGN_OR_RETURN(auto b, store.runs().Batch(id));
    return experiment_of[id] = b ? b->experiment : "";
  };
  j["waiting"] = json::array();
  for (const auto& w : waiting) {
    ASSIGN_OR_RETURN(auto exp, experiment(w.batch_id));
    j["waiting"].push_back({{"batch", w.batch_id},
                            {"experiment", exp},
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
    ASSIGN_OR_RETURN(auto exp, experiment(batch));
    j["waiting"].push_back({{"batch", batch},
                            {"experiment", exp},
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

std::string Money(double v) { return fmt::format("${:.2f}", v); }

TimeMs Billed(const MachineRow& m, TimeMs now) {
  return std::max<TimeMs>(0, m.stopped_ms.value_or(now) - m.created_ms);
}

std::string Idle(const MachineRow& m, TimeMs now) {
  if (m.state != "ready") return "-";
  if (m.live_leases > 0) return "busy";
  TimeMs since = std::max(m.ready_ms.value_or(m.created_ms), m.last_busy_ms.value_or(0));
  return FormatDuration(std::max<TimeMs>(0, now - since));
}

json MachineJson(const MachineRow& m, TimeMs now) {
  TimeMs billed = Billed(m, now);
  auto opt = [](const std::optional<TimeMs>& t) { return t ? json(*t) : json(nullptr); };
  return {{"id", m.id},
          {"pool", m.pool},
          {"name", m.name},
          {"provider", m.provider},
          {"provider_id", m.provider_id},
          {"hostname", m.hostname},
          {"state", m.state},
          {"slots", m.slots},
          {"gpus", m.gpus},
          {"booted_ms", m.created_ms},
          {"ready_ms", opt(m.ready_ms)},
          {"last_busy_ms", opt(m.last_busy_ms)},
          {"stopped_ms", opt(m.stopped_ms)},
          {"last_seen_ms", m.last_seen_ms},
          {"live_leases", m.live_leases},
          {"runs_done", m.runs_done},
          {"busy_ms", m.busy_ms},
          {"billed_ms", billed},
          {"cost", static_cast<double>(billed) / 3.6e6 * m.hourly_cost},
          {"last_error", m.last_error},
          {"lost", m.lost()}};
}

}  // namespace trainq
