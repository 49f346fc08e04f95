// Provider: the seam between trainq and whatever starts machines (local
// processes, Slurm, EC2, a site's shell commands).
//
// Every machine a provider boots carries trainq's tag: the pool and the trainq
// instance id, so that List() finds exactly the machines this trainq started,
// including ones it booted but crashed before recording (the autoscaler adopts
// or stops those). Errors are Result<>: `unavailable`/`timeout` are worth a
// retry (with backoff, see cloud/autoscaler.h), anything else is not.
// Threads: List, Stop and LogTail are called from the fleet's loop thread;
// Boot from the fleet's boot threads (agent/daemon/fleet.h), several at once
// and while the loop calls the others. An implementation guards whatever
// state it keeps between calls.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace trainq {
class ProcessRunner;
class HttpClient;
class Clock;
}  // namespace trainq

namespace trainq::cloud {

// trainq's tag on a machine.
struct MachineTag {
  std::string pool;
  std::string instance;  // this trainq installation's id

  friend bool operator==(const MachineTag&, const MachineTag&) = default;
};

struct BootSpec {
  MachineTag tag;
  int slots = 1;
  int gpus = 0;
  std::map<std::string, std::string> params;  // the pool's provider parameters
  // The machine's unique name, chosen by trainq ("tq-<instance>-<pool>-<row>");
  // the worker registers under it and providers show it (job name, Name tag).
  std::string name;
  // The full argv that starts the worker on the machine.
  std::vector<std::string> worker_argv;
  // Variables of serve's environment the worker may pass on to its runs. A
  // provider that starts the worker here (local) gives it only these beside
  // the safe base (RunEnvironment), so serve's secrets never reach it.
  std::vector<std::string> env_passthrough;
  // The pool's plaintext token, for providers that must carry it to another
  // host (EC2 user-data, a command's $TRAINQ_TOKEN). Never logged.
  std::string token;
};

struct ListedMachine {
  std::string id;  // the provider's id (instance id, Slurm job id, pid)
  MachineTag tag;
  std::string name;  // BootSpec::name when the provider knows it, else ""
  // What a provider that knows more than "it exists" says (kubernetes):
  // `note`: why the machine is not up yet, shown while it boots ("waiting
  // for a node: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.").
  std::string note = {};
  // `ended`: why the machine is over though still listed (an image that
  // cannot be pulled, a preempted or evicted pod, a worker that exited);
  // "" while it is not. trainq records it and stops (deletes) it at once
  // instead of waiting for boot_timeout. `disrupted`: the cluster took it
  // away (preemption, eviction, deleted by someone else): no failure of the
  // machine, so no failed boot; its runs go back to the queue without using
  // an attempt either way.
  std::string ended = {};
  bool disrupted = false;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // Starts one machine; returns its provider id. The machine is tagged before
  // this returns, so a crash right after still leaves it findable by List().
  virtual Result<std::string> Boot(const BootSpec& spec) = 0;
  // The machines carrying `tag` that are not stopped.
  virtual Result<std::vector<ListedMachine>> List(const MachineTag& tag) = 0;
  // Stops (terminates) a machine. Stopping one that is already gone succeeds.
  virtual Status Stop(const std::string& id) = 0;
  // The end (at most max_bytes) of machine `id`'s console or worker log
  // (`name`: its BootSpec::name), to show why its boot failed; also after it
  // stopped, where the provider keeps it. kNotFound when there is none.
  virtual Result<std::string> LogTail(const std::string& id, const std::string& name,
                                      std::size_t max_bytes);
};

// The last `max_bytes` of `text`, from a line start where there is one.
std::string TailBytes(const std::string& text, std::size_t max_bytes);
// The last `max_bytes` of file `path`.
Result<std::string> FileTail(const std::string& path, std::size_t max_bytes);

// A provider in memory for tests. It records every call in order, can be told
// to fail the next calls, and can "lose" a machine (a cloud preempting it, a
// Slurm job killed by an admin), which then vanishes from List().
class FakeProvider final : public Provider {
 public:
  struct Call {
    enum class Kind { kBoot, kList, kStop } kind;
    std::string arg;  // Boot: the pool; List: the pool; Stop: the id
    bool ok = true;
  };

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;
  Result<std::string> LogTail(const std::string& id, const std::string& name,
                              std::size_t max_bytes) override;

  // What LogTail answers for machine `id`.
  void SetLog(const std::string& id, std::string text);
  // The next `n` calls (of any kind) fail with `kind`.
  void FailNext(int n, ErrorKind kind = ErrorKind::kUnavailable);
  // The machine disappears without a Stop call.
  void Lose(const std::string& id);
  // A machine that exists with trainq's tag but was never returned by Boot
  // (trainq crashed between the provider's answer and recording it).
  std::string AddOrphan(const MachineTag& tag);

  // Copies: boots may run on other threads meanwhile.
  std::vector<Call> calls() const;
  // Ids of machines currently running.
  std::vector<std::string> running() const;
  std::vector<std::string> stopped() const;

 private:
  Status MaybeFail(Call::Kind kind, const std::string& arg);  // mu_ held

  mutable std::mutex mu_;  // every member below
  int next_id_ = 1;
  int fail_next_ = 0;
  ErrorKind fail_kind_ = ErrorKind::kUnavailable;
  std::map<std::string, MachineTag> machines_;  // running, by id
  std::map<std::string, std::string> names_;    // BootSpec::name, by id
  std::vector<std::string> stopped_;
  std::vector<Call> calls_;
  std::map<std::string, std::string> logs_;
};

// What the real providers need from the outside; pointers are not owned and
// must outlive the provider.
struct ProviderDeps {
  ProcessRunner* runner = nullptr;  // local, slurm, command
  HttpClient* http = nullptr;       // ec2, kubernetes
  const Clock* clock = nullptr;     // all
  std::string state_dir;            // local: <state_dir>/local/; scratch files
};

// The provider `kind` (local | slurm | ec2 | kubernetes | command) with the pool's
// parameters. Unknown kinds and unknown or missing parameters are refused with
// a message naming them ("params.region: required by ec2"); callers prefix the
// pool ("pool gpu: ..."). The parameters each kind takes are listed in
// docs/pools.md, "Providers"; every kind also accepts (and ignores) the
// worker command's parameters: server_url, token_file, trainq, worker_gpus,
// worker_data_dir.
Result<std::unique_ptr<Provider>> MakeProvider(const std::string& kind,
                                               const std::map<std::string, std::string>& params,
                                               ProviderDeps deps);

// MakeProvider's checks of the kind and the parameters alone (for the config
// parser): the same messages, nothing constructed.
Status CheckProviderParams(const std::string& kind,
                           const std::map<std::string, std::string>& params);

}  // namespace trainq::cloud
