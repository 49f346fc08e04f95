#include "cloud/simulate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/strings.h"

namespace trainq::cloud {

namespace {

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

template <typename T>
std::optional<T> Number(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// "HH:MM" or "HH:MM:SS" -> ms since midnight.
std::optional<TimeMs> TimeOfDay(std::string_view s) {
  std::vector<std::string> parts = Split(s, ':');
  if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
  TimeMs total = 0;
  const int limits[] = {24, 60, 60};
  for (size_t i = 0; i < 3; ++i) {
    int v = 0;
    if (i < parts.size()) {
      auto n = Number<int>(parts[i]);
      if (!n || *n < 0 || *n >= limits[i]) return std::nullopt;
      v = *n;
    }
    total = total * 60 + v;
  }
  return total * 1000;
}

}  // namespace

Result<Trace> ParseTrace(std::string_view text, std::string_view filename) {
  Trace trace;
  std::map<std::string, size_t, std::less<>> pools;
  int line_no = 0;
  auto fail = [&](const std::string& what) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string(filename) + ":" + std::to_string(line_no) + ": " + what);
  };
  for (const std::string& raw : Split(text, '\n')) {
    ++line_no;
    std::string_view line = raw;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> w = Words(line);
    if (w.empty()) continue;
    if (w[0] == "pool") {
      if (w.size() < 2) return fail("pool: expected a name");
      PoolConfig c;
      c.name = std::string(w[1]);
      c.max = 8;
      bool broken = false;
      for (size_t i = 2; i < w.size(); ++i) {
        size_t eq = w[i].find('=');
        if (eq == std::string_view::npos)
          return fail("expected KEY=VALUE, got \"" + std::string(w[i]) + "\"");
        std::string_view key = w[i].substr(0, eq), value = w[i].substr(eq + 1);
        std::string bad = std::string(key) + ": invalid value \"" + std::string(value) + "\"";
        if (key == "min" || key == "max" || key == "slots") {
          auto n = Number<int>(value);
          if (!n || *n < 0) return fail(bad);
          (key == "min" ? c.min : key == "max" ? c.max : c.slots) = *n;
        } else if (key == "idle_grace" || key == "boot_timeout") {
          auto s = ParseDurationSeconds(value);
          if (!s) return fail(bad);
          (key == "idle_grace" ? c.idle_grace_ms : c.boot_timeout_ms) = *s * 1000;
        } else if (key == "hourly_cost" || key == "budget_day" || key == "budget_month") {
          auto d = Number<double>(value);
          if (!d || *d < 0) return fail(bad);
          (key == "hourly_cost" ? c.hourly_cost
           : key == "budget_day" ? c.budget_per_day
                                 : c.budget_per_month) = *d;
        } else if (key == "broken" || key == "drain_at_cap") {
          if (value != "0" && value != "1") return fail(bad);
          if (key == "broken") broken = value == "1";
          if (key == "drain_at_cap") c.drain_at_cap = value == "1";
        } else if (key == "failing_after") {
          auto n = Number<int>(value);
          if (!n || *n < 1) return fail(bad);
          c.failing_after = *n;
        } else if (key == "boot_backoff") {
          auto s = ParseDurationSeconds(value);
          if (!s || *s <= 0) return fail(bad);
          c.boot_backoff_ms = *s * 1000;
        } else {
          return fail("unknown pool key \"" + std::string(key) +
                      "\" (min, max, slots, idle_grace, boot_timeout, hourly_cost, broken, "
                      "failing_after, boot_backoff, budget_day, budget_month, drain_at_cap)");
        }
      }
      if (c.slots < 1 || c.max < 1 || c.min > c.max) {
        return fail("pool " + c.name + ": needs slots >= 1, max >= 1, min <= max");
      }
      if (pools.contains(c.name)) return fail("pool " + c.name + " declared twice");
      pools[c.name] = trace.pools.size();
      trace.pools.push_back(std::move(c));
      trace.broken.push_back(broken);
      continue;
    }
    if (w.size() != 5) return fail("expected TIME POOL EXPERIMENT REPEATS DURATION");
    TraceBatch b;
    auto at = TimeOfDay(w[0]);
    if (!at) return fail("TIME: expected HH:MM or HH:MM:SS, got \"" + std::string(w[0]) + "\"");
    b.at_ms = *at;
    b.pool = std::string(w[1]);
    if (!pools.contains(b.pool)) return fail("pool \"" + b.pool + "\" is not declared above");
    b.experiment = std::string(w[2]);
    auto repeats = Number<int>(w[3]);
    if (!repeats || *repeats < 1)
      return fail("REPEATS: expected a positive integer, got \"" + std::string(w[3]) + "\"");
    b.repeats = *repeats;
    auto dur = ParseDurationSeconds(w[4]);
    if (!dur || *dur <= 0)
      return fail("DURATION: expected e.g. 45m, got \"" + std::string(w[4]) + "\"");
    b.duration_ms = *dur * 1000;
    trace.batches.push_back(std::move(b));
  }
  if (trace.batches.empty()) {
    return Fail(ErrorKind::kInvalidArgument, std::string(filename) + ": no pushes");
  }
  std::stable_sort(trace.batches.begin(), trace.batches.end(),
                   [](const TraceBatch& a, const TraceBatch& b) { return a.at_ms < b.at_ms; });
  std::set<TimeMs> times;
  for (const TraceBatch& b : trace.batches) times.insert(b.at_ms);
  trace.pushes = static_cast<int>(times.size());
  return trace;
}

