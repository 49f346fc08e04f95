// A real single-node Slurm cluster for tests: munged (when none answers),
// slurmctld and slurmd, configured under a temporary directory with free
// loopback ports. Needs root and the Debian packages slurm-wlm and munge
// (ci/install-deps installs them). Start() says clearly what is missing.
//
//   auto cluster = SlurmCluster::Start();
//   REQUIRE(cluster);   // INFO(cluster.error()) first for the reason
//   ... run sbatch/squeue with (*cluster)->env() (SLURM_CONF) ...
//
// The destructor cancels every job of the cluster and stops the daemons by
// their pids (and munged if Start started it).
#pragma once

#include <chrono>
#include <expected>
#include <map>
#include <memory>
#include <string>

#include "tests/support/temp_dir.h"

namespace trainq::testing {

class SlurmCluster {
 public:
  // Starts the daemons and waits (up to `deadline`) for the node to be idle.
  static std::expected<std::unique_ptr<SlurmCluster>, std::string> Start(
      std::chrono::milliseconds deadline = std::chrono::seconds(60));
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  const std::string& conf() const { return conf_; }  // the slurm.conf path
  std::map<std::string, std::string> env() const { return {{"SLURM_CONF", conf_}}; }
  // "SLURM_CONF=<conf> " to put in front of a RunShell command.
  std::string shell_prefix() const;
  const TempDir& dir() const { return dir_; }
  const std::string& node() const { return node_; }
  const std::string& partition() const { return partition_; }

 private:
  SlurmCluster() = default;
  void Stop();

  TempDir dir_;
  std::string conf_;
  std::string node_;
  std::string partition_ = "debug";
  int ctld_pid_ = 0;
  int slurmd_pid_ = 0;
  int munged_pid_ = 0;  // only when Start started it
};

}  // namespace trainq::testing
