// The command provider: a site's (or any cloud CLI's) shell commands.
//
// Parameters `boot`, `list` and `stop` are templates run with /bin/sh -c.
// Placeholders: {name} {pool} {instance} {slots} {gpus} (plain words trainq
// chose: [A-Za-z0-9._-]), {worker_command} (the worker's argv, shell-quoted
// word by word: paste it unquoted), {id} (stop only; checked to be
// [A-Za-z0-9._:/@-]+). The same values are in the environment as
// TRAINQ_NAME, TRAINQ_POOL, TRAINQ_INSTANCE, TRAINQ_SLOTS, TRAINQ_GPUS,
// TRAINQ_WORKER_COMMAND, TRAINQ_ID; the boot command also gets the pool
// token as TRAINQ_TOKEN (only in its environment; never in a command line).
//
//   boot: prints the new machine's id; the last non-empty stdout line is
//         taken. It must tag the machine (name, pool, instance) before it
//         exits, so that `list` finds it even if trainq crashes right after.
//   list: prints one live machine per line, "ID NAME POOL INSTANCE" (only
//         lines whose POOL and INSTANCE are this pool's are taken) or
//         "ID [NAME]" (taken as they are: the command filters by {pool} and
//         {instance} itself). Blank lines and lines starting with # are
//         skipped; any other shape is an error.
//   stop: stops (deletes) machine {id}; a machine already gone must exit 0.
//
// A non-zero exit is kUnavailable (retried with backoff), with the stderr
// tail in the message; exit 64..78 (sysexits' usage/config errors, except 75
// EX_TEMPFAIL) are kInvalidArgument. `timeout` (default 5m) bounds each run.
#pragma once

#include <map>
#include <string>

#include "cloud/provider.h"
#include "core/process.h"

namespace trainq::cloud {

class CommandProvider final : public Provider {
 public:
  CommandProvider(ProcessRunner* runner, std::map<std::string, std::string> params,
                  std::string scratch_dir);

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;

 private:
  Result<std::string> Run(const std::string& what, const std::string& templ,
                          const std::map<std::string, std::string>& vars,
                          std::map<std::string, std::string> env);

  ProcessRunner* runner_;
  std::map<std::string, std::string> params_;
  std::string scratch_dir_;
  std::int64_t timeout_ms_ = 5 * 60'000;
};

}  // namespace trainq::cloud
