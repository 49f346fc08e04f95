#include "agent/runner/executor.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "agent/repo/git_repo.h"
#include "agent/repo/mirror.h"
#include "agent/results/analysis.h"
#include "agent/runner/run_process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

std::string ReadFrom(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

LocalExecutor::LocalExecutor(Store& store, ProcessRunner& runner, const Clock& clock,
                             ExecutorOptions options)
    : store_(store), runner_(runner), clock_(clock), options_(std::move(options)) {
  free_gpus_ = options_.gpus;
}

Status LocalExecutor::Register(const std::string& provider_id) {
  MachineRow m;
  m.pool = "local";
  m.provider = "local";
  m.provider_id = provider_id;
  m.state = "ready";
  m.slots = options_.slots;
  m.gpus = static_cast<int>(options_.gpus.size());
  // As a worker reports at register: whether `trainer:` runs can start here.
  m.resources_json =
      nlohmann::json{{"trainer", FindTrainqTrain(options_.bin_dir, PathEnv())}}.dump();
  ASSIGN_OR_RETURN(auto id, store_.machines().UpsertMachine(m, clock_.Now()));
  machine_id_ = id;
  last_machine_touch_ = clock_.Now();
  return {};
}

Result<std::string> LocalExecutor::Worktree(const LeasedRun& run) {
  return CachedWorktree(options_.data_dir, run.repo_url, run.sha, std::to_string(run.run_id));
}

Status LocalExecutor::StartRun(const LeasedRun& run) {
  TimeMs now = clock_.Now();
  RunPaths paths;
  fs::path dir = fs::path(options_.data_dir) / "runs" / std::to_string(run.run_id);
  paths.dir = dir.string();
  paths.log = (dir / "output.log").string();
  paths.metrics = (dir / "metrics.jsonl").string();
  paths.output_dir = (dir / "output").string();
  std::error_code ec;
  fs::create_directories(paths.output_dir, ec);
  if (ec) return Fail(ErrorKind::kIo, paths.output_dir + ": " + ec.message());
  TRY(WriteFile(paths.metrics, ""));
  {
    std::ofstream log(paths.log, std::ios::app);
    log << RunBanner(run, "", now) << PassthroughNote(run, options_.env_passthrough);
  }
  ASSIGN_OR_RETURN(paths.workdir, Worktree(run));

  Active a;
  a.run = run;
  a.paths = paths;
  a.log_offset = fs::file_size(paths.log, ec);
  for (int i = 0; i < run.gpus && !free_gpus_.empty(); ++i) {
    a.gpus.push_back(free_gpus_.front());
    free_gpus_.erase(free_gpus_.begin());
  }
  auto spec = BuildRunProcess(run, paths, options_.bin_dir, Join(a.gpus, ","),
                              options_.env_passthrough);
  auto pid = run.nodes > 0 ? SpawnGang(a, spec) : runner_.Spawn(spec);
  if (!pid) {
    free_gpus_.insert(free_gpus_.end(), a.gpus.begin(), a.gpus.end());
    return std::unexpected(pid.error());
  }
  a.pid = *pid;
  a.started_ms = now;
  a.last_heartbeat_ms = now;
  if (auto st = store_.runs().MarkRunning(run.run_id, run.token, now, paths.log); !st) {
    // The lease is gone already (cancelled in the meantime): stop at once.
    KillNow(a);
    free_gpus_.insert(free_gpus_.end(), a.gpus.begin(), a.gpus.end());
    spdlog::warn("run {}: {}", run.run_id, st.error().message);
    return {};
  }
  spdlog::info("run {} started: {} seed {} (attempt {}), pid {}", run.run_id, run.experiment,
               run.seed, run.attempt, a.pid);
  active_.emplace(run.run_id, std::move(a));
  return {};
}

void LocalExecutor::Finish(Active& a, const ExitStatus& status) {
  TimeMs now = clock_.Now();
  const auto& run = a.run;
  std::string log_text = ReadFrom(a.paths.log, a.log_offset);
  auto metrics_text = trainq::ReadFile(a.paths.metrics).value_or("");
  auto [reading, outcome] = JudgeAttempt(run, status, a.timed_out, log_text, metrics_text);
  for (const auto& w : reading.warnings) spdlog::warn("run {}: {}", run.run_id, w);
  // SQLite has no NaN (it would store NULL): non-finite points are left out;
  // a non-finite final metric failed the run already.
  std::erase_if(reading.points, [](const MetricPoint& p) { return !std::isfinite(p.value); });
  if (!reading.points.empty()) {
    if (auto st = store_.runs().AddMetrics(run.run_id, run.token, reading.points, now); !st) {
      spdlog::warn("run {}: metrics not stored: {}", run.run_id, st.error().message);
    }
  }

  if (outcome.succeeded) {
    if (auto st = store_.runs().Complete(run.run_id, run.token, now, *reading.value,
                                  status.code); !st) {
      spdlog::warn("run {}: result refused: {}", run.run_id, st.error().message);
    } else {
      spdlog::info("run {} succeeded: {} = {} in {}", run.run_id, run.metric_name,
                   FormatDouble(*reading.value, 4), FormatDuration(now - a.started_ms));
    }
  } else {
    std::string full = outcome.error;
    if (full.size() > 2000) full = full.substr(0, 2000) + "...";
    std::optional<int> code;
    if (status.signal == 0) code = status.code;
    auto next = store_.runs().FailRun(run.run_id, run.token, now, full, code, !outcome.config_error);
    if (!next) {
      spdlog::warn("run {}: failure not recorded: {}", run.run_id, next.error().message);
    } else {
      spdlog::warn("run {} {}: {} seed {}: {}; log {}", run.run_id,
                   *next == RunState::kDead ? "dead" : "failed, will retry", run.experiment,
                   run.seed, full, a.paths.log);
    }
  }
  free_gpus_.insert(free_gpus_.end(), a.gpus.begin(), a.gpus.end());
  // An adaptive batch whose round just ended may need more runs.
  if (auto added = ExtendIfNeeded(store_, run.batch_id, clock_.Now()); !added) {
    spdlog::warn("batch {}: adaptive repeats not evaluated: {}", run.batch_id,
                 added.error().message);
  } else if (*added > 0) {
    spdlog::info("batch {}: rule not met yet, {} more run(s) queued", run.batch_id, *added);
  }
}

void LocalExecutor::Kill(Active& a, TimeMs now) {
  if (a.gang) {
    a.gang->StopGently(now, options_.kill_grace_ms);
    return;
  }
  StopGently(runner_, a.pid, a.kill_sent_ms, now, options_.kill_grace_ms);
}

Result<int> LocalExecutor::SpawnGang(Active& a, const ProcessSpec& base) {
  GangLayout layout;
  layout.master_addr = "127.0.0.1";
  ASSIGN_OR_RETURN(layout.master_port, FreeTcpPort());
  layout.nodes = 1;
  layout.procs_per_node = std::max(1, a.run.procs_per_node);
  std::vector<int> devices;
  for (const auto& g : a.gpus) {
    try {
      devices.push_back(std::stoi(g));
    } catch (...) {
    }
  }
  ProcessSpec spec = base;
  if (devices.empty()) spec.env["CUDA_VISIBLE_DEVICES"] = "";
  auto gang = std::make_unique<GangProcesses>(runner_);
  TRY(gang->Start(GangSpecs(spec, layout, devices, a.paths.dir)));
  int first = gang->pids().front();
  a.gang = std::move(gang);
  return first;
}

std::optional<ExitStatus> LocalExecutor::PollActive(Active& a) {
  if (a.gang) return a.gang->Poll();
  auto status = runner_.Poll(a.pid);
  // Whatever the script left behind in its group goes too.
  if (status) runner_.KillGroup(a.pid, SIGKILL);
  return status;
}

void LocalExecutor::KillNow(Active& a) {
  if (a.gang) {
    a.gang->KillAll();
    return;
  }
  runner_.KillGroup(a.pid, SIGKILL);
  runner_.Wait(a.pid);
}

bool LocalExecutor::WaitForExit(TimeMs max_ms) {
  // A real wait only: a FakeClock's time would not move through it.
  if (active_.empty() || dynamic_cast<const SystemClock*>(&clock_) == nullptr) return false;
  std::vector<pollfd> fds;
  for (const auto& [id, a] : active_) {
    int pid = a.gang ? a.gang->pids().front() : a.pid;
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
  if (fds.empty()) return false;
  ::poll(fds.data(), fds.size(), static_cast<int>(std::max<TimeMs>(0, max_ms)));
  for (const auto& f : fds) ::close(f.fd);
  return true;
}

Status LocalExecutor::Step() {
  TimeMs now = clock_.Now();
  // 1. Reap.
  for (auto it = active_.begin(); it != active_.end();) {
    auto status = PollActive(it->second);
    if (!status) {
      ++it;
      continue;
    }
    Finish(it->second, *status);
    it = active_.erase(it);
  }
  // 2. Timeouts; 3. heartbeats.
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = it->second;
    if (a.run.timeout_s > 0 && now - a.started_ms > a.run.timeout_s * 1000) {
      if (!a.timed_out) {
        spdlog::warn("run {}: timeout of {} reached, killing its process group", a.run.run_id,
                     FormatDuration(a.run.timeout_s * 1000));
      }
      a.timed_out = true;
      Kill(a, now);
    }
    if (now - a.last_heartbeat_ms >= options_.heartbeat_ms) {
      auto hb = store_.runs().Heartbeat(a.run.run_id, a.run.token, now, options_.lease_ms);
      if (!hb && hb.error().kind == ErrorKind::kConflict) {
        spdlog::info("run {}: lease lost ({}); stopping it", a.run.run_id, hb.error().message);
        KillNow(a);
        free_gpus_.insert(free_gpus_.end(), a.gpus.begin(), a.gpus.end());
        it = active_.erase(it);
        continue;
      }
      if (!hb) {
        spdlog::warn("run {}: heartbeat failed: {}", a.run.run_id, hb.error().message);
      } else {
        a.last_heartbeat_ms = now;
      }
    }
    ++it;
  }
  if (machine_id_ && now - last_machine_touch_ >= options_.heartbeat_ms) {
    if (store_.machines().TouchMachine(*machine_id_, now, "ready")) last_machine_touch_ = now;
  }
  // 4. Leases of silent executors.
  ASSIGN_OR_RETURN(int expired, store_.runs().ExpireLeases(now));
  if (expired > 0) spdlog::warn("{} run(s) whose lease expired went back to the queue", expired);
  // 5. Fill free slots.
  int free_slots = options_.slots - static_cast<int>(active_.size());
  if (free_slots <= 0) return {};
  ASSIGN_OR_RETURN(auto leased, store_.runs().Lease(options_.worker, now, options_.lease_ms, free_slots));
  for (const auto& run : leased) {
    if (auto st = StartRun(run); !st) {
      spdlog::error("run {}: cannot start: {}", run.run_id, st.error().message);
      (void)store_.runs().FailRun(run.run_id, run.token, clock_.Now(),
                           "cannot start: " + st.error().message, std::nullopt);
    }
  }
  return {};
}

Result<bool> LocalExecutor::QueueDrained() {
  if (!active_.empty()) return false;
  ASSIGN_OR_RETURN(auto counts, store_.runs().CountByState());
  for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
    if (counts[static_cast<int>(s)] > 0) return false;
  }
  return true;
}

