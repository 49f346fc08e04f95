#include "cloud/autoscaler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/strings.h"

namespace trainq::cloud {

std::string_view MachineStateName(MachineState s) {
  switch (s) {
    case MachineState::kRequested:
      return "requested";
    case MachineState::kBooting:
      return "booting";
    case MachineState::kReady:
      return "ready";
    case MachineState::kDraining:
      return "draining";
    case MachineState::kStopping:
      return "stopping";
    case MachineState::kStopped:
      return "stopped";
    case MachineState::kFailed:
      return "failed";
  }
  return "?";
}

std::string_view ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kBoot:
      return "boot";
    case ActionKind::kDrain:
      return "drain";
    case ActionKind::kStop:
      return "stop";
    case ActionKind::kAdopt:
      return "adopt";
    case ActionKind::kForget:
      return "forget";
    case ActionKind::kLost:
      return "lost";
    case ActionKind::kEnded:
      return "ended";
  }
  return "?";
}

namespace {

bool Gone(MachineState s) { return s == MachineState::kStopped || s == MachineState::kFailed; }

// A registered machine whose worker has not called for lost_after.
bool Silent(const Machine& m, const PoolConfig& c, TimeMs now) {
  return c.lost_after_ms > 0 && m.ready_at && m.last_seen_at &&
         now - *m.last_seen_at > c.lost_after_ms;
}

std::string SilentFor(const Machine& m, TimeMs now) {
  return "worker silent for " + FormatDuration(now - m.last_seen_at.value_or(now));
}

TimeMs IdleSince(const Machine& m) {
  TimeMs t = m.ready_at.value_or(m.booted_at);
  if (m.last_busy_at) t = std::max(t, *m.last_busy_at);
  return t;
}

// How many more machines the caps let this pool boot (each assumed to cost
// `each`), and which cap binds ("" when none).
struct Headroom {
  int boots = 1 << 30;
  std::string cap;
  bool at_cap = false;  // spend has reached a cap
};

void ApplyCap(Headroom& h, const char* what, double cap, double spent, double each) {
  if (cap <= 0) return;
  if (spent >= cap) h.at_cap = true;
  double room = each > 0 ? std::floor((cap - spent) / each + 1e-9) : (spent >= cap ? 0 : 1e9);
  int n = static_cast<int>(std::clamp(room, 0.0, 1e9));
  if (n < h.boots) {
    h.boots = n;
    h.cap = spent >= cap ? fmt::format("{} ${:.2f} reached (${:.2f} spent)", what, cap, spent)
                         : fmt::format("{} ${:.2f} would be passed (${:.2f} spent, a boot costs "
                                       "at least ${:.2f})",
                                       what, cap, spent, each);
  }
}

// The budget caps this pass: how many boots each leaves room for, and whether
// one that is reached drains the pool.
struct Caps {
  double each = 0;  // the least a boot costs: min_bill at hourly_cost
  Headroom pool, all;
  bool drain = false;
};

Caps CapsOf(const PoolInput& in, const OverallBudget& overall) {
  const PoolConfig& c = in.config;
  Caps k;
  k.each = c.hourly_cost * static_cast<double>(c.min_bill_ms) / 3'600'000.0;
  ApplyCap(k.pool, "per_day budget", c.budget_per_day, in.spend.day, k.each);
  ApplyCap(k.pool, "per_month budget", c.budget_per_month, in.spend.month, k.each);
  ApplyCap(k.all, "overall per_day budget", overall.per_day, overall.spend.day, k.each);
  ApplyCap(k.all, "overall per_month budget", overall.per_month, overall.spend.month, k.each);
  k.drain = (k.pool.at_cap && c.drain_at_cap) || (k.all.at_cap && overall.drain_at_cap);
  return k;
}

// Machines the demand needs: the runnable runs and live leases over the
// slots, and for a gang (leased only to idle machines, all at once) the busy
// machines plus its nodes.
int MachinesNeeded(const PoolInput& in) {
  const int slots = std::max(1, in.config.slots);
  int leases = 0;
  for (const Machine& m : in.machines) {
    if (!Gone(m.state)) leases += m.live_leases;
  }
  int needed = (std::max(0, in.demand) + leases + slots - 1) / slots;
  if (in.gang_nodes > 0) {
    int busy = 0;
    for (const Machine& m : in.machines) {
      if (!Gone(m.state) && m.live_leases > 0) ++busy;
    }
    needed = std::max(needed, busy + in.gang_nodes);
  }
  return needed;
}

// One pool's pass: each machine of the store judged against the provider's
// listing (Judge), the listed machines the store does not know (JudgeUnknown),
// the idle ones drained (DrainIdle), the actions handed out in the order the
// caller applies them (Emit: forget, lost, stop, adopt, drain), then boots
// (PlanBoots).
struct PoolPass {
  const PoolInput& in;
  const PoolConfig& c = in.config;
  const std::string& pool = c.name;
  TimeMs now;
  const AutoscalerOptions& o;
  bool provider_ok;
  bool cap_drain;
  std::set<std::string> listed;
  std::vector<Action> forget, lost, stop, adopt, drain;
  std::vector<const Machine*> idle;
  std::set<std::string> known;  // ids the store has, any state
  int live = 0;
  int booting = 0;
  // A machine that never became a worker ends this pass: a failed boot. The
  // caller records it (RecordBoot) and the back-off decides the next boot,
  // so none is booted in its place in the same pass.
  bool failed_boot = false;

