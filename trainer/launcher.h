// How a trainq-train process joins a distributed run (the spec's
// `distributed:` section), and the local ranks that rank 0 starts itself.
//
// rendezvous auto: the process the user started is rank 0; it starts ranks
// 1..W-1 as copies of itself (/proc/self/exe, same arguments) with
// TRAINQ_DIST_RANK, TRAINQ_DIST_WORLD, TRAINQ_DIST_STORE (a FileStore path)
// and TRAINQ_DIST_PARENT set, and watches them. rendezvous env / tcp://: each
// process is started by torchrun (or by hand) with RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR and MASTER_PORT; tcp://HOST:PORT overrides the
// last two.
//
// Faults: when a local rank ends abnormally, rank 0's watchdog prints which
// rank and how, kills the others and exits 4; a local rank whose rank 0 is
// gone prints that and exits 4. A rank that is alive but silent is noticed by
// the others' next collective after the timeout (distributed.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <optional>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/process.h"
#include "core/result.h"
#include "trainer/distributed.h"
#include "trainer/spec.h"

namespace trainq::trainer {

// This process's place in the group. `spawn_local` is true for rank 0 under
// rendezvous auto: it must start the other ranks (LocalRanks::Start).
// Errors (kInvalidArgument) name the spec's distributed section or the
// environment variable that is wrong.
struct RankPlan {
  RendezvousPlan rendezvous;
  bool spawn_local = false;
  int parent_pid = 0;  // a local rank: rank 0's pid, watched (WatchParent)
};
Result<RankPlan> PlanRank(const DistributedSpec& spec, const std::function<const char*(const char*)>& getenv);

// Ranks 1..W-1 of a rendezvous-auto run, started and watched by rank 0.
class LocalRanks {
 public:
  // Starts them with `argv` (this process's arguments; argv[0] is replaced
  // by /proc/self/exe) and fills in plan.rendezvous.file_store. The watchdog
  // thread reaps them; one that ends abnormally before Finish or Abort makes
  // it print which rank and how, kill the others and _exit(4).
  static Result<std::unique_ptr<LocalRanks>> Start(const std::vector<std::string>& argv, RankPlan& plan,
                                                   ProcessRunner& runner);
  ~LocalRanks();  // kills and reaps what still runs
  // Training ended well: waits for every rank to exit; an error names a rank
  // that failed.
  Status Finish();
  // Training failed here: the others are killed and reaped.
  void Abort();
  const std::vector<int>& pids() const { return pids_; }

 private:
  LocalRanks(ProcessRunner& runner, std::string store_dir) : runner_(runner), store_dir_(std::move(store_dir)) {}
  void Watch();

  ProcessRunner& runner_;
  std::string store_dir_;
  std::vector<int> pids_;           // pids_[i] is rank i + 1
  std::mutex mu_;
  std::condition_variable reaped_cv_;
  std::vector<std::optional<ExitStatus>> status_;  // guarded by mu_; set when the rank was reaped
  std::atomic<bool> finishing_{false};  // Finish began: the watchdog records, Finish reports
  std::atomic<bool> stop_{false};       // Abort: the watchdog ends
  std::thread watchdog_;
};

// A local rank: a thread that exits the process (code 4, with a message) when
// rank 0 (parent_pid) is gone.
void WatchParent(int rank, int parent_pid);

}  // namespace trainq::trainer
