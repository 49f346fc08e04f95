// Worker's loop (agent/runner/worker.h): construction, Step (register, reap,
// timeouts and heartbeats, lease, the dead-man switch), Run and Interrupt.
// The calls to the server are the WorkerLink's (worker_link.cc), registering
// and leaving the Registration's (worker_registration.cc), kept results the
// KeptResults' (worker_outbox.cc). What each step does to a run lives in the
// other worker_*.cc files.
#include "agent/runner/worker.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/runner/gang.h"
#include "agent/runner/run_process.h"
#include "core/http_client.h"
#include "core/strings.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

// ---- Worker -----------------------------------------------------------------

Worker::Worker(HttpClient& http, ProcessRunner& runner, const Clock& clock, WorkerConfig config)
    : Worker(std::make_unique<HttpLeaseClient>(http, config.server, config.token), nullptr,
             runner, clock, std::move(config)) {}

Worker::Worker(LeaseClient& client, ProcessRunner& runner, const Clock& clock, WorkerConfig config)
    : Worker(nullptr, &client, runner, clock, std::move(config)) {}

Worker::Worker(std::unique_ptr<LeaseClient> own, LeaseClient* client, ProcessRunner& runner,
               const Clock& clock, WorkerConfig&& config)
    : runner_(runner),
      clock_(clock),
      config_(std::move(config)),
      gpus_(config_.gpus, config_.runs_per_gpu),
      link_(std::move(own), client, clock, config_.retry_base_ms, config_.retry_max_ms),
      registration_(link_, runner, clock, config_),
      kept_(link_, clock, config_.data_dir) {}

Worker::~Worker() = default;

int Worker::active_runs() const { return static_cast<int>(runs_.size()); }

Status Worker::Register() {
  ASSIGN_OR_RETURN(Registration::Outcome outcome, registration_.Register());
  if (outcome == Registration::Outcome::kNotToRun) {
    draining_ = true;
    exit_code_ = 0;
  } else if (outcome == Registration::Outcome::kRegistered && config_.runs_per_gpu <= 0) {
    config_.runs_per_gpu = registration_.pool_runs_per_gpu();  // the pool's packing
    gpus_ = GpuPool(config_.gpus, config_.runs_per_gpu);
  }
  return {};
}

