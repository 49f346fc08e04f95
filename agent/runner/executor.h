// LocalExecutor: runs leased runs as child processes on N local slots.
// No longer used by `trainq serve` (--inproc runs the one engine, Worker, on
// a thread: agent/runner/worker.h); kept while tests/agent/executor_test.cc
// drives it.
//
// One thread drives it. Each pass of Step():
//   1. reaps children that ended and reports each result to the store;
//   2. kills runs past their timeout (SIGTERM to the group, SIGKILL after a grace);
//   3. sends heartbeats; a run whose lease was lost (cancelled, expired and
//      re-leased) is killed and forgotten, never reported;
//   4. returns expired leases of other, silent executors to the queue;
//   5. leases as many runs as there are free slots and starts them.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/process.h"
#include "core/result.h"
#include "agent/runner/gang.h"
#include "agent/runner/run_process.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

struct ExecutorOptions {
  int slots = 1;
  std::string data_dir;          // runs/<id>/ and worktrees/<sha>/ live here
  std::string worker = "local";  // name recorded on each lease
  TimeMs lease_ms = 60'000;
  TimeMs heartbeat_ms = 10'000;
  TimeMs kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL
  std::string bin_dir;            // prepended to PATH (where trainq-train lives)
  std::vector<std::string> gpus;  // GPU ids handed out per run via CUDA_VISIBLE_DEVICES
  std::vector<std::string> env_passthrough;  // our variables a run also gets (names, PREFIX*)
};

class LocalExecutor {
 public:
  LocalExecutor(Store& store, ProcessRunner& runner, const Clock& clock, ExecutorOptions options);

  // Registers this executor as a machine in the store.
  Status Register(const std::string& provider_id);
  Status Step();
  // Waits up to `max_ms` for a running run's process to end (pidfd_open +
  // poll), so a loop that calls Step() after it reaps and refills a slot at
  // once instead of after a poll interval. False without waiting when there
  // is nothing to wait on (no run, no pidfd, a clock other than the system's):
  // the caller sleeps on its clock instead.
  bool WaitForExit(TimeMs max_ms);
  int active() const { return static_cast<int>(active_.size()); }
  // True when nothing is queued, leased, running or waiting for a retry.
  Result<bool> QueueDrained();
  // Stops every child (SIGTERM, then SIGKILL after the grace) and returns its
  // run to the queue without using an attempt.
  void Shutdown(const std::string& reason);

 private:
  struct Active {
    LeasedRun run;
    RunPaths paths;
    int pid = 0;
    TimeMs started_ms = 0;
    TimeMs last_heartbeat_ms = 0;
    std::uintmax_t log_offset = 0;  // where this attempt's output starts
    std::optional<TimeMs> kill_sent_ms;
    bool timed_out = false;
    std::vector<std::string> gpus;
    // A one-machine gang (resources.processes_per_node): its processes, with
    // torchrun's variables; pid is the first one's.
    std::unique_ptr<GangProcesses> gang;
  };
  // Whether the run's process (or all of a gang's) ended, and how.
  std::optional<ExitStatus> PollActive(Active& a);
  // SIGKILL to the run's process group(s), reaped.
  void KillNow(Active& a);
  // Starts a one-machine gang's processes on 127.0.0.1 and a free port.
  Result<int> SpawnGang(Active& a, const ProcessSpec& base);

  Status StartRun(const LeasedRun& run);
  Result<std::string> Worktree(const LeasedRun& run);
  void Finish(Active& a, const ExitStatus& status);
  void Kill(Active& a, TimeMs now);

  Store& store_;
  ProcessRunner& runner_;
  const Clock& clock_;
  ExecutorOptions options_;
  std::optional<std::int64_t> machine_id_;
  TimeMs last_machine_touch_ = 0;
  std::vector<std::string> free_gpus_;
  std::map<std::int64_t, Active> active_;  // by run id
};

}  // namespace trainq
