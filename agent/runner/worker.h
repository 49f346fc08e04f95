// Worker: the one run engine. `trainq worker` runs it over HTTP; `trainq
// serve --inproc` runs it on a thread of serve over an in-process
// LeaseClient (agent/runner/lease_client.h). The messages are
// agent/runner/protocol.h's; the routes are agent/daemon/worker_api.h's.
//
// A loop over parts, each a class with its own fields, file and tests:
//   WorkerLink    (worker_link.h)          every call to the queue, the
//                                          backoff after a failure, the last
//                                          contact;
//   Registration  (worker_registration.h)  register, leave, what register's
//                                          answer sets, the self-stop command;
//   KeptResults   (worker_outbox.h)        results kept while the server was
//                                          away, and their delivery;
// and the runs themselves, still the Worker's own fields, in these files:
//   worker.cc          the loop: Step, Run, Interrupt, lease;
//   worker_jobs.cc     how a lease answer becomes processes (PlanJobs, fused
//                      trainer commands) and the GPU pool;
//   worker_process.cc  a run's process: checkout, sandbox, start, timeout and
//                      kill, and judging how it ended;
//   worker_ship.cc     what goes to the server while and after a run: heartbeats,
//                      metric points, log bytes, the result;
//   worker_gang.cc     gang members (one node of a multi-node run, gang.h);
//   worker_command.cc  `trainq worker`: flags, token file, building the worker.
//
// It registers its machine with a `trainq serve`, leases runs that
// fit its free slots and GPUs, runs each in a cached checkout of its commit
// with the same environment as a local run, and reports heartbeats, metric
// points, log bytes and the result. One thread drives it; each Step():
//   1. registers when not registered yet (retrying with backoff 1 s .. 30 s);
//   2. reaps processes that ended: ships the rest of their metrics and log and
//      completes their runs (succeeded, or failed with the exit code/error);
//      the next process of a sequential group starts;
//   3. kills processes past their timeout (SIGTERM to the group, SIGKILL after
//      the grace) and sends due heartbeats, each with the new metric points and
//      log bytes; a 409 on any run call kills that run and forgets it;
//   4. leases when slots are free (not draining, not stopping): a long poll of
//      up to lease_wait_ms while nothing runs, and of at most heartbeat_ms / 2
//      while something runs, so a poll never delays a heartbeat much (one
//      thread, no lease thread);
//   5. delivers results kept on disk while the server was away (ResultOutbox);
//   6. the dead-man switch: no answer from the server for orphan_timeout_ms
//      (counted from the start until the first registration) and nothing
//      running: runs `self_stop` with /bin/sh -c and ends with exit code 3.
//      A token the server refuses (401/403 at registration) also runs it
//      (when known) and ends with exit code 1.
// Fused runs: a lease answer holding several runs with the same group > 0 and
// a trainer spec becomes one `trainq-train SPEC --seed S --repeats K` process
// per stretch of consecutive seeds (stretches run one after the other in the
// group's slot); each seed's metrics and output land in its own run's files.
// Any HTTP answer below 500 counts as contact with the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/runner/gang.h"
#include "agent/runner/gpu_detect.h"
#include "agent/runner/lease_client.h"
#include "agent/runner/protocol.h"
#include "agent/runner/result_outbox.h"
#include "agent/runner/run_process.h"
#include "agent/runner/sandbox.h"
#include "agent/runner/worker_link.h"
#include "agent/runner/worker_outbox.h"
#include "agent/runner/worker_registration.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/result.h"