double SimResult::billed_over_busy() const {
  return busy_ms > 0 ? static_cast<double>(billed_ms) / static_cast<double>(busy_ms) : 0;
}

double SimResult::mean_latency_ratio() const {
  if (batches.empty()) return 0;
  double sum = 0;
  for (const auto& b : batches)
    sum += static_cast<double>(b.latency_ms) / static_cast<double>(b.ideal_ms);
  return sum / static_cast<double>(batches.size());
}

double SimResult::worst_latency_ratio() const {
  double worst = 0;
  for (const auto& b : batches) {
    worst = std::max(worst, static_cast<double>(b.latency_ms) / static_cast<double>(b.ideal_ms));
  }
  return worst;
}

double SimResult::total_latency_ratio() const {
  TimeMs lat = 0, ideal = 0;
  for (const auto& b : batches) {
    lat += b.latency_ms;
    ideal += b.ideal_ms;
  }
  return ideal > 0 ? static_cast<double>(lat) / static_cast<double>(ideal) : 0;
}

namespace {

constexpr TimeMs kStep = 1000;
constexpr TimeMs kDay = 24 * 3600'000LL;

struct SimMachine {
  Machine m;
  size_t pool = 0;
  bool judged = false;   // its boot outcome is recorded
  bool drained = false;  // stopped on purpose (idle, budget): no failed boot
  TimeMs stopped_at = -1;
  std::vector<std::pair<TimeMs, size_t>> leases;  // (end, batch)
  bool stopped() const { return stopped_at >= 0; }
};

struct SimRun {
  size_t batch = 0;
  TimeMs duration_ms = 0;
};

class Simulation {
 public:
  Simulation(const Trace& trace, const SimPolicy& policy, const SimOptions& options)
      : trace_(trace), policy_(policy), options_(options), queues_(trace.pools.size()) {
    for (size_t i = 0; i < trace.pools.size(); ++i) pool_index_[trace.pools[i].name] = i;
    remaining_.resize(trace.batches.size());
    finished_.assign(trace.batches.size(), 0);
    for (size_t i = 0; i < trace.batches.size(); ++i) remaining_[i] = trace.batches[i].repeats;
  }