  PoolPass(const PoolInput& input, TimeMs t, const AutoscalerOptions& options, bool ok,
           bool drain_cap)
      : in(input), now(t), o(options), provider_ok(ok), cap_drain(drain_cap) {
    if (in.listing) listed.insert(in.listing->begin(), in.listing->end());
  }

  void Judge(const Machine& m) {
    if (!m.id.empty()) known.insert(m.id);
    if (Gone(m.state)) {
      // Stopped in the store but still running at the provider: stop it again.
      if (provider_ok && !m.id.empty() && listed.contains(m.id)) {
        stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "stopped but still listed", {}});
      }
      return;
    }
    bool vanished = in.listing && !m.id.empty() && !listed.contains(m.id) &&
                    !(m.state == MachineState::kBooting && now - m.booted_at < o.listing_lag_ms);
    if (auto e = in.ended.find(m.id); in.listing && !m.id.empty() && e != in.ended.end()) {
      failed_boot = failed_boot || (!e->second.disrupted && !m.ready_at);
      Action a{ActionKind::kEnded, pool, m.id, m.row, 0, e->second.reason, {}};
      a.disrupted = e->second.disrupted;
      lost.push_back(std::move(a));
      return;
    }
    if (vanished) {
      failed_boot = failed_boot || !m.ready_at;
      forget.push_back(
          {ActionKind::kForget, pool, m.id, m.row, 0, "no longer listed by the provider", {}});
      return;
    }
    switch (m.state) {
      case MachineState::kRequested:
      case MachineState::kBooting:
        JudgeBooting(m);
        break;
      case MachineState::kReady:
        JudgeReady(m);
        break;
      case MachineState::kDraining:
        // Only a budget drain leaves leases on a draining machine: it is
        // stopped once they are done, or lost when its worker goes silent.
        if (m.live_leases > 0) {
          if (Silent(m, c, now)) {
            lost.push_back({ActionKind::kLost, pool, m.id, m.row, 0, SilentFor(m, now), {}});
          }
          break;
        }
        [[fallthrough]];
      case MachineState::kStopping:
        if (provider_ok) stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "draining", {}});
        break;
      case MachineState::kStopped:
      case MachineState::kFailed:
        break;
    }
  }

  void JudgeBooting(const Machine& m) {
    if (cap_drain && !m.id.empty() && provider_ok) {
      stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "budget cap reached", {}});
    } else if (now - m.booted_at > c.boot_timeout_ms) {
      if (m.id.empty()) {
        // Boot never answered: nothing to stop by id. If the machine
        // exists after all, reconcile finds it as an unknown one.
        forget.push_back({ActionKind::kForget, pool, m.id, m.row, 0, "boot never answered", {}});
      } else {
        lost.push_back({ActionKind::kLost, pool, m.id, m.row, 0, "missed boot_timeout", {}});
      }
      failed_boot = true;
    } else {
      ++live;
      ++booting;
    }
  }

  void JudgeReady(const Machine& m) {
    if (Silent(m, c, now)) {
      lost.push_back({ActionKind::kLost, pool, m.id, m.row, 0, SilentFor(m, now), {}});
      return;
    }
    ++live;
    if (cap_drain && provider_ok) {
      // Busy or not: a busy one finishes its runs and leases nothing more.
      DrainGuard g{m.last_busy_at, true};
      drain.push_back({ActionKind::kDrain, pool, m.id, m.row, 0, "budget cap reached", g});
      --live;
    } else if (m.live_leases == 0 && in.demand == 0 && now - IdleSince(m) > c.idle_grace_ms) {
      idle.push_back(&m);
    }
  }

  // Tagged machines the store does not know: stopped when over or not
  // wanted, else adopted up to `wanted`.
  void JudgeUnknown(int wanted) {
    for (const std::string& id : *in.listing) {
      if (known.contains(id)) continue;
      if (in.ended.contains(id)) {
        if (provider_ok) {
          stop.push_back({ActionKind::kStop, pool, id, 0, 0,
                          "tagged machine unknown to the store, over: " + in.ended.at(id).reason,
                          {}});
        }
        continue;
      }
      if (live < wanted) {
        adopt.push_back(
            {ActionKind::kAdopt, pool, id, 0, 0, "tagged machine unknown to the store", {}});
        ++live;
      } else if (provider_ok) {
        stop.push_back({ActionKind::kStop, pool, id, 0, 0, "tagged machine not wanted", {}});
      }
    }
  }

  // Longest idle first; keep `min` live machines.
  void DrainIdle() {
    std::stable_sort(idle.begin(), idle.end(), [](const Machine* a, const Machine* b) {
      return IdleSince(*a) < IdleSince(*b);
    });
    for (const Machine* m : idle) {
      if (live <= c.min) break;
      drain.push_back({ActionKind::kDrain, pool, m->id, m->row, 0,
                       "idle past idle_grace, queue empty",
                       DrainGuard{m->last_busy_at, false, c.max}});
      --live;
    }
  }

  void Emit(std::vector<Action>& out) const {
    for (const auto* group : {&forget, &lost, &stop, &adopt, &drain}) {
      out.insert(out.end(), group->begin(), group->end());
    }
  }

  // Boots up to `wanted`: none while boots fail or back off, a cap drains or
  // a boot failed this pass; one at a time after failed boots; no more than
  // the caps leave room for (their spend counted against the pools after
  // this one).
  void PlanBoots(const Caps& caps, PoolReport& report, OverallBudget& overall,
                 std::vector<Action>& out) {
    const bool boot_ok = !report.boot_failing && !report.boot_backing_off;
    int n = report.wanted - live;
    std::string why = "demand";
    if (!boot_ok || cap_drain || failed_boot) {
      n = 0;
    } else if (in.boot.failed > 0) {
      // After a failed boot, one machine at a time until one works.
      n = std::min(n, std::max(0, 1 - booting));
      why = "demand; one at a time after " + std::to_string(in.boot.failed) + " failed boot(s)";
    }
    const int by_budget = std::min(caps.pool.boots, caps.all.boots);
    if (n > by_budget) {
      n = by_budget;
      report.cap = !caps.pool.cap.empty() ? caps.pool.cap : caps.all.cap;
      if (report.cap.empty()) report.cap = "budget: no room for more machines";
    }
    report.boots_held = report.wanted - live - n;
    if (n > 0) {
      out.push_back({ActionKind::kBoot, pool, "", 0, n, why, {}});
      live += n;
      overall.spend.day += n * caps.each;
      overall.spend.month += n * caps.each;
    }
  }
};

