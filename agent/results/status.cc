// What `trainq status` and GET /api/v1/status show, as JSON: batches with their
// progress and summaries, machines, pools, pushes. The CLI renders it as text
// (agent/cli/cmd_status.cc RenderStatusText); the daemon serves it as it is.
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
  json summary = SummaryJson(b.values);
  // The test-set noise floor beside the sd, when the runs reported it.
  if (auto floor = NoiseFloorJson(b); !floor.is_null()) summary["noise_floor"] = std::move(floor);
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
          {"summary", summary}};
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

namespace {

// The status document, one section at a time (StatusJson). The inputs read
// first are what several sections share: the machines, the runs that hold a
// slot, and the batches shown.
class StatusDocument {
 public:
  StatusDocument(Store& store, TimeMs now) : store_(store), now_(now) {}

  Result<json> Build(const std::string& db, int max_active) {
    ASSIGN_OR_RETURN(machines_, store_.machines().List(false, now_));
    ASSIGN_OR_RETURN(running_, store_.runs().Runs(std::nullopt, RunState::kRunning, 0));
    ASSIGN_OR_RETURN(auto leased, store_.runs().Runs(std::nullopt, RunState::kLeased, 0));
    running_.insert(running_.end(), leased.begin(), leased.end());
    for (const auto& r : running_) ++by_worker_[r.worker];
    for (const auto& m : machines_) {
      if (CountsSlots(m)) slots_ += m.slots;
    }
    TRY(ReadBatches(max_active));

    json j;
    j["db"] = db;
    j["now_ms"] = now_;
    ASSIGN_OR_RETURN(j["counts"], Counts());
    j["slots"] = {{"total", slots_}, {"busy", running_.size()}};
    j["machines"] = Machines();
    ASSIGN_OR_RETURN(auto pools, Pools());
    j["budget"] = pools.budget;
    j["pools"] = std::move(pools.pools);
    j["costs"] = std::move(pools.totals);
    ASSIGN_OR_RETURN(j["running"], Running());
    ASSIGN_OR_RETURN(j["batches"], Batches());
    j["batches_total"] = active_total_ + recent_added_;
    ASSIGN_OR_RETURN(j["waiting"], Waiting());
    ASSIGN_OR_RETURN(j["pushes"], Pushes());
    return j;
  }

 private:
  struct PoolSections {
    json pools = json::array();
    json totals;
    json budget = nullptr;  // all pools together ("*")
  };

  // Active batches always; the most recent finished ones after them.
  Status ReadBatches(int max_active) {
    ASSIGN_OR_RETURN(batches_, store_.runs().Batches(true, std::max(0, max_active)));
    active_total_ = static_cast<std::int64_t>(batches_.size());
    if (max_active > 0 && active_total_ >= max_active) {
      ASSIGN_OR_RETURN(active_total_, store_.runs().CountActiveBatches());
    }
    ASSIGN_OR_RETURN(auto recent, store_.runs().Batches(false, 10));
    std::set<std::int64_t> seen;
    for (const auto& b : batches_) seen.insert(b.id);
    for (auto& b : recent) {
      // A batch cancelled as a whole is gone from view (`trainq runs` still has it).
      std::int64_t total = 0;
      for (auto c : b.counts) total += c;
      if (total > 0 && b.count(RunState::kCancelled) == total) continue;
      if (seen.count(b.id)) continue;
      // Active but past max_active: counted in active_total already.
      if (max_active > 0 && b.active()) continue;
      batches_.push_back(std::move(b));
      ++recent_added_;
    }
    return {};
  }

  // Runs a machine holds: fleet workers lease with the machine's id
  // (live_leases); the in-process executor (`serve --inproc`) leases under its
  // worker name "local/<provider id>" without one.
  int BusyRuns(const MachineRow& m) const {
    int n = m.live_leases;
    if (n == 0 && m.provider == "local" && !m.provider_id.empty()) {
      if (auto it = by_worker_.find("local/" + m.provider_id); it != by_worker_.end()) {
        n = it->second;
      }
    }
    return n;
  }
  bool CountsSlots(const MachineRow& m) const {
    return m.state == "ready" && now_ - m.last_seen_ms < kMachineSilentMs;
  }