  Result<SimResult> Run() {
    const TimeMs give_up = trace_.batches.back().at_ms + 7 * 24 * 3600'000LL;
    const TimeMs end = options_.days * kDay;
    boot_.assign(trace_.pools.size(), BootHealth{});
    TimeMs t = 0;
    for (;; t += kStep) {
      if (options_.days > 0 && t >= end) break;
      if (options_.days == 0 && t > give_up) {
        return Fail(ErrorKind::kInternal,
                    "simulate: runs still unfinished a week after the last push");
      }
      FinishRuns(t);
      Arrive(t);
      CompleteBoots(t);
      LeaseRuns(t);
      if (t % options_.tick_ms == 0) TRY(Decide(t));
      int live = 0;
      for (SimMachine& s : machines_) {
        if (s.stopped()) continue;
        ++live;
        if (!s.leases.empty()) result_.busy_ms += kStep;
      }
      result_.peak_machines = std::max(result_.peak_machines, live);
      if (Done(live)) break;
    }
    for (SimMachine& s : machines_) {
      if (!s.stopped()) s.stopped_at = t;
      TimeMs billed = std::max(options_.min_bill_ms, s.stopped_at - s.m.booted_at);
      billed = (billed + 999) / 1000 * 1000;
      result_.billed_ms += billed;
      result_.cost += static_cast<double>(billed) / 3600'000.0 * trace_.pools[s.pool].hourly_cost;
    }
    for (size_t i = 0; i < trace_.batches.size(); ++i) {
      const TraceBatch& b = trace_.batches[i];
      const PoolConfig& c = trace_.pools[pool_index_.at(b.pool)];
      int per_wave = std::max(1, c.slots) * std::max(1, c.max);
      TimeMs ideal = options_.boot_delay_ms + (b.repeats + per_wave - 1) / per_wave * b.duration_ms;
      result_.runs += b.repeats;
      if (remaining_[i] > 0) {
        result_.unfinished_runs += remaining_[i];
        continue;
      }
      result_.batches.push_back({b.experiment, b.at_ms, finished_[i] - b.at_ms, ideal});
    }
    for (size_t p = 0; p < trace_.pools.size(); ++p) {
      if (boot_[p].failing) result_.failing_pools.push_back(trace_.pools[p].name);
    }
    return result_;
  }

 private:
  void FinishRuns(TimeMs t) {
    for (SimMachine& s : machines_) {
      if (s.leases.empty()) continue;
      std::erase_if(s.leases, [&](const std::pair<TimeMs, size_t>& l) {
        if (l.first > t) return false;
        if (--remaining_[l.second] == 0) finished_[l.second] = t;
        return true;
      });
      s.m.live_leases = static_cast<int>(s.leases.size());
      if (s.leases.empty()) s.m.last_busy_at = t;
    }
  }

  void Arrive(TimeMs t) {
    while (next_batch_ < trace_.batches.size() && trace_.batches[next_batch_].at_ms <= t) {
      const TraceBatch& b = trace_.batches[next_batch_];
      auto& q = queues_[pool_index_.at(b.pool)];
      for (int r = 0; r < b.repeats; ++r) q.push_back({next_batch_, b.duration_ms});
      ++next_batch_;
    }
  }

  void CompleteBoots(TimeMs t) {
    for (SimMachine& s : machines_) {
      if (s.pool < trace_.broken.size() && trace_.broken[s.pool]) continue;  // never registers
      if (!s.stopped() && s.m.state == MachineState::kBooting &&
          t >= s.m.booted_at + options_.boot_delay_ms) {
        s.m.state = MachineState::kReady;
        s.m.ready_at = t;
      }
    }
  }

  void LeaseRuns(TimeMs t) {
    for (SimMachine& s : machines_) {
      if (s.stopped() || s.m.state != MachineState::kReady) continue;  // never lease to draining
      auto& q = queues_[s.pool];
      while (!q.empty() && static_cast<int>(s.leases.size()) < trace_.pools[s.pool].slots) {
        s.leases.push_back({t + q.front().duration_ms, q.front().batch});
        q.pop_front();
        s.m.last_busy_at = t;
      }
      s.m.live_leases = static_cast<int>(s.leases.size());
    }
  }