// Appends this pool's actions in the order the caller should apply them:
// forget, lost, stop, adopt, drain, boot.
PoolReport DecidePool(const PoolInput& in, TimeMs now, const AutoscalerOptions& o,
                      OverallBudget& overall, std::vector<Action>& out) {
  const PoolConfig& c = in.config;
  const bool provider_ok = now >= in.health.next_retry_at;
  PoolReport report;
  report.pool = c.name;
  report.backing_off = !provider_ok;
  report.failing = in.health.consecutive_failures >= o.report_after;
  report.boot_failing = in.boot.failing;
  report.boot_backing_off = !in.boot.failing && now < in.boot.next_boot_at;
  const Caps caps = CapsOf(in, overall);
  report.needed = MachinesNeeded(in);
  report.wanted = std::clamp(report.needed, c.min, std::max(c.min, c.max));

  PoolPass pass(in, now, o, provider_ok, caps.drain);
  for (const Machine& m : in.machines) pass.Judge(m);
  if (in.listing) pass.JudgeUnknown(report.wanted);
  if (provider_ok) pass.DrainIdle();
  pass.Emit(out);
  if (provider_ok && pass.live < report.wanted) pass.PlanBoots(caps, report, overall, out);
  if (report.cap.empty() && caps.drain) {
    report.cap = !caps.pool.cap.empty() ? caps.pool.cap : caps.all.cap;
  }
  report.live = pass.live;
  return report;
}

}  // namespace