namespace trainq {

struct WorkerConfig {
  std::string server;   // base URL, e.g. http://10.0.0.2:8080
  std::string token;    // the pool token (never logged)
  std::string machine;  // the name the provider gave this machine; "" = started by hand
  int slots = 1;
  std::vector<GpuInfo> gpus;
  int runs_per_gpu = 0;  // 0: the pool's (register's answer), else 1
  int fuse_max = 1;
  std::string data_dir;  // worktrees/<sha>, runs/<id>, groups/<id>
  // A run's process output, in runs/<id>/: serve --inproc, whose worker
  // shares serve's data dir, names it apart from the log the server keeps
  // there (runs/<id>/output.log, agent/daemon/worker_api.h's RunLogPath).
  std::string process_log = "output.log";
  std::string bin_dir;   // prepended to PATH (where trainq-train lives)
  bool once = false;     // exit 0 when a poll came back empty and nothing runs
  // Where checkouts come from: "auto" = the lease's repository (a path here, or
  // a URL fetched into a mirror), else the server; "server" = always the
  // server (POST /api/v1/runs/{id}/source, a packfile of the commit).
  std::string source = "auto";
  std::string hostname;
  int pid = 0;
  int cpus = 0;
  std::int64_t memory_mb = 0;
  std::string version = "0.1.0";
  TimeMs lease_wait_ms = 20'000;
  TimeMs kill_grace_ms = 10'000;
  TimeMs retry_base_ms = 1'000;
  TimeMs retry_max_ms = 30'000;
  TimeMs orphan_timeout_ms = 10 * 60'000;  // until register answers with the pool's
  // The pool's self-stop command as the provider passed it at boot: run on the
  // dead-man switch before the first registration, and when the server
  // refuses this machine's token (nothing it could ever do). Register's answer
  // replaces it.
  std::string self_stop;
  // Variables of this worker's environment that runs also get (names, or
  // prefixes such as CONDA_*), beside the safe base (RunEnvironment).
  std::vector<std::string> env_passthrough;
  // The self-stop command is killed (its process group) after this long, or
  // at once on SIGTERM: a hanging `sudo shutdown` or cloud CLI never blocks
  // the worker.
  TimeMs self_stop_timeout_ms = 5 * 60'000;
  std::int64_t max_log_chunk = 1 << 20;    // log bytes per request
  // While a run runs, its new log bytes and metric points go to the server
  // this often (0: with each heartbeat). `serve --inproc` ships each second,
  // so the dashboard's log tail and metric curve follow the run.
  TimeMs ship_ms = 0;
  // The sandbox runs start in (agent/runner/sandbox.h): `bwrap` is the binary
  // ("" = none); `sandbox.hide` holds this worker's data dir and token file
  // and, for a local pool, what serve passed (its database, config, secrets).
  SandboxConfig sandbox;
  std::string bwrap;
  // What the sandbox probe found (ProbeSandbox), registered with the server.
  std::string sandbox_form = "none";
  std::string sandbox_note;
  // Offered to sandboxed runs as their caches (CacheEnvironment), bound
  // writable; "" = none. <data dir>/cache for `trainq worker`.
  std::string cache_dir;
};

// How the runs of one lease answer are started: each inner list is one
// process. Runs of a group with a trainer spec are split into stretches of
// consecutive seeds (at most fuse_max each); every other run is alone.
// Groups keep their order; stretches of a group run one after the other.
std::vector<std::vector<std::vector<WorkerRun>>> PlanJobs(const std::vector<WorkerRun>& runs);

// The fused trainer command for runs of consecutive seeds: metrics to
// <dir>/{seed}/metrics.jsonl and outputs to <dir>/{seed}/output.
std::string FusedTrainerCommand(const std::string& spec, std::int64_t seed, int repeats,
                                const std::string& dir);

// GPU units: each GPU holds runs_per_gpu runs needing one GPU, or one run
// needing several whole GPUs.
class GpuPool {
 public:
  GpuPool(const std::vector<GpuInfo>& gpus, int runs_per_gpu);
  // What the lease request offers: free units / runs_per_gpu.
  double FreeGpus() const;
  // Devices for a run needing `gpus` GPUs (none for 0); nullopt when they do not fit.
  std::optional<std::vector<int>> Take(int gpus);
  void Give(const std::vector<int>& devices, int gpus);

 private:
  int runs_per_gpu_;
  std::map<int, int> free_units_;  // by GPU index
};

class Worker {
 public:
  enum class Phase { kRunning, kDone };

  // The queue through `client` (HTTP, or in-process in `serve --inproc`).
  Worker(LeaseClient& client, ProcessRunner& runner, const Clock& clock, WorkerConfig config);
  // Over HTTP to config.server with config.token.
  Worker(HttpClient& http, ProcessRunner& runner, const Clock& clock, WorkerConfig config);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // One pass (see the top of the file). Returns kDone when the worker should
  // exit; exit_code() then tells how.
  Result<Phase> Step();
  // Steps until done or `stop` is set; on stop, stops every run and reports
  // it interrupted. Returns the exit code (0 done, 3 dead-man switch); an
  // Error for what cannot be retried (the server refused the token).
  Result<int> Run(const std::atomic<bool>& stop);
  // Stops every process (SIGTERM, SIGKILL after the grace) and reports each
  // of its runs "interrupted" (back to the queue without using an attempt).
  void Interrupt(const std::string& reason);

  int exit_code() const { return exit_code_; }
  // Safe to call from another thread (tests, a status line).
  bool registered() const { return registration_.registered(); }
  std::int64_t worker_id() const { return registration_.machine().value_or(0); }
  int active_runs() const;
  TimeMs heartbeat_ms() const { return registration_.heartbeat_ms(); }

 private:
  struct RunSlot {
    WorkerRun run;
    RunPaths paths;        // metrics and output_dir are the run's own
    bool started = false;  // its process started
    bool started_sent = false;
    TimeMs last_heartbeat_ms = 0;
    TimeMs last_ship_ms = 0;
    size_t points_sent = 0;
    std::int64_t log_sent = 0;  // bytes of the process log the server has
  };
  struct Proc {
    std::vector<std::int64_t> run_ids;
    std::string log_path;
    std::int64_t log_start = 0;  // where this process's output starts in log_path
    int pid = 0;
    TimeMs started_ms = 0;
    std::int64_t timeout_s = 0;
    bool timed_out = false;
    std::optional<TimeMs> kill_sent_ms;
  };
  // One slot's work: one process, or the stretches of a fused group in turn.
  struct Job {
    std::vector<std::vector<std::int64_t>> pending;  // processes still to start
    std::optional<Proc> proc;
    std::vector<int> devices;
    int gpus = 0;
  };