  void Boot(size_t pool, int count, TimeMs t) {
    for (int i = 0; i < count; ++i) {
      SimMachine s;
      s.m.id = "sim-" + std::to_string(machines_.size() + 1);
      s.m.state = MachineState::kBooting;
      s.m.booted_at = t;
      s.pool = pool;
      by_id_[s.m.id] = machines_.size();
      machines_.push_back(std::move(s));
      ++result_.boots;
    }
  }

  void StopMachine(SimMachine& s, TimeMs t) {
    s.m.state = MachineState::kStopped;
    s.m.stopped_at = t;
    s.stopped_at = t;
  }

  // The fleet's boot judging (agent/daemon/fleet.cc), on the simulated machines.
  void JudgeBoots(TimeMs t) {
    for (size_t i = 0; i < machines_.size(); ++i) {
      SimMachine& s = machines_[i];
      if (s.judged) continue;
      BootOutcome o = JudgeBoot(s.m, t);
      if (o == BootOutcome::kUndecided) continue;
      s.judged = true;
      if (o == BootOutcome::kFailed && s.drained) continue;  // stopped on purpose
      if (o == BootOutcome::kFailed) ++result_.failed_boots;
      if (!options_.safeguards) continue;
      boot_[s.pool] = RecordBoot(boot_[s.pool], o == BootOutcome::kSucceeded, t,
                                 trace_.pools[s.pool]);
    }
  }

  Spend SpendOf(size_t pool, TimeMs t) const {
    std::vector<BilledMachine> spans;
    for (const SimMachine& s : machines_) {
      if (s.pool != pool) continue;
      spans.push_back({s.m.booted_at, s.stopped() ? std::optional<TimeMs>(s.stopped_at)
                                                  : std::nullopt,
                       trace_.pools[pool].hourly_cost});
    }
    // The simulation starts at midnight on the first of a month.
    return {SpendBetween(spans, t - t % kDay, t, options_.min_bill_ms),
            SpendBetween(spans, 0, t, options_.min_bill_ms)};
  }

  Status Decide(TimeMs t) {
    if (policy_.kind == SimPolicy::Kind::kIdleTimeout) {
      DecideIdleTimeout(t);
      return {};
    }
    JudgeBoots(t);
    std::vector<PoolInput> inputs;
    for (size_t p = 0; p < trace_.pools.size(); ++p) {
      PoolInput in;
      in.config = trace_.pools[p];
      in.config.min_bill_ms = options_.min_bill_ms;
      if (options_.safeguards) {
        in.boot = boot_[p];
        if (in.config.budget_per_day > 0 || in.config.budget_per_month > 0) in.spend = SpendOf(p, t);
      } else {
        in.config.budget_per_day = 0;
        in.config.budget_per_month = 0;
      }
      in.demand = static_cast<int>(queues_[p].size());
      in.listing.emplace();
      for (const SimMachine& s : machines_) {
        if (s.pool != p || s.stopped()) continue;
        in.machines.push_back(s.m);
        in.listing->push_back(s.m.id);
      }
      inputs.push_back(std::move(in));
    }
    Decision d = Autoscale(inputs, t);
    for (const Action& a : d.actions) {
      size_t pool = pool_index_.at(a.pool);
      switch (a.kind) {
        case ActionKind::kBoot:
          Boot(pool, a.count, t);
          break;
        case ActionKind::kDrain: {
          // The simulated store's transaction: re-check, then drain and stop.
          SimMachine& s = machines_[by_id_.at(a.machine)];
          DrainCheck seen{s.m.state, s.m.live_leases, s.m.last_busy_at,
                          static_cast<int>(queues_[pool].size())};
          if (DrainAllowed(a, seen)) {
            s.drained = true;
            if (s.leases.empty()) {
              StopMachine(s, t);
            } else {
              s.m.state = MachineState::kDraining;  // a budget drain: finishes its runs
            }
          }
          break;
        }
        case ActionKind::kStop: {
          SimMachine& s = machines_[by_id_.at(a.machine)];
          s.drained = true;  // a budget stop, or a draining machine done
          StopMachine(s, t);
          break;
        }
        case ActionKind::kLost:
          // Missed boot_timeout (a broken pool's machines never register);
          // simulated workers never go silent once registered.
          StopMachine(machines_[by_id_.at(a.machine)], t);
          break;
        case ActionKind::kAdopt:
        case ActionKind::kForget:
        case ActionKind::kEnded:  // the simulation reports no machine over
          return Fail(
              ErrorKind::kInternal,
              "simulate: unexpected " + std::string(ActionKindName(a.kind)) + " of " + a.machine);
      }
    }
    return {};
  }

