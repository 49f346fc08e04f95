// `trainq simulate`: replays a trace of pushes through a scaling policy on a
// virtual clock, with a boot delay and per-second billing. Pure: no clock, no
// I/O; cloud/autoscaler.h's Autoscale() is the policy under test, a fixed idle
// timeout the baseline beside it.
//
// Trace format (text, one item per line, '#' starts a comment):
//   pool NAME [min=0] [max=N] [slots=N] [idle_grace=2m] [boot_timeout=10m] [hourly_cost=X]
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
  std::vector<BatchLatency> batches;

  double billed_over_busy() const;
  double mean_latency_ratio() const;   // mean of latency / ideal over batches
  double worst_latency_ratio() const;  // max of latency / ideal
  double total_latency_ratio() const;  // sum of latencies / sum of ideals
};

Result<SimResult> Simulate(const Trace& trace, const SimPolicy& policy, const SimOptions& options);

}  // namespace trainq::cloud