  Result<json> Counts() {
    ASSIGN_OR_RETURN(auto counts, store_.runs().CountByState());
    json c = json::object();
    for (int i = 0; i < kRunStateCount; ++i) {
      c[std::string(RunStateName(static_cast<RunState>(i)))] = counts[i];
    }
    return c;
  }

  json Machines() const {
    json out = json::array();
    for (const auto& m : machines_) {
      int busy = BusyRuns(m);
      // Idle: a ready machine holding no run, since it last worked (or became
      // ready). Only fleet and registered workers (they have a name) record when
      // they last worked; the in-process executor does not.
      json idle = nullptr;
      if (m.state == "ready" && busy == 0 && !m.name.empty()) {
        TimeMs since = std::max(m.ready_ms.value_or(m.created_ms), m.last_busy_ms.value_or(0));
        idle = std::max<TimeMs>(0, now_ - since);
      }
      // The machine as `trainq machines --json` has it, and what status adds.
      json mj = MachineJson(m, now_);
      mj["busy"] = busy;
      mj["idle_ms"] = idle;
      mj["silent"] = now_ - m.last_seen_ms >= kMachineSilentMs;
      out.push_back(std::move(mj));
    }
    return out;
  }

  // Boot outcomes and budgets (the fleet's pool_state rows; "*" is all pools).
  static json BudgetJson(const Machines::PoolStateRow& s) {
    if (s.budget_per_day <= 0 && s.budget_per_month <= 0) return nullptr;
    return {{"per_day", s.budget_per_day},     {"per_month", s.budget_per_month},
            {"spent_day", s.spent_day},        {"spent_month", s.spent_month},
            {"cap", s.cap}};
  }

  // Per pool: machines by state, slots on ready machines, machine time billed
  // against time spent running (all machines the pool ever had), and the
  // provider's health. Pools in name order: every pool with a machine now,
  // with a machine once (costs), or with a provider failure on record.
  Result<PoolSections> Pools() {
    ASSIGN_OR_RETURN(auto costs, store_.machines().Costs(now_, false));
    ASSIGN_OR_RETURN(auto health, store_.machines().PoolHealth());
    ASSIGN_OR_RETURN(auto pool_states, store_.machines().PoolStates());
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
    for (const auto& m : machines_) {
      json& p = pool_json(m.pool);
      p["machines"][m.state] = p["machines"].value(m.state, 0) + 1;
      if (CountsSlots(m)) {
        p["slots"]["total"] = p["slots"]["total"].get<int>() + m.slots;
        p["slots"]["busy"] = p["slots"]["busy"].get<int>() + BusyRuns(m);
      }
    }
    PoolSections out;
    out.totals = {{"machines_booted", 0}, {"billed_ms", 0}, {"busy_ms", 0}, {"cost", 0.0}};
    for (const auto& c : costs) {
      json& p = pool_json(c.pool);
      p["machines_booted"] = c.machines;
      p["billed_ms"] = c.billed_ms;
      p["busy_ms"] = c.busy_ms;
      p["cost"] = c.cost;
      out.totals["machines_booted"] = out.totals["machines_booted"].get<int>() + c.machines;
      out.totals["billed_ms"] = out.totals["billed_ms"].get<TimeMs>() + c.billed_ms;
      out.totals["busy_ms"] = out.totals["busy_ms"].get<TimeMs>() + c.busy_ms;
      out.totals["cost"] = out.totals["cost"].get<double>() + c.cost;
    }
    for (const auto& h : health) {
      if (h.consecutive_failures == 0 && !pools.count(h.pool)) continue;
      json& p = pool_json(h.pool);
      p["provider_failures"] = h.consecutive_failures;
      p["provider_error"] = h.last_error;
      if (h.consecutive_failures > 0) p["provider_next_retry_ms"] = h.next_retry_ms;
      p["failing"] = h.consecutive_failures >= kPoolFailingAfter;
    }
    for (const auto& s : pool_states) {
      if (s.pool == "*") {
        out.budget = BudgetJson(s);
        continue;
      }
      if (s.failed_boots == 0 && !s.failing && BudgetJson(s).is_null() && !pools.count(s.pool)) {
        continue;
      }
      json& p = pool_json(s.pool);
      p["boots"] = {{"failed", s.failed_boots},
                    {"failing", s.failing},
                    {"next_boot_ms", s.failed_boots > 0 && !s.failing ? json(s.next_boot_ms)
                                                                      : json(nullptr)},
                    {"error", s.failed_boots > 0 || s.failing ? s.boot_error : ""},
                    {"log_tail", s.failed_boots > 0 || s.failing ? s.log_tail : ""}};
      p["budget"] = BudgetJson(s);
    }
    // Machines lost in the last hour (their worker went silent or never
    // registered): gone from the list above, so counted here with the newest.
    ASSIGN_OR_RETURN(auto lost, store_.machines().LostMachines(now_ - 3'600'000));
    for (const auto& m : lost) {
      json& p = pool_json(m.pool);
      if (!p.contains("lost")) {
        p["lost"] = {{"last_hour", 0},
                     {"last", {{"name", m.name},
                               {"at_ms", m.stopped_ms.value_or(now_)},
                               {"reason", m.last_error.substr(kLostPrefix.size())}}}};
      }
      p["lost"]["last_hour"] = p["lost"]["last_hour"].get<int>() + 1;
    }
    for (auto& [name, p] : pools) out.pools.push_back(std::move(p));
    return out;
  }

