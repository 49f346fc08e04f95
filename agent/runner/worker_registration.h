// Registration: one of the Worker's parts (agent/runner/worker.h): the
// machine's registration with the queue and what its answer sets (the
// heartbeat, the dead-man switch's timeout, the pool's self-stop command and
// GPU packing), leaving, and the dead-man switch itself.
//
// The machine id lives in the WorkerLink, which names it in every call.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "agent/runner/worker_link.h"
#include "core/clock.h"
#include "core/process.h"
#include "core/result.h"

namespace trainq {

struct WorkerConfig;

class Registration {
 public:
  // `config` is the Worker's (read at each registration).
  Registration(WorkerLink& link, ProcessRunner& runner, const Clock& clock,
               const WorkerConfig& config);

  enum class Outcome {
    kNoAnswer,    // tried again after the link's backoff
    kRegistered,  // machine() is set
    kNotToRun,    // 409: the server says this machine runs nothing (draining): exit 0
  };
  // POST /api/v1/workers/register. An Error when the server refuses the token
  // (401/403: nothing it could ever do), after running the self-stop
  // command when there is one.
  Result<Outcome> Register();
  // The server forgot this machine (404 on a lease): register again.
  void Forget() { link_.set_machine(std::nullopt); }
  // Tells the server this worker ends (best effort; nothing when unregistered).
  void Leave();

  // The dead-man switch: no answer from the server for orphan_timeout_ms.
  bool Orphaned(TimeMs now) const { return now - link_.last_contact_ms() >= orphan_timeout_ms_; }
  // Runs the pool's self-stop command with /bin/sh -c; killed (its group)
  // after config.self_stop_timeout_ms, or at once when the stop flag is set.
  void RunSelfStop();
  // Worker::Run's flag (SIGTERM).
  void set_stop(const std::atomic<bool>* stop) { stop_ = stop; }

  const std::optional<std::int64_t>& machine() const { return link_.machine(); }
  // Safe to call from another thread.
  bool registered() const { return registered_.load(); }
  TimeMs heartbeat_ms() const { return heartbeat_ms_; }
  TimeMs orphan_timeout_ms() const { return orphan_timeout_ms_; }
  const std::string& self_stop() const { return self_stop_; }
  // The pool's runs_per_gpu from the last registration (1 when it gave none).
  int pool_runs_per_gpu() const { return pool_runs_per_gpu_; }

 private:
  WorkerLink& link_;
  ProcessRunner& runner_;
  const Clock& clock_;
  const WorkerConfig& config_;
  std::atomic<bool> registered_{false};
  TimeMs heartbeat_ms_ = 10'000;
  TimeMs orphan_timeout_ms_;  // until register answers with the pool's
  std::string self_stop_;     // the pool's, or the one the provider passed at boot
  int pool_runs_per_gpu_ = 1;
  const std::atomic<bool>* stop_ = nullptr;
};

}  // namespace trainq