void LocalExecutor::Shutdown(const std::string& reason) {
  // Runs that ended before the stop keep their result: report them first.
  for (auto it = active_.begin(); it != active_.end();) {
    if (auto status = PollActive(it->second)) {
      Finish(it->second, *status);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, a] : active_) {
    if (a.gang) KillNow(a);  // its processes stop together
  }
  for (auto& [id, a] : active_) {
    if (!a.gang) runner_.KillGroup(a.pid, SIGTERM);
  }
  TimeMs deadline = clock_.Now() + options_.kill_grace_ms;
  for (auto& [id, a] : active_) {
    while (!a.gang && !runner_.Poll(a.pid)) {
      if (clock_.Now() >= deadline) {
        runner_.KillGroup(a.pid, SIGKILL);
        runner_.Wait(a.pid);
        break;
      }
      clock_.SleepFor(20);
    }
    if (auto st = store_.runs().Interrupt(id, a.run.token, clock_.Now(), reason); !st) {
      spdlog::warn("run {}: {}", id, st.error().message);
    } else {
      spdlog::info("run {} interrupted and returned to the queue", id);
    }
  }
  active_.clear();
  if (machine_id_) (void)store_.machines().TouchMachine(*machine_id_, clock_.Now(), "stopped");
}

}  // namespace trainq