  // The runs that hold a slot, each with its live progress: the latest value
  // of each metric it has reported so far (workers ship new points with every
  // heartbeat), and its last step.
  Result<json> Running() {
    std::map<std::int64_t, std::string> metric_of;
    for (const auto& b : batches_) metric_of[b.id] = b.metric_name;
    json out = json::array();
    for (const auto& r : running_) {
      json rj = RunJson(r);
      rj["elapsed_ms"] = r.started_ms ? now_ - *r.started_ms : 0;
      ASSIGN_OR_RETURN(auto points, store_.runs().Metrics(r.id));
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
      out.push_back(rj);
    }
    return out;
  }

  // Each batch with its determinism check, its noise drift and, while
  // active, its estimated end: the slots a batch can use are the ready slots
  // not held by other batches' runs (at least those it holds).
  Result<json> Batches() {
    const int busy_total = static_cast<int>(running_.size());
    std::map<std::string, std::vector<BatchProgress>> drift_cache;  // per experiment
    json out = json::array();
    for (const auto& b : batches_) {
      json bj = BatchJson(b);
      // `determinism: check`: whether the seed run twice agreed.
      ASSIGN_OR_RETURN(auto repro, ReproOf(store_, b));
      bj["determinism"] = repro ? json(repro->text) : json(nullptr);
      // Noise drift against earlier batches with the same inputs: said only when found.
      ASSIGN_OR_RETURN(auto drift, DriftOf(store_, b, &drift_cache));
      bj["drift"] = drift && drift->drift ? json(drift->text) : json(nullptr);
      bj["eta_ms"] = nullptr;
      bj["eta_measured_runs"] = 0;
      if (b.active()) {
        std::vector<TimeMs> elapsed;
        for (const auto& r : running_) {
          if (r.batch_id == b.id) elapsed.push_back(r.started_ms ? now_ - *r.started_ms : 0);
        }
        ASSIGN_OR_RETURN(auto durations, store_.runs().RecentRunDurations(b.id, 20));
        const int usable = slots_ - (busy_total - static_cast<int>(elapsed.size()));
        const std::int64_t waiting = b.count(RunState::kQueued) + b.count(RunState::kFailed);
        bj["eta_measured_runs"] = durations.size();
        if (auto left = EstimateRemaining(durations, elapsed, waiting, usable)) {
          bj["eta_ms"] = now_ + *left;
        }
      }
      out.push_back(std::move(bj));
    }
    return out;
  }