Decision Autoscale(const std::vector<PoolInput>& pools, TimeMs now,
                   const AutoscalerOptions& options, const OverallBudget& overall) {
  Decision d;
  OverallBudget left = overall;  // each pool's boots count against the pools after it
  for (const PoolInput& p : pools) {
    d.pools.push_back(DecidePool(p, now, options, left, d.actions));
  }
  return d;
}

bool DrainAllowed(const Action& drain, const DrainCheck& seen) {
  if (drain.kind != ActionKind::kDrain || seen.state != MachineState::kReady) return false;
  if (drain.guard.at_cap) return true;  // a budget drain: the machine finishes its runs
  return seen.live_leases == 0 && seen.runnable_queued == 0 &&
         seen.last_busy_at == drain.guard.last_busy_at;
}

ProviderHealth RecordProviderCall(const ProviderHealth& h, bool ok, TimeMs now,
                                  const AutoscalerOptions& options) {
  if (ok) return {};
  ProviderHealth next;
  next.consecutive_failures = h.consecutive_failures + 1;
  TimeMs delay = options.backoff_base_ms;
  for (int i = 1; i < next.consecutive_failures && delay < options.backoff_cap_ms; ++i) delay *= 2;
  next.next_retry_at = now + std::min(delay, options.backoff_cap_ms);
  return next;
}

BootOutcome JudgeBoot(const Machine& m, TimeMs now, const AutoscalerOptions& o) {
  const bool ended = m.stopped_at.has_value() || Gone(m.state);
  if (!m.ready_at) return ended ? BootOutcome::kFailed : BootOutcome::kUndecided;
  if (m.last_busy_at) return BootOutcome::kSucceeded;
  const TimeMs up = m.stopped_at.value_or(now) - *m.ready_at;
  if (up >= o.quick_exit_ms) return BootOutcome::kSucceeded;
  return ended ? BootOutcome::kFailed : BootOutcome::kUndecided;
}

BootHealth RecordBoot(const BootHealth& h, bool ok, TimeMs now, const PoolConfig& pool,
                      const AutoscalerOptions& o) {
  if (ok) return {};
  const int failing_after = pool.failing_after;
  BootHealth next;
  next.failed = h.failed + 1;
  TimeMs delay = std::max<TimeMs>(1, pool.boot_backoff_ms);
  for (int i = 1; i < next.failed && delay < o.boot_backoff_cap_ms; ++i) delay *= 2;
  next.next_boot_at = now + std::min(delay, o.boot_backoff_cap_ms);
  next.failing = next.failed >= std::max(1, failing_after);
  return next;
}

double SpendBetween(const std::vector<BilledMachine>& machines, TimeMs from, TimeMs to,
                    TimeMs min_bill_ms) {
  double cost = 0;
  for (const auto& m : machines) {
    TimeMs end = m.end.value_or(to);
    if (end <= from || m.start >= to) continue;
    TimeMs billed = std::max<TimeMs>(0, std::min(end, to) - std::max(m.start, from));
    if (m.start >= from && m.start < to) billed = std::max(billed, min_bill_ms);
    cost += m.hourly_cost * static_cast<double>(billed) / 3'600'000.0;
  }
  return cost;
}

TimeMs UtcDayStart(TimeMs now) {
  constexpr TimeMs kDay = 86'400'000;
  return now - ((now % kDay) + kDay) % kDay;
}

TimeMs UtcMonthStart(TimeMs now) {
  using namespace std::chrono;
  sys_days day = floor<days>(sys_time<milliseconds>(milliseconds(now)));
  year_month_day ymd(day);
  sys_days first = ymd.year() / ymd.month() / 1;
  return duration_cast<milliseconds>(first.time_since_epoch()).count();
}

TimeMs NextListAt(TimeMs now, bool active, const PoolConfig& c, double unit) {
  TimeMs base = active ? c.list_interval_ms : std::max(c.list_interval_ms, c.list_interval_idle_ms);
  if (base <= 0) return now;
  double jitter = 0.8 + 0.4 * std::clamp(unit, 0.0, 1.0);
  return now + static_cast<TimeMs>(static_cast<double>(base) * jitter);
}

}  // namespace trainq::cloud
