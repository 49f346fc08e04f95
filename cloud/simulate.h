// `trainq simulate`: replays a trace of pushes through a scaling policy on a
// virtual clock, with a boot delay and per-second billing. Pure: no clock, no
// I/O; cloud/autoscaler.h's Autoscale() is the policy under test, a fixed idle
// timeout the baseline beside it.
//
// Trace format (text, one item per line, '#' starts a comment):
//   pool NAME [min=0] [max=N] [slots=N] [idle_grace=2m] [boot_timeout=10m] [hourly_cost=X]
//        [broken=1] [failing_after=3] [boot_backoff=1m] [budget_day=X] [budget_month=X]
//        [drain_at_cap=1]
//   (broken=1: its machines never register, as with an unreachable server URL;
//   they are stopped at boot_timeout)
//   TIME POOL EXPERIMENT REPEATS DURATION
// TIME is the push's time of day, HH:MM or HH:MM:SS (a trace covers one day);
// DURATION is each run's length ("45m", "1h30m"). Lines with the same TIME are
// one push. Pools are declared before the pushes that use them.
//
// The model, one virtual second at a time: runs that end release their slot;
// pushed runs join their pool's queue (FIFO); machines whose boot delay has
// passed become ready; ready machines lease queued runs into free slots (a
// worker long-polls, so it takes work the second it appears); every `tick`
// the policy decides and its actions apply at once (the simulated provider
// never fails, so Adopt and Forget do not occur). A machine is billed from its
// Boot call to its stop, per second, at least `min_bill`; it is busy while it
// holds a lease.
//
// Latency of a batch (one experiment of one push): from the push to its last
// result. Ideal: boot delay + ceil(repeats / (slots x max)) x duration, the
// batch alone on an empty pool; with max = 1 that is the issue's
// boot + ceil(runs / slots) x run time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cloud/autoscaler.h"
#include "core/result.h"

namespace trainq::cloud {

struct TraceBatch {
  TimeMs at_ms = 0;  // since the start of the day
  std::string pool;
  std::string experiment;
  int repeats = 1;
  TimeMs duration_ms = 0;
};

struct Trace {
  std::vector<PoolConfig> pools;
  std::vector<bool> broken;  // per pool: machines never register
  std::vector<TraceBatch> batches;  // sorted by time
  int pushes = 0;
};

// Errors name the file and line: "weekday.trace:12: REPEATS: expected ...".
Result<Trace> ParseTrace(std::string_view text, std::string_view filename);

struct SimPolicy {
  enum class Kind { kAutoscaler, kIdleTimeout } kind = Kind::kAutoscaler;
  // kIdleTimeout: boot for the queued runs that free slots cannot take, stop a
  // machine once it has been idle this long, whatever the queue.
  TimeMs idle_timeout_ms = 10 * 60'000;
};

struct SimOptions {
  TimeMs boot_delay_ms = 90'000;
  TimeMs tick_ms = 10'000;      // how often the policy runs
  TimeMs min_bill_ms = 60'000;  // the cloud's minimum charge per boot
  // 0: until every run is done. N: the trace's day repeated N times, and the
  // simulation ends after N days, finished or not.
  int days = 0;
  // The boot back-off / failing state and the budgets (false: the autoscaler
  // without them, as before they existed).
  bool safeguards = true;
};

struct BatchLatency {
  std::string experiment;
  TimeMs pushed_ms = 0;
  TimeMs latency_ms = 0;
  TimeMs ideal_ms = 0;
};

struct SimResult {
  TimeMs billed_ms = 0;
  TimeMs busy_ms = 0;
  double cost = 0;
  int peak_machines = 0;
  int boots = 0;
  int runs = 0;
  int unfinished_runs = 0;  // days > 0: runs not done when the period ended
  int failed_boots = 0;     // machines stopped without ever registering
  std::vector<std::string> failing_pools;  // pools failing at the end
  std::vector<BatchLatency> batches;       // finished batches only when days > 0

  double billed_over_busy() const;
  double mean_latency_ratio() const;   // mean of latency / ideal over batches
  double worst_latency_ratio() const;  // max of latency / ideal
  double total_latency_ratio() const;  // sum of latencies / sum of ideals
};

Result<SimResult> Simulate(const Trace& trace, const SimPolicy& policy, const SimOptions& options);

}  // namespace trainq::cloud
