// The Slurm provider: a machine is an sbatch job running the worker.
//
//   Boot: sbatch --parsable --job-name=<name> --comment=trainq:<instance>:<pool>
//         [--partition P] [--account A] [--gres G] [--cpus-per-task C]
//         [--time T] [--output F] [extra_args...] --wrap 'exec <worker argv>'
//   List: squeue --me --noheader --format=%i|%j|%k|%T, the jobs whose comment is
//         the tag and whose state is not final (PENDING, RUNNING, CONFIGURING,
//         COMPLETING, SUSPENDED, ... count as alive).
//   Stop: scancel ID (a job Slurm no longer knows is stopped already).
//
// Parameters: partition, account, gres, cpus, time, output, extra_args
// (split on spaces), slurm_conf (sets SLURM_CONF for the commands), bin_dir
// (where sbatch/squeue/scancel are; default: PATH), timeout (per command,
// default 60s). Errors carry the command's stderr; "cannot contact the
// controller" errors are kUnavailable (retryable), others kInvalidArgument.
#pragma once

#include <map>
#include <string>

#include "cloud/provider.h"
#include "core/process.h"

namespace trainq::cloud {

class SlurmProvider final : public Provider {
 public:
  // `params` must have been checked by MakeProvider.
  SlurmProvider(ProcessRunner* runner, std::map<std::string, std::string> params,
                std::string scratch_dir);

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;
  // The job's output file: params.output with %j (job id), %x (job name) and
  // %% replaced, else Slurm's default slurm-<id>.out in the server's directory.
  Result<std::string> LogTail(const std::string& id, const std::string& name,
                              std::size_t max_bytes) override;

  // "trainq:<instance>:<pool>", the job comment that tags a machine.
  static std::string Comment(const MachineTag& tag);

 private:
  Result<std::string> Run(const std::string& what, std::vector<std::string> argv);
  std::string Param(const std::string& key) const;

  ProcessRunner* runner_;
  std::map<std::string, std::string> params_;
  std::string scratch_dir_;
  std::int64_t timeout_ms_ = 60'000;
};

}  // namespace trainq::cloud
