#include "cloud/autoscaler.h"

#include <algorithm>
#include <set>

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
  }
  return "?";
}

namespace {

bool Gone(MachineState s) { return s == MachineState::kStopped || s == MachineState::kFailed; }

TimeMs IdleSince(const Machine& m) {
  TimeMs t = m.ready_at.value_or(m.booted_at);
  if (m.last_busy_at) t = std::max(t, *m.last_busy_at);
  return t;
}

// Appends this pool's actions in the order the caller should apply them:
// forget, stop, adopt, drain, boot.
PoolReport DecidePool(const PoolInput& in, TimeMs now, const AutoscalerOptions& o,
                      std::vector<Action>& out) {
  const PoolConfig& c = in.config;
  const std::string& pool = c.name;
  const int slots = std::max(1, c.slots);
  const int max = std::max(c.min, c.max);
  const bool provider_ok = now >= in.health.next_retry_at;

  PoolReport report;
  report.pool = pool;
  report.backing_off = !provider_ok;
  report.failing = in.health.consecutive_failures >= o.report_after;

  int leases = 0;
  for (const Machine& m : in.machines) {
    if (!Gone(m.state)) leases += m.live_leases;
  }
  report.needed = (std::max(0, in.demand) + leases + slots - 1) / slots;
  report.wanted = std::clamp(report.needed, c.min, max);

  std::set<std::string> listed;
  if (in.listing) listed.insert(in.listing->begin(), in.listing->end());

  std::vector<Action> forget, stop, adopt, drain;
  std::vector<const Machine*> idle;
  std::set<std::string> known;  // ids the store has, any state
  int live = 0;
  for (const Machine& m : in.machines) {
    if (!m.id.empty()) known.insert(m.id);
    if (Gone(m.state)) {
      // Stopped in the store but still running at the provider: stop it again.
      if (provider_ok && !m.id.empty() && listed.contains(m.id)) {
        stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "stopped but still listed", {}});
      }
      continue;
    }
    bool vanished = in.listing && !m.id.empty() && !listed.contains(m.id) &&
                    !(m.state == MachineState::kBooting && now - m.booted_at < o.listing_lag_ms);
    if (vanished) {
      forget.push_back(
          {ActionKind::kForget, pool, m.id, m.row, 0, "no longer listed by the provider", {}});
      continue;
    }
    switch (m.state) {
      case MachineState::kRequested:
      case MachineState::kBooting:
        if (now - m.booted_at > c.boot_timeout_ms) {
          if (m.id.empty()) {
            // Boot never answered: nothing to stop by id. If the machine
            // exists after all, reconcile finds it as an unknown one.
            forget.push_back(
                {ActionKind::kForget, pool, m.id, m.row, 0, "boot never answered", {}});
          } else if (provider_ok) {
            stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "missed boot_timeout", {}});
          }
        } else {
          ++live;
        }
        break;
      case MachineState::kReady:
        ++live;
        if (m.live_leases == 0 && in.demand == 0 && now - IdleSince(m) > c.idle_grace_ms) {
          idle.push_back(&m);
        }
        break;
      case MachineState::kDraining:
      case MachineState::kStopping:
        if (provider_ok) stop.push_back({ActionKind::kStop, pool, m.id, m.row, 0, "draining", {}});
        break;
      case MachineState::kStopped:
      case MachineState::kFailed:
        break;
    }
  }

  if (in.listing) {
    for (const std::string& id : *in.listing) {
      if (known.contains(id)) continue;
      if (live < report.wanted) {
        adopt.push_back(
            {ActionKind::kAdopt, pool, id, 0, 0, "tagged machine unknown to the store", {}});
        ++live;
      } else if (provider_ok) {
        stop.push_back({ActionKind::kStop, pool, id, 0, 0, "tagged machine not wanted", {}});
      }
    }
  }

  if (provider_ok) {
    // Longest idle first; keep `min` live machines.
    std::stable_sort(idle.begin(), idle.end(), [](const Machine* a, const Machine* b) {
      return IdleSince(*a) < IdleSince(*b);
    });
    for (const Machine* m : idle) {
      if (live <= c.min) break;
      drain.push_back({ActionKind::kDrain, pool, m->id, m->row, 0,
                       "idle past idle_grace, queue empty", DrainGuard{m->last_busy_at}});
      --live;
    }
  }

  for (auto* group : {&forget, &stop, &adopt, &drain}) {
    out.insert(out.end(), group->begin(), group->end());
  }
  if (provider_ok && live < report.wanted) {
    out.push_back({ActionKind::kBoot, pool, "", 0, report.wanted - live, "demand", {}});
    live = report.wanted;
  }
  report.live = live;
  return report;
}

}  // namespace

Decision Autoscale(const std::vector<PoolInput>& pools, TimeMs now,
                   const AutoscalerOptions& options) {
  Decision d;
  for (const PoolInput& p : pools) d.pools.push_back(DecidePool(p, now, options, d.actions));
  return d;
}

bool DrainAllowed(const Action& drain, const DrainCheck& seen) {
  return drain.kind == ActionKind::kDrain && seen.state == MachineState::kReady &&
         seen.live_leases == 0 && seen.runnable_queued == 0 &&
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

}  // namespace trainq::cloud