  void DecideIdleTimeout(TimeMs t) {
    for (size_t p = 0; p < trace_.pools.size(); ++p) {
      const PoolConfig& c = trace_.pools[p];
      int live = 0, free = 0;
      for (SimMachine& s : machines_) {
        if (s.pool != p || s.stopped()) continue;
        TimeMs idle_since =
            std::max(s.m.ready_at.value_or(s.m.booted_at), s.m.last_busy_at.value_or(0));
        if (s.m.state == MachineState::kReady && s.leases.empty() &&
            t - idle_since >= policy_.idle_timeout_ms && LiveCount(p) > c.min) {
          StopMachine(s, t);
          continue;
        }
        ++live;
        free += c.slots - static_cast<int>(s.leases.size());
      }
      int short_runs = static_cast<int>(queues_[p].size()) - free;
      int boot = short_runs > 0 ? (short_runs + c.slots - 1) / c.slots : 0;
      boot = std::max(boot, c.min - live);
      boot = std::min(boot, c.max - live);
      if (boot > 0) Boot(p, boot, t);
    }
  }

  int LiveCount(size_t p) const {
    int n = 0;
    for (const SimMachine& s : machines_) n += s.pool == p && !s.stopped();
    return n;
  }

  bool Done(int live) const {
    if (next_batch_ < trace_.batches.size()) return false;
    for (const auto& q : queues_) {
      if (!q.empty()) return false;
    }
    for (const SimMachine& s : machines_) {
      if (!s.leases.empty()) return false;
    }
    int floor = 0;
    for (const PoolConfig& c : trace_.pools) floor += c.min;
    return live <= floor;
  }

  const Trace& trace_;
  SimPolicy policy_;
  SimOptions options_;
  std::map<std::string, size_t> pool_index_;
  std::vector<std::deque<SimRun>> queues_;
  std::vector<int> remaining_;
  std::vector<TimeMs> finished_;
  size_t next_batch_ = 0;
  std::vector<SimMachine> machines_;
  std::map<std::string, size_t> by_id_;
  std::vector<BootHealth> boot_;  // per pool
  SimResult result_;
};

}  // namespace

Result<SimResult> Simulate(const Trace& trace, const SimPolicy& policy, const SimOptions& options) {
  if (trace.pools.empty() || trace.batches.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "simulate: the trace has no pools or no pushes");
  }
  if (options.tick_ms < kStep || options.tick_ms % kStep != 0 || options.boot_delay_ms < 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "simulate: tick must be whole seconds, boot delay >= 0");
  }
  if (options.days < 0) {
    return Fail(ErrorKind::kInvalidArgument, "simulate: days must be 0 or more");
  }
  if (options.days == 0) {
    Simulation sim(trace, policy, options);
    return sim.Run();
  }
  // The day's pushes, once a day.
  Trace days = trace;
  days.batches.clear();
  for (int d = 0; d < options.days; ++d) {
    for (TraceBatch b : trace.batches) {
      b.at_ms += d * kDay;
      days.batches.push_back(std::move(b));
    }
  }
  days.pushes = trace.pushes * options.days;
  Simulation sim(days, policy, options);
  return sim.Run();
}

}  // namespace trainq::cloud