  // `own` when the worker made its client, else `client`.
  Worker(std::unique_ptr<LeaseClient> own, LeaseClient* client, ProcessRunner& runner,
         const Clock& clock, WorkerConfig&& config);
  // The checkout of a run's commit (see WorkerConfig::source).
  Result<std::string> Worktree(const LeasedRun& run);
  // A copy of Worktree(run) that is the run's own, <run dir>/checkout (fresh
  // for each attempt): seeds of one commit never see each other's changes.
  Result<std::string> RunCheckout(const LeasedRun& run, const std::string& work_dir);
  // `spec` inside the sandbox when there is one: writable are `writable`
  // (checkout, work trees), the cache dir and a /tmp of the run's own (in
  // `work_dir`); `readable` (a fused group's seed links) read-only.
  void Sandbox(ProcessSpec& spec, std::vector<std::string> writable,
               const std::vector<std::string>& readable, const std::string& work_dir,
               bool share_ipc);
  // registration_.Register() and what its outcome sets here: the pool's GPU
  // packing, or draining (a 409: exit 0).
  Status Register();
  Status Lease();
  void StartGangMembers(std::vector<WorkerRun>& runs);
  void StartJob(Job& job);
  Status StartProc(Job& job, const std::vector<std::int64_t>& run_ids);
  void FinishProc(Job& job, const ExitStatus& status);
  // Ships new metric points and log bytes; false when the run's lease is stale.
  // A stale lease still offers its log: the server takes the output of a
  // cancelled attempt from the lease that ran it.
  bool Ship(RunSlot& r, const Proc& p, bool final);
  // The log part of Ship: one chunk, or all that is left when `final`.
  bool ShipLog(RunSlot& r, const Proc& p, bool final);
  bool Heartbeat(RunSlot& r, const Proc* p);
  // Reports the run and forgets it. outcome: succeeded | failed | interrupted.
  // `config_error`: a failure that would repeat (agent/runner/run_process.h); the
  // server does not retry it.
  // A result the server cannot take now (no answer) is kept (kept_) with
  // the metric points and the output (of `proc`, when given) it has not seen.
  void Complete(std::int64_t run_id, const std::string& outcome, std::optional<double> metric,
                std::optional<int> exit_code, const std::string& error, bool config_error = false,
                const Proc* proc = nullptr);
  void Forget(std::int64_t run_id);
  void Kill(Proc& p, TimeMs now);
  void StopProc(Proc& p);

  ProcessRunner& runner_;
  const Clock& clock_;
  WorkerConfig config_;
  GpuPool gpus_;

  // The parts (declared after config_, which Registration reads).
  WorkerLink link_;
  Registration registration_;
  KeptResults kept_;

  bool draining_ = false;
  bool stopping_ = false;  // Interrupt() is under way
  bool lease_came_back_empty_ = false;
  int exit_code_ = 0;

  std::map<std::int64_t, RunSlot> runs_;  // by run id
  // Runs forgotten in this step (their lease was lost: cancelled, or leased
  // again) whose process is being stopped: once it has stopped, the rest of
  // its output goes to the server, which keeps it for a cancelled run.
  std::map<std::int64_t, RunSlot> lost_;
  std::vector<Job> jobs_;
  std::vector<std::unique_ptr<GangMember>> gangs_;  // gang leases (agent/runner/gang.h)
};

// `trainq worker`: flags, with TRAINQ_SERVER / TRAINQ_TOKEN_FILE / TRAINQ_MACHINE
// as defaults (main.cc).
struct WorkerCommandOptions {
  std::string server;
  std::string token_file;
  std::string machine;
  int slots = 1;
  std::string gpus = "auto";  // auto | none | 0,1,...
  int runs_per_gpu = 0;       // 0: the pool's
  int fuse_max = 1;
  std::string data_dir;  // default: ./trainq-worker
  bool once = false;
  int kill_grace_s = 10;
  std::string source = "auto";  // auto | server
  int orphan_timeout_s = 600;
  std::string self_stop;
  int self_stop_timeout_s = 300;
  std::vector<std::string> env_passthrough;
  std::string sandbox = "auto";              // auto | bwrap | none
  std::vector<std::string> sandbox_hide;     // more paths runs must not see
  std::vector<std::string> sandbox_writable; // more directories runs may write
};

// The token in `path`, trailing whitespace trimmed. A missing or empty file is
// an error naming the file; a file readable by group or others only warns
// (clouds' first-boot scripts write with the default umask).
Result<std::string> ReadTokenFile(const std::string& path);

// Runs the worker until it is done or `stop` is set; returns the exit code.
Result<int> CmdWorker(const WorkerCommandOptions& o, const Clock& clock,
                      const std::atomic<bool>& stop);

}  // namespace trainq
