// The plain records the store hands out and takes in: run states, commits,
// batch specs, leased runs, metric points, run and machine rows. Code that only
// passes them around includes this header, not the whole Store.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"

namespace trainq {

enum class RunState { kQueued, kLeased, kRunning, kSucceeded, kFailed, kDead, kCancelled };
inline constexpr int kRunStateCount = 7;
std::string_view RunStateName(RunState s);
std::optional<RunState> ParseRunState(std::string_view name);
bool IsTerminal(RunState s);

struct CommitInfo {
  std::string sha;
  std::string parent_sha;  // empty for a root commit
  std::string message;     // first line
  std::string author;
  TimeMs committed_ms = 0;
};

// What one batch will run; resolved from trainq.yaml at submit time, so that a
// run never depends on reading the manifest again.
struct BatchSpec {
  std::string experiment;
  std::string command;       // shell command, {seed}/{repeat}/{output_dir} substituted at run time
  std::string metric_name = "accuracy";
  std::string metric_goal = "max";  // max | min
  std::string metric_regex;  // empty: read the metrics file only
  int repeats = 10;
  std::int64_t seed_start = 1;
  int gpus = 0;
  std::int64_t timeout_s = 7200;
  int max_attempts = 3;
  std::string reason;        // why it runs (submitted by hand, which path matched ...)
  std::string spec_json = "{}";  // the experiment's resolved definition, for the record
  std::string pool;          // resources.pool: the pool whose machines run it; "" = any pool
};

struct SubmitResult {
  std::int64_t batch_id = 0;
  std::string experiment;
  bool created = false;  // false: the batch existed already
  int runs_added = 0;
  // The existing batch reuses another (Store::ReuseBatch): nothing was added.
  std::optional<std::int64_t> reuses_batch_id;
};

struct LeasedRun {
  std::int64_t run_id = 0;
  std::int64_t batch_id = 0;
  std::int64_t token = 0;
  std::int64_t seed = 0;
  int repeat = 0;
  int attempt = 0;  // 1 for the first try
  TimeMs expires_ms = 0;
  std::string experiment;
  std::string command;
  std::string metric_name;
  std::string metric_regex;
  std::string repo_url;
  std::string sha;
  std::int64_t timeout_s = 0;
  int gpus = 0;
  std::string trainer;     // the experiment's `trainer:` spec path, "" for a plain command
  std::int64_t group = 0;  // runs leased fused (one process) share a group id > 0
  // A gang run (resources.nodes / processes_per_node; queue/gangs.cc):
  // nodes > 0, and this lease is the member of node `node_rank` on the machine.
  int nodes = 0;
  int procs_per_node = 0;
  int node_rank = 0;
  // trainq.yaml `env_passthrough:` (names or PREFIX*): narrows the variables
  // the operator lets runs have (the pool's env_passthrough); nullopt: not
  // narrowed.
  std::optional<std::vector<std::string>> env_passthrough;
};

struct MetricPoint {
  std::string name;
  double value = 0;
  std::optional<std::int64_t> step;
  bool final = false;
};

struct RunRow {
  std::int64_t id = 0;
  std::int64_t batch_id = 0;
  std::string experiment;
  std::string sha;
  std::int64_t seed = 0;
  int repeat = 0;
  RunState state = RunState::kQueued;
  int attempts = 0;
  int max_attempts = 0;
  std::string worker;
  std::optional<TimeMs> started_ms;
  std::optional<TimeMs> finished_ms;
  std::optional<TimeMs> not_before_ms;
  std::optional<int> exit_code;
  std::optional<double> metric_value;
  std::string last_error;
  std::string log_path;
  int retries = 0;  // times RetryRun put it back in the queue (RunQueue::Retries)
};

// One earlier round of a run's attempts, kept by RunQueue::RetryRun when the
// run went back in the queue: what it ended with.
struct RunRetry {
  TimeMs retried_ms = 0;
  std::string who;       // who asked ("cli", "admin session 1a2b3c4d")
  RunState state = RunState::kDead;  // dead or cancelled
  int attempts = 0;      // attempts used in that round
  std::optional<int> exit_code;
  std::optional<TimeMs> finished_ms;
  std::string last_error;
};

struct BatchProgress {
  std::int64_t id = 0;
  std::string repo;
  std::string sha;
  std::string parent_sha;
  std::string subject;
  std::string experiment;
  std::string metric_name;
  std::string metric_goal;
  std::string reason;
  int repeats = 0;
  TimeMs created_ms = 0;
  std::array<std::int64_t, kRunStateCount> counts{};
  std::vector<double> values;  // metric of succeeded runs, by repeat
  std::vector<std::int64_t> seeds;  // seed of each value
  std::string spec_json;   // the experiment's resolved definition
  std::string repo_url;
  TimeMs committed_ms = 0;
  std::int64_t seed_start = 1;  // the lowest seed of its runs
  // Baseline (schema 5): the commit it is compared with ("" = not chosen yet:
  // its parent is used), the batch chosen at that commit or at an ancestor
  // with the same inputs, and how it was chosen (or why there is none).
  std::string base_sha;
  std::optional<std::int64_t> baseline_batch_id;
  std::string baseline_note;
  // Reuse (schema 12): the batch whose runs this one takes as its own (its
  // inputs were the same at that commit), and that batch's commit. Counts,
  // values and seeds above are that batch's.
  std::optional<std::int64_t> reuses_batch_id;
  std::string reused_from_sha;
  // Machine time (the cost of a verdict, docs/STATISTICS.md): the summed
  // finished - started of its runs that ran (each run's last attempt), and
  // the GPUs each run held.
  std::int64_t run_ms = 0;
  int gpus = 0;
  // The evaluation set size its succeeded runs reported (metric points named
  // `eval_examples`, docs/trainq-yaml.md): the fewest and the most; absent
  // when no run reported one. The test-set noise floor (docs/STATISTICS.md).
  std::optional<double> eval_examples_min, eval_examples_max;

  std::int64_t count(RunState s) const { return counts[static_cast<int>(s)]; }
  bool active() const;  // anything left to run
};

// MachineRow::last_error of a machine the fleet marked lost (state `failed`).
inline constexpr std::string_view kLostPrefix = "lost: ";

struct MachineRow {
  std::int64_t id = 0;
  std::string pool;
  std::string provider;
  std::string provider_id;  // unique per pool among live (not stopped/failed) machines
  std::string state;  // requested | booting | ready | draining | stopping | stopped | failed
  int slots = 0;
  int gpus = 0;
  TimeMs created_ms = 0;  // = booted_ms
  TimeMs last_seen_ms = 0;
  std::string last_error;
  std::string name;       // the provider's name for it (unique when not empty)
  std::string hostname;
  std::string resources_json = "{}";  // what its worker registered (gpus, cpus, memory)
  double hourly_cost = 0;
  std::optional<TimeMs> ready_ms;      // its worker registered
  std::optional<TimeMs> last_busy_ms;  // it last took, ran or finished a run
  std::optional<TimeMs> stopped_ms;
  bool lost() const { return state == "failed" && last_error.starts_with(kLostPrefix); }
  // Computed on read:
  int live_leases = 0;     // leased/running runs on it
  int runs_done = 0;       // succeeded runs on it
  TimeMs busy_ms = 0;      // run time on it (running ones up to now / their last heartbeat)
};

struct DeliveryRow {
  std::string forge;
  std::string delivery_id;
  std::string event;
  std::string repo_url;
  std::string ref;
  std::string before_sha;
  std::string after_sha;
};

}  // namespace trainq
