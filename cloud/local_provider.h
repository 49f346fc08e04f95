// The local provider: a "machine" is a worker process on this host.
//
// Boot spawns BootSpec::worker_argv as its own process group, output to
// <state_dir>/local/<name>.log, and writes <state_dir>/local/<name>.json
// {pid, start, pool, instance, name, started} before returning the pid as the
// id. List reads those files back: a machine is alive while its pid exists,
// is not a zombie and has the start time recorded at boot (a reused pid is
// not mistaken for it). So a restarted server still finds its workers.
//
// Stop sends SIGTERM to the group and waits at most `stop_wait` (default 2 s)
// for it to end; one still running then is no longer listed and gets SIGKILL
// on the first List/Stop call after `stop_grace` (default 30 s) from the
// SIGTERM: the caller never blocks for the grace. Parameters: stop_grace,
// stop_wait (durations).
#pragma once

#include <cstdint>
#include <string>

#include "cloud/provider.h"
#include "core/clock.h"
#include "core/process.h"

namespace trainq::cloud {

class LocalProvider final : public Provider {
 public:
  LocalProvider(ProcessRunner* runner, const Clock* clock, std::string state_dir,
                TimeMs stop_grace_ms = 30'000, TimeMs stop_wait_ms = 2'000);

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;
  // The worker's output, <state_dir>/local/<name>.log.
  Result<std::string> LogTail(const std::string& id, const std::string& name,
                              std::size_t max_bytes) override;

 private:
  struct Record;
  Result<std::vector<Record>> Load();
  bool Alive(const Record& r);
  void Sweep(std::vector<Record>& records);  // finishes overdue stops

  ProcessRunner* runner_;
  const Clock* clock_;
  std::string dir_;
  TimeMs stop_grace_ms_;
  TimeMs stop_wait_ms_;
};

// The start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since
// boot), or -1 when there is no such process or it is a zombie.
std::int64_t ProcessStartTime(int pid);

}  // namespace trainq::cloud
