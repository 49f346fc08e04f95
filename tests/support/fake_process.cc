#include "tests/support/fake_process.h"

#include <signal.h>

#include <stdexcept>

namespace trainq::testing {

Result<int> FakeProcessRunner::Spawn(const ProcessSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_next_) {
    Error e = *fail_next_;
    fail_next_.reset();
    return std::unexpected(e);
  }
  Process p;
  p.pid = next_pid_++;
  p.spec = spec;
  order_.push_back(p.pid);
  int pid = p.pid;
  procs_.emplace(pid, std::move(p));
  return pid;
}

std::optional<ExitStatus> FakeProcessRunner::Poll(int pid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) throw std::logic_error("FakeProcessRunner: Poll of unknown pid");
  return it->second.status;
}

ExitStatus FakeProcessRunner::Wait(int pid) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) throw std::logic_error("FakeProcessRunner: Wait of unknown pid");
  ended_.wait(lock, [&] { return it->second.status.has_value(); });
  return *it->second.status;
}

void FakeProcessRunner::End(Process& p, ExitStatus s) {
  if (p.status) return;  // ended before
  p.status = s;
  ended_.notify_all();
}

void FakeProcessRunner::KillGroup(int pid, int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) throw std::logic_error("FakeProcessRunner: KillGroup of unknown pid");
  Process& p = it->second;
  p.signals.push_back(signal);
  if (signal == SIGKILL || (signal == SIGTERM && !p.ignores_term)) {
    ExitStatus s;
    s.code = -1;
    s.signal = signal;
    End(p, s);
  }
}

void FakeProcessRunner::Exit(int pid, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  ExitStatus s;
  s.code = code;
  End(procs_.at(pid), s);
}

void FakeProcessRunner::IgnoreTerm(int pid) {
  std::lock_guard<std::mutex> lock(mu_);
  procs_.at(pid).ignores_term = true;
}

void FakeProcessRunner::FailNextSpawn(Error e) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_next_ = std::move(e);
}

std::vector<int> FakeProcessRunner::pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_;
}

FakeProcessRunner::Process FakeProcessRunner::process(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return procs_.at(pid);
}

int FakeProcessRunner::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [pid, p] : procs_) n += !p.status;
  return n;
}

}  // namespace trainq::testing
