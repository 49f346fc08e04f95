// Gang runs on the runner side: one run's processes on one machine of a gang
// (resources.nodes / processes_per_node in trainq.yaml; the store side is the
// gangs section of queue/store.h).
//
// Every process gets torchrun's variables (MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK, LOCAL_WORLD_SIZE) and, on a machine
// with GPUs, its own share of them in CUDA_VISIBLE_DEVICES. Only global rank 0
// writes the run's metrics file ($TRAINQ_METRICS_FILE) and the run's log; the
// other local ranks get their own files under the run's directory.
//
// GangProcesses holds the processes of one node: when one of them ends
// non-zero the others are killed at once (their process groups), so a lost
// member never leaves the rest waiting in a collective.
//
// GangMember is a gang lease on a fleet worker (agent/runner/worker.cc): it
// learns the rendezvous address (node 0 picks a free port and says where it
// listens; the others wait for it), starts the node's processes, beats every
// beat_ms on POST /api/v1/runs/{id}/gang, and reports the node's outcome. A
// 409 (the run failed elsewhere, was cancelled or re-leased) kills its
// processes. Before it reports, it sends every local rank's log to the server
// (`trainq logs RUN --rank K`); a failed node's error is the failing rank's:
// "rank 3: exit code 7: <its last lines>". A result the server does not answer
// goes to the worker's outbox (GangIo::keep) and is delivered when it is back,
// so that a gang that ends while `trainq serve` is down is not run again.
// Threading: one thread (the worker's) drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/runner/result_outbox.h"
#include "agent/runner/run_process.h"
#include "core/clock.h"
#include "core/process.h"
#include "core/result.h"
#include "queue/types.h"

namespace trainq {

struct GangMemberId;  // agent/runner/protocol.h

struct GangLayout {
  std::string master_addr;
  int master_port = 0;
  int nodes = 1;
  int procs_per_node = 1;
  int node_rank = 0;
};

// torchrun's variables for local rank `local_rank` of this node.
std::map<std::string, std::string> TorchrunEnv(const GangLayout& g, int local_rank);

// The devices of each local rank: an even split when there are at least as
// many devices as processes (the rest to the first ranks), else round robin.
// Empty lists when `devices` is empty.
std::vector<std::vector<int>> SplitDevices(const std::vector<int>& devices, int procs);

// A TCP port free on this machine now (bound to port 0 and released).
Result<int> FreeTcpPort();

// The address of this machine that reaches `server_url` (the source address
// the kernel picks to route there; no packet is sent): what the other nodes
// of a gang connect to. 127.0.0.1 for a server on loopback.
Result<std::string> AddressTowards(const std::string& server_url);

// The processes of one node of a gang.
class GangProcesses {
 public:
  explicit GangProcesses(ProcessRunner& runner) : runner_(runner) {}
  // Starts one process per spec; on a failure the ones started are killed.
  Status Start(const std::vector<ProcessSpec>& specs);
  // Nothing until every process has exited 0, or one has ended otherwise
  // (then the rest are killed first): the first failure, or success.
  std::optional<ExitStatus> Poll();
  // SIGKILL to every process group, and reaps.
  void KillAll();
  // SIGTERM, then SIGKILL after grace_ms (call on each pass).
  void StopGently(TimeMs now, TimeMs grace_ms);
  const std::vector<int>& pids() const { return pids_; }
  bool running() const { return !pids_.empty() && !result_; }
  // The process (index into the specs) whose failure ended the node, if one did.
  std::optional<size_t> first_failed() const { return first_failed_; }
  // Where process `i` writes its output (its spec's output_path).
  const std::string& output_path(size_t i) const { return outputs_[i]; }
  size_t size() const { return pids_.size(); }

