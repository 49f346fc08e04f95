// Registration, leaving, and the dead-man switch's self-stop
// (worker_registration.h).
#include "agent/runner/worker_registration.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/runner/protocol.h"
#include "agent/runner/run_process.h"
#include "agent/runner/worker.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

Registration::Registration(WorkerLink& link, ProcessRunner& runner, const Clock& clock,
                           const WorkerConfig& config)
    : link_(link),
      runner_(runner),
      clock_(clock),
      config_(config),
      orphan_timeout_ms_(config.orphan_timeout_ms),
      self_stop_(config.self_stop) {}

Result<Registration::Outcome> Registration::Register() {
  RegisterRequest req;
  req.name = config_.machine;
  req.hostname = config_.hostname;
  req.pid = config_.pid;
  req.slots = config_.slots;
  req.gpus = config_.gpus;
  req.cpus = config_.cpus;
  req.memory_mb = config_.memory_mb;
  req.version = config_.version;
  // Whether `trainer:` runs can start here: `trainq submit` warns when no
  // worker of an experiment's pool has trainq-train.
  req.trainer = FindTrainqTrain(config_.bin_dir, PathEnv());
  // The sandbox form its probe found (ProbeSandbox), and why.
  req.sandbox = config_.sandbox_form;
  req.sandbox_note = config_.sandbox_note;
  if (config_.runs_per_gpu > 0) req.runs_per_gpu = config_.runs_per_gpu;
  auto a = link_.Call("/api/v1/workers/register", ToJson(req));
  if (!a) return Outcome::kNoAnswer;  // retried after the backoff
  if (a->status == 409) {
    spdlog::info("the server answered that machine '{}' is not to run anything ({}); exiting",
                 config_.machine, AnswerError(a->body));
    return Outcome::kNotToRun;
  }
  if (a->status != 200) {
    std::string why = "register at " + link_.Where() + " refused: HTTP " +
                      std::to_string(a->status) + " " + AnswerError(a->body);
    // A machine the server will never take (a wrong or revoked token) only
    // costs money: a provider-booted worker stops it.
    if ((a->status == 401 || a->status == 403) && !self_stop_.empty()) {
      spdlog::error("{}; running the pool's self-stop command", why);
      RunSelfStop();
    }
    return Fail(ErrorKind::kInvalidArgument, why);
  }
  const RegisterAnswer answer = ParseRegisterAnswer(a->body);
  link_.set_machine(answer.worker_id);
  registered_ = true;
  heartbeat_ms_ = std::max<TimeMs>(100, answer.heartbeat_ms);
  orphan_timeout_ms_ = answer.orphan_timeout_ms.value_or(config_.orphan_timeout_ms);
  self_stop_ = answer.self_stop.value_or(self_stop_);
  pool_runs_per_gpu_ = std::max(1, answer.runs_per_gpu.value_or(1));
  spdlog::info("registered with {} as worker {} of pool '{}' ({} slot(s), {} GPU(s))",
               link_.Where(), answer.worker_id, answer.pool, config_.slots, config_.gpus.size());
  return Outcome::kRegistered;
}

void Registration::Leave() {
  if (!link_.machine()) return;
  auto a = link_.Call("/api/v1/workers/" + std::to_string(*link_.machine()) + "/leave",
                      json::object(), 5'000);
  if (!a || a->status != 200) {
    spdlog::debug("leave: {}", a ? "HTTP " + std::to_string(a->status) : a.error().message);
  }
}

void Registration::RunSelfStop() {
  if (self_stop_.empty()) return;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", self_stop_};
  auto pid = runner_.Spawn(spec);
  if (!pid) {
    spdlog::error("self-stop command: {}", pid.error().message);
    return;
  }
  // Polled, not waited for: SIGTERM (stop_) and the timeout end it.
  TimeMs deadline = clock_.Now() + config_.self_stop_timeout_ms;
  std::optional<ExitStatus> st;
  while (!(st = runner_.Poll(*pid))) {
    bool stopped = stop_ && stop_->load();
    if (stopped || clock_.Now() >= deadline) {
      spdlog::error("self-stop command {}: killing it",
                    stopped
                        ? "interrupted by a stop signal"
                        : "still running after " + FormatDuration(config_.self_stop_timeout_ms));
      runner_.KillGroup(*pid, SIGTERM);
      TimeMs grace = clock_.Now() + 2'000;
      while (!(st = runner_.Poll(*pid)) && clock_.Now() < grace) clock_.SleepFor(20);
      runner_.KillGroup(*pid, SIGKILL);
      if (!st) st = runner_.Wait(*pid);
      break;
    }
    clock_.SleepFor(20);
  }
  runner_.KillGroup(*pid, SIGKILL);  // whatever it left in its group
  if (!st->ok()) spdlog::error("self-stop command ended with {}", st->Describe());
}

}  // namespace trainq