Status Worker::Lease() {
  int free_slots = config_.slots - static_cast<int>(jobs_.size());
  if (free_slots <= 0) return {};
  TimeMs wait = config_.lease_wait_ms;
  if (!jobs_.empty()) wait = std::min(wait, registration_.heartbeat_ms() / 2);
  if (!jobs_.empty() && config_.ship_ms > 0) wait = std::min(wait, config_.ship_ms);
  if (config_.once) wait = std::min<TimeMs>(wait, 2'000);  // one-shot: do not linger
  LeaseRequest req;
  req.max_runs = free_slots;
  req.free_gpus = gpus_.FreeGpus();
  req.runs_per_gpu = config_.runs_per_gpu;
  req.fuse_max = config_.fuse_max;
  req.wait_ms = wait;
  const std::int64_t machine = *registration_.machine();
  auto a = link_.Call("/api/v1/workers/" + std::to_string(machine) + "/lease", ToJson(req),
                      wait + 15'000);
  if (!a) return {};
  if (a->status == 409) {
    if (!draining_) spdlog::info("machine is draining ({}); finishing what runs", AnswerError(a->body));
    draining_ = true;
    return {};
  }
  if (a->status == 401 || a->status == 403) {
    return Fail(ErrorKind::kInvalidArgument,
                "lease refused: HTTP " + std::to_string(a->status) + " " + AnswerError(a->body));
  }
  if (a->status == 404) {
    spdlog::warn("the server does not know worker {} ({}); registering again", machine,
                 AnswerError(a->body));
    registration_.Forget();
    return {};
  }
  if (a->status != 200) {
    spdlog::warn("lease refused: HTTP {} {}", a->status, AnswerError(a->body));
    link_.NoteFailure(
        Error{ErrorKind::kUnavailable, "lease answered " + std::to_string(a->status)});
    return {};
  }
  std::vector<WorkerRun> runs;
  std::vector<std::string> bad;
  const LeaseAnswer answer = ParseLeaseAnswer(a->body, runs, bad);
  if (answer.state == "draining") {
    if (!draining_) spdlog::info("machine is draining; finishing what runs, leasing nothing more");
    draining_ = true;
  }
  for (const auto& b : bad) spdlog::error("{}", b);
  StartGangMembers(runs);
  if (runs.empty()) {
    lease_came_back_empty_ = gangs_.empty();
    return {};
  }
  lease_came_back_empty_ = false;
  for (auto& stretches : PlanJobs(runs)) {
    Job job;
    for (auto& stretch : stretches) {
      std::vector<std::int64_t> ids;
      for (auto& r : stretch) {
        ids.push_back(r.lease.run_id);
        RunSlot slot;
        slot.run = r;
        slot.last_heartbeat_ms = clock_.Now();
        slot.paths = RunPathsFor(config_.data_dir, r.lease.run_id, config_.process_log);
        runs_[r.lease.run_id] = std::move(slot);
      }
      job.pending.push_back(std::move(ids));
    }
    job.gpus = stretches.front().front().lease.gpus;
    auto devices = gpus_.Take(job.gpus);
    if (!devices) {
      // The server's arithmetic (fractional free GPUs) let through a run whose
      // whole GPUs are not free here: give it back without using an attempt.
      for (const auto& ids : job.pending) {
        for (auto id : ids) {
          Complete(id, "interrupted", std::nullopt, std::nullopt,
                   "needs " + std::to_string(job.gpus) + " whole GPU(s), not free on this worker");
        }
      }
      continue;
    }
    job.devices = *devices;
    jobs_.push_back(std::move(job));
    StartJob(jobs_.back());
  }
  return {};
}

void Worker::Forget(std::int64_t run_id) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  if (it->second.started) lost_.insert_or_assign(run_id, std::move(it->second));
  runs_.erase(it);
}

Result<Worker::Phase> Worker::Step() {
  TimeMs now = clock_.Now();
  if (!registration_.machine() && !draining_) {
    if (link_.Ready(now)) TRY(Register());
  }
  if (draining_ && !registration_.machine()) return Phase::kDone;  // 409 on register

  // Reap.
  for (auto& job : jobs_) {
    if (!job.proc) continue;
    auto status = runner_.Poll(job.proc->pid);
    if (!status) continue;
    runner_.KillGroup(job.proc->pid, SIGKILL);  // whatever it left in its group
    FinishProc(job, *status);
  }
  // Timeouts and heartbeats (pending stretches of a group beat too: leased, not started).
  now = clock_.Now();
  for (auto& job : jobs_) {
    if (job.proc) {
      Proc& p = *job.proc;
      if (p.timeout_s > 0 && now - p.started_ms > p.timeout_s * 1000) {
        if (!p.timed_out) {
          spdlog::warn("run(s) {}: timeout of {} reached, killing the process group",
                       fmt::join(p.run_ids, ", "), FormatDuration(p.timeout_s * 1000));
        }
        p.timed_out = true;
        Kill(p, now);
      }
    }
    std::vector<std::int64_t> ids;
    if (job.proc) ids = job.proc->run_ids;
    for (const auto& s : job.pending) ids.insert(ids.end(), s.begin(), s.end());
    for (auto id : ids) {
      auto it = runs_.find(id);
      if (it == runs_.end()) continue;
      RunSlot& slot = it->second;
      TimeMs t = clock_.Now();
      if (t - slot.last_heartbeat_ms < registration_.heartbeat_ms()) {
        // Between heartbeats: new output and metric points, when shipping
        // more often is asked for (WorkerConfig::ship_ms).
        if (config_.ship_ms > 0 && slot.started && job.proc &&
            t - std::max(slot.last_ship_ms, slot.last_heartbeat_ms) >= config_.ship_ms) {
          slot.last_ship_ms = t;
          if (!Ship(slot, *job.proc, false)) Forget(id);
        }
        continue;
      }
      if (!Heartbeat(slot, slot.started && job.proc ? &*job.proc : nullptr)) Forget(id);
    }
  }
  // Drop what was forgotten: a process whose runs are all gone is killed,
  // then the output it wrote since the last heartbeat goes to the server (a
  // run cancelled before its first heartbeat keeps what it printed).
  for (auto& job : jobs_) {
    if (job.proc) {
      const std::vector<std::int64_t> had = job.proc->run_ids;
      std::erase_if(job.proc->run_ids, [&](std::int64_t id) { return !runs_.contains(id); });
      if (job.proc->run_ids.empty()) {
        StopProc(*job.proc);
        for (auto id : had) {
          if (auto it = lost_.find(id); it != lost_.end()) (void)ShipLog(it->second, *job.proc, true);
        }
        job.proc.reset();
      }
    }
    for (auto& s : job.pending) {
      std::erase_if(s, [&](std::int64_t id) { return !runs_.contains(id); });
    }
    std::erase_if(job.pending, [](const auto& s) { return s.empty(); });
    if (!job.proc) StartJob(job);
  }
  // A forgotten run whose process goes on (a fused group's other seeds)
  // keeps nothing more; one forgotten by a process started just now waits
  // for the next step's stop.
  std::erase_if(lost_, [&](const auto& kv) {
    for (const auto& job : jobs_) {
      if (job.proc && std::find(job.proc->run_ids.begin(), job.proc->run_ids.end(), kv.first) !=
                          job.proc->run_ids.end()) {
        return false;
      }
    }
    return true;
  });
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->proc && it->pending.empty()) {
      gpus_.Give(it->devices, it->gpus);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  kept_.DeliverIfDue(registration_.heartbeat_ms());
  // Gang members.
  std::erase_if(gangs_, [](const std::unique_ptr<GangMember>& g) { return !g->Step(); });
  // Lease (a gang member holds the whole machine).
  if (registration_.machine() && !draining_ && static_cast<int>(jobs_.size()) < config_.slots &&
      gangs_.empty() && link_.Ready(clock_.Now())) {
    TRY(Lease());
  }
  now = clock_.Now();
  if (draining_ && jobs_.empty() && gangs_.empty()) {
    spdlog::info("drained: nothing left to run; exiting");
    exit_code_ = 0;
    return Phase::kDone;
  }
  if (config_.once && lease_came_back_empty_ && jobs_.empty() && gangs_.empty()) {
    spdlog::info("nothing to lease and nothing running; exiting (--once)");
    exit_code_ = 0;
    return Phase::kDone;
  }
  if (jobs_.empty() && gangs_.empty() && registration_.Orphaned(now)) {
    spdlog::warn(
        "no answer from the server for {} and nothing running: {}",
        FormatDuration(now - link_.last_contact_ms()),
        registration_.self_stop().empty() ? "exiting" : "running the pool's self-stop command");
    kept_.ReportHeldLost();
    registration_.RunSelfStop();
    exit_code_ = 3;
    return Phase::kDone;
  }
  return Phase::kRunning;
}

void Worker::Interrupt(const std::string& reason) {
  stopping_ = true;
  for (auto& g : gangs_) g->Interrupt(reason);
  gangs_.clear();
  // Processes that ended before the stop keep their result.
  for (auto& job : jobs_) {
    if (!job.proc) continue;
    if (auto status = runner_.Poll(job.proc->pid)) {
      runner_.KillGroup(job.proc->pid, SIGKILL);
      FinishProc(job, *status);
    }
  }
  for (auto& job : jobs_) {
    if (job.proc) runner_.KillGroup(job.proc->pid, SIGTERM);
  }
  TimeMs deadline = clock_.Now() + config_.kill_grace_ms;
  for (auto& job : jobs_) {
    if (!job.proc) continue;
    while (!runner_.Poll(job.proc->pid)) {
      if (clock_.Now() >= deadline) {
        runner_.KillGroup(job.proc->pid, SIGKILL);
        runner_.Wait(job.proc->pid);
        break;
      }
      clock_.SleepFor(20);
    }
    runner_.KillGroup(job.proc->pid, SIGKILL);
    for (auto id : job.proc->run_ids) {
      auto it = runs_.find(id);
      if (it == runs_.end()) continue;
      // The output so far, for the record, when the server answers.
      if (!link_.BackingOff()) (void)Ship(it->second, *job.proc, true);
      Complete(id, "interrupted", std::nullopt, std::nullopt, reason);
    }
    job.proc.reset();
  }
  for (auto& job : jobs_) {
    for (const auto& s : job.pending) {
      for (auto id : s) Complete(id, "interrupted", std::nullopt, std::nullopt, reason);
    }
    gpus_.Give(job.devices, job.gpus);
  }
  jobs_.clear();
  runs_.clear();
}

Result<int> Worker::Run(const std::atomic<bool>& stop) {
  registration_.set_stop(&stop);
  while (!stop.load()) {
    auto phase = Step();
    if (!phase) {
      Interrupt("trainq worker stopped: " + phase.error().message);
      return std::unexpected(phase.error());
    }
    if (*phase == Phase::kDone) {
      if (exit_code_ == 0) registration_.Leave();
      return exit_code_;
    }
    // Leases pace the loop while slots are free; otherwise look at the
    // children often enough to report an end promptly.
    bool leasing = registration_.machine() && !draining_ &&
                   static_cast<int>(jobs_.size()) < config_.slots && gangs_.empty() &&
                   link_.Ready(clock_.Now());
    if (!leasing) {
      clock_.SleepFor(jobs_.empty() && gangs_.empty() ? 200 : 50);
    } else if (lease_came_back_empty_) {
      clock_.SleepFor(20);  // a server that answers at once (too many polls waiting): no busy loop
    }
  }
  spdlog::info("stopping: {} run(s) go back to the queue", runs_.size());
  Interrupt("the worker was stopped (SIGTERM: preemption or shutdown)");
  // A serve that stops its machines may still take what this worker kept.
  if (kept_.maybe_holding()) kept_.Deliver();
  kept_.ReportHeldLost();
  registration_.Leave();
  return 0;
}

}  // namespace trainq