 private:
  ProcessRunner& runner_;
  std::vector<int> pids_;
  std::vector<std::string> outputs_;
  std::optional<size_t> first_failed_;
  std::vector<std::optional<ExitStatus>> ended_;
  std::optional<ExitStatus> result_;
  std::optional<TimeMs> kill_sent_ms_;
};

// The process specs of a node: `base` (BuildRunProcess of the run) with
// torchrun's variables per local rank; local ranks other than global rank 0
// get their own log under `run_dir` (rank-R.log: the worker's, outside what
// the run writes) and metrics file under `work_dir` (rank-R.metrics.jsonl;
// "" = run_dir).
std::vector<ProcessSpec> GangSpecs(const ProcessSpec& base, const GangLayout& g,
                                   const std::vector<int>& devices, const std::string& run_dir,
                                   const std::string& work_dir = "");

// What a GangMember needs from its worker.
struct GangIo {
  // POSTs `body` to `path` on the server: the HTTP status and JSON body, or
  // nullopt when the server could not be reached.
  std::function<std::optional<std::pair<int, nlohmann::json>>(const std::string& path,
                                                              const nlohmann::json& body)>
      call;
  // The checkout of the run's commit.
  std::function<Result<std::string>(const LeasedRun& run)> worktree;
  // Keeps a result the server did not take (`why`) in the worker's outbox
  // (agent/runner/result_outbox.h), which delivers it when the server is back.
  std::function<void(const PendingResult& kept, const std::string& why)> keep;
  // Puts a process of the run in the worker's sandbox (agent/runner/sandbox.h);
  // `several`: the node runs several processes, which share /dev/shm and IPC.
  std::function<void(ProcessSpec& spec, const RunPaths& paths, bool several)> sandbox;
};

struct GangMemberConfig {
  std::int64_t worker_id = 0;
  std::string server;           // for AddressTowards
  std::string data_dir;         // runs/<id>
  std::string bin_dir;
  std::vector<std::string> env_passthrough;
  std::vector<int> devices;     // this machine's GPUs (all of them: a member takes the machine)
  std::string where;            // machine name for the banner
  TimeMs beat_ms = 1'000;
  TimeMs kill_grace_ms = 10'000;
  // A node other than 0 waits this long for node 0's address before giving up.
  TimeMs rendezvous_timeout_ms = 5 * 60'000;
};

class GangMember {
 public:
  GangMember(LeasedRun run, GangMemberConfig config, GangIo io, ProcessRunner& runner,
             const Clock& clock);
  // One pass; false once the member is over (reported, or forgotten after a 409).
  bool Step();
  // Stops the processes and reports the member interrupted (the run goes back
  // to the queue without using an attempt).
  void Interrupt(const std::string& reason);
  const LeasedRun& run() const { return run_; }
  const std::vector<int>& pids() const { return procs_.pids(); }

 private:
  // One beat; false when the lease is stale (409).
  bool Beat(bool started);
  Status Start();
  void Finish(const ExitStatus& status);
  // Sends each local rank's output (its last 1 MiB) to the server, which
  // keeps it as runs/<id>/rank-<R>.log (rank 0's also as the run's
  // output.log), before the member reports: afterwards its token is stale.
  void UploadLogs();
  void Report(const std::string& outcome, std::optional<double> metric,
              std::optional<int> exit_code, const std::string& error, bool config_error);
  GangMemberId Member() const;  // this member in its calls
  std::string Path() const;

  LeasedRun run_;
  GangMemberConfig config_;
  GangIo io_;
  ProcessRunner& runner_;
  const Clock& clock_;
  GangProcesses procs_;
  RunPaths paths_;
  GangLayout layout_;
  TimeMs created_ms_;
  TimeMs started_ms_ = 0;
  TimeMs last_beat_ms_ = 0;
  std::int64_t log_start_ = 0;
  bool started_ = false;
  bool timed_out_ = false;
  bool done_ = false;
  nlohmann::json unsent_points_ = nlohmann::json::array();  // node 0's, the server away
};

}  // namespace trainq
