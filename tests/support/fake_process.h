// FakeProcessRunner: the ProcessRunner seam (core/process.h) without
// processes. A spawned "process" runs until the test ends it (Exit) or a
// signal does: SIGKILL always, SIGTERM unless the test made it ignore TERM.
// Every spawn and every signal is recorded, so a test asserts what the code
// under test asked for (which signal, when) without real children or
// wall-clock waits; with a FakeClock, kill grace, timeouts and heartbeats
// are driven by advancing the clock.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/process.h"

namespace trainq::testing {

class FakeProcessRunner final : public ProcessRunner {
 public:
  struct Process {
    int pid = 0;
    ProcessSpec spec;
    std::vector<int> signals;          // every KillGroup signal, in order
    bool ignores_term = false;
    std::optional<ExitStatus> status;  // once it ended
  };

  Result<int> Spawn(const ProcessSpec& spec) override;
  // Its status once it ended (again on every call), nullopt while it runs.
  std::optional<ExitStatus> Poll(int pid) override;
  // Blocks until the process ended: in a single-threaded test, call it only
  // after Exit or a killing signal.
  ExitStatus Wait(int pid) override;
  void KillGroup(int pid, int signal) override;

  // The test's side.
  void Exit(int pid, int code);  // the process exits with `code`
  void IgnoreTerm(int pid);      // it survives SIGTERM (as `trap '' TERM` does)
  void FailNextSpawn(Error e);   // the next Spawn fails with `e`
  std::vector<int> pids() const;  // every pid spawned, in order
  Process process(int pid) const;
  int running() const;  // spawned and not ended

 private:
  void End(Process& p, ExitStatus s);

  mutable std::mutex mu_;
  std::condition_variable ended_;
  std::map<int, Process> procs_;
  std::vector<int> order_;
  std::optional<Error> fail_next_;
  int next_pid_ = 40'000;
};

}  // namespace trainq::testing
