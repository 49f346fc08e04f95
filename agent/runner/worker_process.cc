// A run's process: its checkout (cached worktree or the server's packfile,
// then a copy of its own), the sandbox, starting a job's processes, killing
// on timeout or stop, and judging how a process ended (FinishProc).
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

#include "agent/repo/git_repo.h"
#include "agent/runner/gang.h"
#include "agent/runner/run_process.h"
#include "agent/runner/worker_util.h"
#include "core/http_client.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

using worker_util::ReadFrom;

Result<std::string> Worker::Worktree(const LeasedRun& run) {
  const std::string tag = std::to_string(run.run_id);
  if (config_.source != "server") {
    // The repository as the server names it: a path (this machine shares the
    // server's filesystem: local and most Slurm pools) or a URL.
    auto wt = CachedWorktree(config_.data_dir, run.repo_url, run.sha, tag);
    if (wt) return wt;
    spdlog::info("run {}: {}; fetching the commit from the server", run.run_id,
                 wt.error().message);
  }
  fs::path dir = fs::path(config_.data_dir) / "worktrees" / run.sha;
  std::error_code ec;
  if (fs::exists(dir / ".trainq-checkout-complete", ec)) return dir.string();
  const std::string source_dir = (fs::path(config_.data_dir) / "source.git").string();
  {
    ASSIGN_OR_RETURN(auto repo, GitRepo::OpenOrInitBare(source_dir));
    if (!repo.HasCommit(run.sha)) {
      auto a = link_.Call("/api/v1/runs/" + tag + "/source",
                          ToJson(RunEnvelope{run.token, std::nullopt}), 300'000);
      if (!a) return std::unexpected(a.error());
      if (a->status != 200) {
        return Fail(a->status == 409 ? ErrorKind::kConflict : ErrorKind::kUnavailable,
                    "fetching commit " + run.sha.substr(0, 12) + " from the server: HTTP " +
                        std::to_string(a->status) + " " + AnswerError(a->body));
      }
      TRY(repo.AddPack(a->raw));
      if (!repo.HasCommit(run.sha)) {
        return Fail(ErrorKind::kCorruption, "the server's packfile for run " + tag +
                                                " does not hold commit " + run.sha);
      }
      spdlog::info("run {}: commit {} fetched from the server ({} bytes)", run.run_id,
                   run.sha.substr(0, 12), a->raw.size());
    }
  }
  return CachedWorktree(config_.data_dir, source_dir, run.sha, tag);
}

Result<std::string> Worker::RunCheckout(const LeasedRun& run, const std::string& work_dir) {
  ASSIGN_OR_RETURN(auto cached, Worktree(run));
  fs::path dir = fs::path(work_dir) / "checkout";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir.parent_path(), ec);
  fs::copy(cached, dir, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) return Fail(ErrorKind::kIo, "cannot copy the checkout into " + dir.string() + ": " +
                                          ec.message());
  fs::remove(dir / ".trainq-checkout-complete", ec);
  return dir.string();
}

void Worker::Sandbox(ProcessSpec& spec, std::vector<std::string> writable,
                     const std::vector<std::string>& readable, const std::string& work_dir,
                     bool share_ipc) {
  if (config_.bwrap.empty()) return;
  SandboxRun sr;
  std::error_code ec;
  // HOME is read-only inside: the common ML libraries' caches go to this
  // machine's cache dir, unless the operator passes their own through.
  if (!config_.cache_dir.empty() && fs::is_directory(config_.cache_dir, ec)) {
    writable.push_back(config_.cache_dir);
    for (auto& [k, v] : CacheEnvironment(config_.cache_dir)) {
      if (EnvNameMatches(k, spec.pass_env) && std::getenv(k.c_str())) continue;
      spec.env.emplace(k, v);
    }
  }
  sr.writable = std::move(writable);
  sr.readable = readable;
  sr.share_ipc = share_ipc;
  fs::path tmp = fs::path(work_dir) / "tmp";
  fs::remove_all(tmp, ec);
  if (fs::create_directories(tmp, ec); !ec) sr.tmp = tmp.string();
  WrapInSandbox(spec, config_.bwrap, config_.sandbox, sr);
}