  // A batch's experiment; one past max_active is read on its own.
  Result<std::string> ExperimentOf(std::int64_t id) {
    if (experiment_of_.empty()) {
      for (const auto& b : batches_) experiment_of_[b.id] = b.experiment;
    }
    if (auto it = experiment_of_.find(id); it != experiment_of_.end()) return it->second;
    ASSIGN_OR_RETURN(auto b, store_.runs().Batch(id));
    return experiment_of_[id] = b ? b->experiment : "";
  }

  // Why runnable runs wait: notes `trainq serve` keeps (no pool can serve
  // them, their pool fails to boot), and runs in backoff before a retry.
  Result<json> Waiting() {
    ASSIGN_OR_RETURN(auto waiting, store_.machines().WaitingBatches(now_));
    ASSIGN_OR_RETURN(auto failed, store_.runs().Runs(std::nullopt, RunState::kFailed, 0));
    json out = json::array();
    for (const auto& w : waiting) {
      ASSIGN_OR_RETURN(auto exp, ExperimentOf(w.batch_id));
      out.push_back({{"batch", w.batch_id},
                     {"experiment", exp},
                     {"runs", w.runs},
                     {"reason", w.note}});
    }
    std::map<std::int64_t, std::pair<std::int64_t, TimeMs>> backoff;  // batch -> runs, earliest
    for (const auto& r : failed) {
      if (!r.not_before_ms || *r.not_before_ms <= now_) continue;
      auto& [n, at] = backoff.try_emplace(r.batch_id, 0, *r.not_before_ms).first->second;
      ++n;
      at = std::min(at, *r.not_before_ms);
    }
    for (const auto& [batch, v] : backoff) {
      ASSIGN_OR_RETURN(auto exp, ExperimentOf(batch));
      out.push_back({{"batch", batch},
                     {"experiment", exp},
                     {"runs", v.first},
                     {"reason", "backoff until " + FormatTimestamp(v.second) +
                                    " UTC after a failed attempt"},
                     {"until_ms", v.second}});
    }
    return out;
  }

  // Pushes received by webhook or seen by polling, newest first.
  Result<json> Pushes() {
    ASSIGN_OR_RETURN(auto push_counts, store_.pushes().CountPushesByState());
    ASSIGN_OR_RETURN(auto pushes, store_.pushes().RecentPushes(10));
    json pc = json::object();
    for (const auto& [state, n] : push_counts) pc[state] = n;
    json out = {{"counts", pc}, {"recent", json::array()}};
    for (const auto& p : pushes) {
      out["recent"].push_back({{"id", p.id},
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
    return out;
  }

  Store& store_;
  const TimeMs now_;
  std::vector<MachineRow> machines_;
  std::vector<RunRow> running_;  // running and leased
  std::map<std::string, int> by_worker_;
  int slots_ = 0;                // on ready machines
  std::vector<BatchProgress> batches_;
  std::int64_t active_total_ = 0;
  std::int64_t recent_added_ = 0;
  std::map<std::int64_t, std::string> experiment_of_;
};

}  // namespace

Result<json> StatusJson(Store& store, const std::string& db, TimeMs now, int max_active) {
  return StatusDocument(store, now).Build(db, max_active);
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
  // The sandbox form the machine's worker registered (null: not told, a
  // worker older than the probe, or a machine not registered yet).
  json sandbox = nullptr, sandbox_note = nullptr;
  if (auto r = json::parse(m.resources_json, nullptr, false); r.is_object()) {
    if (auto s = r.find("sandbox"); s != r.end() && s->is_string()) sandbox = *s;
    if (auto s = r.find("sandbox_note"); s != r.end() && s->is_string()) sandbox_note = *s;
  }
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
          {"sandbox", sandbox},
          {"sandbox_note", sandbox_note},
          {"lost", m.lost()}};
}

}  // namespace trainq
