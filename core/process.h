// ProcessRunner: the seam through which trainq starts child processes.
//
// Each child is made the leader of a new process group, so that killing the
// group also kills whatever the training script spawned (data loaders, shells).
// A child starts with stdin on /dev/null, stdout/stderr as asked, and no other
// descriptor of the parent: every fd >= 3 is closed between fork and exec, so
// the daemon's listening socket, its database and its HTTP connections never
// leak into a training command (which could outlive the daemon and hold its
// port).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq {

struct ProcessSpec {
  std::vector<std::string> argv;              // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;     // added to (or replacing) the parent's environment
  std::string cwd;                            // empty: the parent's
  std::string output_path;                    // stdout and stderr go here (appended); empty: inherit
  // false: the child's environment is RunEnvironment(pass_env) with `env`
  // over it, never the whole of ours (training runs and local workers: no
  // secret of the daemon's).
  bool inherit_env = true;
  std::vector<std::string> pass_env = {};  // names or PREFIX*, when inherit_env is false
};

struct ExitStatus {
  int code = -1;    // exit code when the process exited
  int signal = 0;   // terminating signal, or 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string Describe() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

// The environment a training run starts from: the safe base (PATH, HOME,
// USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TZ, TMPDIR, TERM) plus the
// variables named in `passthrough` (a name, or a prefix ending in `*` such as
// "CONDA_*"), taken from this process's environment when set; also a batch
// scheduler's job variables (SLURM_*), which describe the machine. Nothing else
// of the daemon's environment (webhook secrets, forge tokens, AWS keys).
std::map<std::string, std::string> RunEnvironment(const std::vector<std::string>& passthrough);

// True when `name` matches one of `patterns` (exact, or a prefix ending in '*').
bool EnvNameMatches(const std::string& name, const std::vector<std::string>& patterns);

// A passthrough pattern: a variable name ([A-Za-z0-9_]+) or such a prefix
// ending in '*' ("CONDA_*").
bool ValidEnvPattern(std::string_view pattern);

// Patterns matching exactly the names that match both `a` and `b`: how a
// repository's wish (trainq.yaml env_passthrough) narrows what the operator
// allows (server.yaml / serve flags); nothing outside `a` ever matches.
std::vector<std::string> IntersectEnvPatterns(const std::vector<std::string>& a,
                                              const std::vector<std::string>& b);

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