void Worker::StartJob(Job& job) {
  while (!job.proc && !job.pending.empty()) {
    auto ids = std::move(job.pending.front());
    job.pending.erase(job.pending.begin());
    std::erase_if(ids, [&](std::int64_t id) { return !runs_.contains(id); });
    if (ids.empty()) continue;
    if (auto st = StartProc(job, ids); !st) {
      spdlog::error("run(s) {}: cannot start: {}", fmt::join(ids, ", "), st.error().message);
      for (auto id : ids) {
        Complete(id, "failed", std::nullopt, std::nullopt, "cannot start: " + st.error().message);
      }
    }
  }
}

Status Worker::StartProc(Job& job, const std::vector<std::int64_t>& run_ids) {
  TimeMs now = clock_.Now();
  RunSlot& first = runs_.at(run_ids.front());
  const bool fused = run_ids.size() > 1;
  // Each attempt starts from a fresh work tree: nothing an earlier attempt
  // left there (a symlink to a file of the worker's) is ever opened.
  for (auto id : run_ids) TRY(PrepareRunWork(runs_.at(id).paths));
  Proc p;
  p.run_ids = run_ids;
  p.timeout_s = first.run.lease.timeout_s;
  LeasedRun spec_run = first.run.lease;
  std::string header;
  std::string where = config_.machine.empty() ? config_.hostname : config_.machine;
  std::string seeds_dir;  // a fused group's seed links, read-only inside
  if (fused) {
    fs::path gdir = fs::path(config_.data_dir) / "groups" /
                    (std::to_string(first.run.group) + "-" + std::to_string(run_ids.front()));
    std::error_code ec;
    fs::remove_all(gdir, ec);
    fs::create_directories(gdir / "seeds", ec);
    if (ec) return Fail(ErrorKind::kIo, gdir.string() + ": " + ec.message());
    // <group dir>/seeds/<seed> -> runs/<id>/work: each replica writes into its
    // own run's work tree; the links and the log are the worker's.
    for (auto id : run_ids) {
      const RunSlot& r = runs_.at(id);
      fs::path link = gdir / "seeds" / std::to_string(r.run.lease.seed);
      fs::create_directory_symlink(fs::absolute(r.paths.work), link, ec);
      if (ec) return Fail(ErrorKind::kIo, link.string() + ": " + ec.message());
    }
    seeds_dir = (gdir / "seeds").string();
    spec_run.command = FusedTrainerCommand(first.run.trainer, first.run.lease.seed,
                                           static_cast<int>(run_ids.size()), seeds_dir);
    p.log_path = (gdir / "output.log").string();
    header = "=== trainq: runs " + fmt::format("{}", fmt::join(run_ids, ", ")) + " (" +
             spec_run.experiment + ", seeds " + std::to_string(spec_run.seed) + "-" +
             std::to_string(spec_run.seed + static_cast<std::int64_t>(run_ids.size()) - 1) +
             " fused, attempt " + std::to_string(spec_run.attempt) + ") on " + where + " at " +
             FormatTimestamp(now) + " UTC ===\n";
  } else {
    p.log_path = first.paths.log;  // this attempt's output only; the server keeps the rest
    header = RunBanner(spec_run, where, now);
  }
  header += PassthroughNote(spec_run, config_.env_passthrough);
  TRY(ResetWorkerFile(p.log_path, header));
  p.log_start = 0;
  RunPaths paths = first.paths;
  paths.log = p.log_path;
  ASSIGN_OR_RETURN(paths.workdir, RunCheckout(spec_run, first.paths.work));
  std::string cuda;
  for (int d : job.devices) cuda += (cuda.empty() ? "" : ",") + std::to_string(d);
  auto spec = BuildRunProcess(spec_run, paths, config_.bin_dir, cuda, config_.env_passthrough);
  // The trainer substitutes {seed} in its paths itself: not the run's seed.
  if (fused) spec.argv = {"/bin/sh", "-c", spec_run.command};
  if (job.gpus == 0) spec.env["CUDA_VISIBLE_DEVICES"] = "";
  {
    std::vector<std::string> writable = {paths.workdir};
    for (auto id : run_ids) writable.push_back(runs_.at(id).paths.work);
    std::vector<std::string> readable;
    if (fused) readable.push_back(seeds_dir);
    Sandbox(spec, std::move(writable), readable, first.paths.work, false);
  }
  ASSIGN_OR_RETURN(p.pid, runner_.Spawn(spec));
  p.started_ms = now;
  for (auto id : run_ids) {
    RunSlot& r = runs_.at(id);
    r.started = true;
    spdlog::info("run {} started: {} seed {} (attempt {}){}, pid {}", id, r.run.lease.experiment,
                 r.run.lease.seed, r.run.lease.attempt, fused ? " fused" : "", p.pid);
  }
  job.proc = std::move(p);
  // The first heartbeat says started: the run is `running` on the server now.
  for (auto id : run_ids) {
    if (auto it = runs_.find(id); it != runs_.end() && !Heartbeat(it->second, &*job.proc)) {
      Forget(id);
    }
  }
  return {};
}

