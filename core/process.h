// ProcessRunner: the seam through which trainq starts child processes.
//
// Each child is made the leader of a new process group, so that killing the
// group also kills whatever the training script spawned (data loaders, shells).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace trainq {

struct ProcessSpec {
  std::vector<std::string> argv;              // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;     // added to (or replacing) the parent's environment
  std::string cwd;                            // empty: the parent's
  std::string output_path;                    // stdout and stderr go here (appended); empty: inherit
};

struct ExitStatus {
  int code = -1;    // exit code when the process exited
  int signal = 0;   // terminating signal, or 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string Describe() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  // Starts the process; returns its pid (also its process-group id).
  virtual Result<int> Spawn(const ProcessSpec& spec) = 0;
  // Reaps the process if it has ended; nullopt while it runs. Never blocks.
  virtual std::optional<ExitStatus> Poll(int pid) = 0;
  // Blocks until the process ends.
  virtual ExitStatus Wait(int pid) = 0;
  // Sends `signal` to the whole process group.
  virtual void KillGroup(int pid, int signal) = 0;
};

class PosixProcessRunner final : public ProcessRunner {
 public:
  Result<int> Spawn(const ProcessSpec& spec) override;
  std::optional<ExitStatus> Poll(int pid) override;
  ExitStatus Wait(int pid) override;
  void KillGroup(int pid, int signal) override;
};

}  // namespace trainq