void Worker::Kill(Proc& p, TimeMs now) {
  StopGently(runner_, p.pid, p.kill_sent_ms, now, config_.kill_grace_ms);
}

void Worker::FinishProc(Job& job, const ExitStatus& status) {
  Proc p = std::move(*job.proc);
  job.proc.reset();
  const bool fused = p.run_ids.size() > 1;
  if (auto it = runs_.find(p.run_ids.front()); it != runs_.end()) {
    // The run's own checkout and /tmp go; its output dir and files stay.
    std::error_code ec;
    fs::remove_all(fs::path(it->second.paths.work) / "checkout", ec);
    fs::remove_all(fs::path(it->second.paths.work) / "tmp", ec);
  }
  std::string log_text = ReadFrom(p.log_path, p.log_start, std::int64_t{1} << 30);
  for (auto id : p.run_ids) {
    auto it = runs_.find(id);
    if (it == runs_.end()) continue;
    RunSlot& r = it->second;
    const auto& run = r.run.lease;
    auto metrics_text = ReadRunFile(r.paths.metrics);
    // A fused log holds every seed's lines: only the metrics files tell them apart.
    auto [reading, outcome] = JudgeAttempt(run, status, p.timed_out, log_text, metrics_text, fused);
    if (!outcome.succeeded && !config_.bwrap.empty()) {
      if (std::string hint = SandboxHint(log_text); !hint.empty()) {
        outcome.error += outcome.error.empty() ? hint : " (" + hint + ")";
      }
    }
    for (const auto& w : reading.warnings) spdlog::warn("run {}: {}", id, w);
    if (!Ship(r, p, true)) {
      // A success is still reported: the server takes it when nobody else
      // holds the run (the lease only expired), and refuses it otherwise.
      if (!(status.ok() && !p.timed_out && reading.value)) {
        spdlog::info("run {}: lease lost before its result was reported", id);
        Forget(id);
        continue;
      }
      spdlog::info("run {}: lease lost, but the command succeeded: reporting it", id);
    }
    // A regex match is a point the metrics file did not have.
    if (reading.value && reading.points.size() > r.points_sent) {
      MetricsRequest m;
      m.token = run.token;
      for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
        const auto& pt = reading.points[i];
        if (!std::isfinite(pt.value)) continue;
        MetricPoint point = pt;
        point.step.reset();  // a regex match has no step
        m.points.push_back(std::move(point));
      }
      if (!m.points.empty()) {
        (void)link_.Call("/api/v1/runs/" + std::to_string(id) + "/metrics", ToJson(m));
      }
    }
    std::optional<int> code;
    if (status.signal == 0) code = status.code;
    if (outcome.succeeded) {
      Complete(id, "succeeded", reading.value, code, "", false, &p);
    } else {
      Complete(id, "failed", std::nullopt, code, outcome.error, outcome.config_error, &p);
    }
  }
}

void Worker::StopProc(Proc& p) {
  runner_.KillGroup(p.pid, SIGKILL);
  runner_.Wait(p.pid);
}

}  // namespace trainq
