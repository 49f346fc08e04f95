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
#include "core/http_client.h"
#include "core/strings.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

namespace {

// Up to `max` bytes of `path` from `offset`.
std::string ReadFrom(const std::string& path, std::int64_t offset, std::int64_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  std::int64_t size = in.tellg();
  if (size <= offset) return {};
  std::int64_t n = std::min<std::int64_t>(size - offset, max);
  std::string s(static_cast<size_t>(n), '\0');
  in.seekg(offset);
  in.read(s.data(), n);
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

std::int64_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::int64_t>(n);
}

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

std::string ErrorOf(const json& body) { return Get<std::string>(body, "error", ""); }

}  // namespace

Result<WorkerRun> ParseWorkerRun(const json& j) {
  if (!j.is_object())
    return Fail(ErrorKind::kInvalidArgument, "lease answer: a run is not an object");
  WorkerRun w;
  try {
    auto& l = w.lease;
    l.run_id = j.at("run_id").get<std::int64_t>();
    l.token = j.at("token").get<std::int64_t>();
    l.batch_id = Get<std::int64_t>(j, "batch_id", 0);
    l.seed = Get<std::int64_t>(j, "seed", 0);
    l.repeat = Get<int>(j, "repeat", 0);
    l.attempt = Get<int>(j, "attempt", 1);
    l.expires_ms = Get<TimeMs>(j, "expires_ms", 0);
    l.experiment = Get<std::string>(j, "experiment", "");
    l.command = j.at("command").get<std::string>();
    l.metric_name = Get<std::string>(j, "metric_name", "accuracy");
    l.metric_regex = Get<std::string>(j, "metric_regex", "");
    l.repo_url = j.at("repo_url").get<std::string>();
    l.sha = j.at("sha").get<std::string>();
    l.timeout_s = Get<std::int64_t>(j, "timeout_s", 0);
    l.gpus = Get<int>(j, "gpus", 0);
    w.trainer = Get<std::string>(j, "trainer", "");
    w.group = Get<std::int64_t>(j, "group", 0);
    l.nodes = Get<int>(j, "nodes", 0);
    l.procs_per_node = Get<int>(j, "procs_per_node", 0);
    l.node_rank = Get<int>(j, "node_rank", 0);
    if (j.contains("env_passthrough") && j["env_passthrough"].is_array()) {
      std::vector<std::string> names;
      for (const auto& n : j["env_passthrough"]) {
        if (n.is_string()) names.push_back(n.get<std::string>());
      }
      l.env_passthrough = std::move(names);
    }
  } catch (const json::exception& e) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string("lease answer: a run lacks a field: ") + e.what());
  }
  return w;
}

std::vector<std::vector<std::vector<WorkerRun>>> PlanJobs(const std::vector<WorkerRun>& runs) {
  std::vector<std::vector<std::vector<WorkerRun>>> jobs;
  std::map<std::int64_t, size_t> group_job;  // group -> index in jobs
  std::vector<std::vector<WorkerRun>> grouped;
  for (const auto& r : runs) {
    if (r.group > 0 && !r.trainer.empty()) {
      auto [it, added] = group_job.try_emplace(r.group, grouped.size());
      if (added) grouped.emplace_back();
      grouped[it->second].push_back(r);
      if (added) jobs.emplace_back();  // placeholder, filled below
      continue;
    }
    jobs.push_back({{r}});
  }
  // Fill the placeholders in order: the k-th empty job is the k-th group.
  size_t g = 0;
  for (auto& job : jobs) {
    if (!job.empty()) continue;
    auto members = grouped[g++];
    std::sort(members.begin(), members.end(),
              [](const WorkerRun& a, const WorkerRun& b) { return a.lease.seed < b.lease.seed; });
    for (const auto& r : members) {
      if (!job.empty() && job.back().back().lease.seed + 1 == r.lease.seed) {
        job.back().push_back(r);
      } else {
        job.push_back({r});
      }
    }
  }
  return jobs;
}

std::string FusedTrainerCommand(const std::string& spec, std::int64_t seed, int repeats,
                                const std::string& dir) {
  return "trainq-train " + ShellQuote(spec) + " --seed " + std::to_string(seed) + " --repeats " +
         std::to_string(repeats) + " --metrics-file " +
         ShellQuote((fs::path(dir) / "{seed}" / "metrics.jsonl").string()) + " --output-dir " +
         ShellQuote((fs::path(dir) / "{seed}" / "output").string());
}

// ---- GpuPool ----------------------------------------------------------------

GpuPool::GpuPool(const std::vector<GpuInfo>& gpus, int runs_per_gpu)
    : runs_per_gpu_(std::max(1, runs_per_gpu)) {
  for (const auto& g : gpus) free_units_[g.index] = runs_per_gpu_;
}

double GpuPool::FreeGpus() const {
  int units = 0;
  for (const auto& [i, n] : free_units_) units += n;
  return static_cast<double>(units) / runs_per_gpu_;
}

std::optional<std::vector<int>> GpuPool::Take(int gpus) {
  if (gpus <= 0) return std::vector<int>{};
  if (gpus == 1) {
    // Pack: the GPU with the fewest free units that still has one.
    std::optional<int> best;
    for (const auto& [i, n] : free_units_) {
      if (n > 0 && (!best || n < free_units_[*best])) best = i;
    }
    if (!best) return std::nullopt;
    --free_units_[*best];
    return std::vector<int>{*best};
  }
  std::vector<int> whole;
  for (const auto& [i, n] : free_units_) {
    if (n == runs_per_gpu_ && static_cast<int>(whole.size()) < gpus) whole.push_back(i);
  }
  if (static_cast<int>(whole.size()) < gpus) return std::nullopt;
  for (int i : whole) free_units_[i] = 0;
  return whole;
}

void GpuPool::Give(const std::vector<int>& devices, int gpus) {
  for (int i : devices) {
    if (gpus == 1) {
      free_units_[i] = std::min(runs_per_gpu_, free_units_[i] + 1);
    } else {
      free_units_[i] = runs_per_gpu_;
    }
  }
}

// ---- Worker -----------------------------------------------------------------

Worker::Worker(HttpClient& http, ProcessRunner& runner, const Clock& clock, WorkerConfig config)
    : http_(http),
      runner_(runner),
      clock_(clock),
      config_(std::move(config)),
      gpus_(config_.gpus, config_.runs_per_gpu),
      start_ms_(clock.Now()),
      orphan_timeout_ms_(config_.orphan_timeout_ms),
      self_stop_(config_.self_stop),
      outbox_((fs::path(config_.data_dir) / "outbox").string()),
      last_contact_ms_(start_ms_) {}

Worker::~Worker() = default;

int Worker::active_runs() const { return static_cast<int>(runs_.size()); }

Result<Worker::Answer> Worker::Post(const HttpRequest& request) {
  // Run routes want to know which machine calls (its pool's token is shared):
  // a body names it itself (worker_id), or this header does.
  HttpRequest named = request;
  if (worker_id_ && !FindHeader(named.headers, "X-Trainq-Worker")) {
    named.headers.emplace_back("X-Trainq-Worker", std::to_string(*worker_id_));
  }
  auto resp = http_.Send(named);
  TimeMs now = clock_.Now();
  if (!resp) {
    NoteFailure(resp.error());
    return std::unexpected(resp.error());
  }
  Answer a;
  a.status = resp->status;
  a.body = json::parse(resp->body, nullptr, false);
  if (a.body.is_discarded()) a.body = json::object();
  a.raw = std::move(resp->body);
  if (a.status >= 500) {
    Error e{ErrorKind::kUnavailable, "POST " + UrlForLog(request.url) + ": HTTP " +
                                         std::to_string(a.status) + " " + ErrorOf(a.body)};
    NoteFailure(e);
    return std::unexpected(e);
  }
  last_contact_ms_ = now;
  backoff_ms_ = 0;
  return a;
}

Result<Worker::Answer> Worker::Call(const std::string& path, const json& body, TimeMs timeout_ms) {
  HttpRequest req;
  req.method = "POST";
  req.url = config_.server + path;
  req.headers = {{"Authorization", "Bearer " + config_.token},
                 {"Content-Type", "application/json"}};
  req.body = body.dump();
  req.timeout_ms = timeout_ms;
  return Post(req);
}

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
      auto a = Call("/api/v1/runs/" + tag + "/source", {{"token", run.token}}, 300'000);
      if (!a) return std::unexpected(a.error());
      if (a->status != 200) {
        return Fail(a->status == 409 ? ErrorKind::kConflict : ErrorKind::kUnavailable,
                    "fetching commit " + run.sha.substr(0, 12) + " from the server: HTTP " +
                        std::to_string(a->status) + " " + ErrorOf(a->body));
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

Result<std::string> Worker::RunCheckout(const LeasedRun& run, const std::string& run_dir) {
  ASSIGN_OR_RETURN(auto cached, Worktree(run));
  fs::path dir = fs::path(run_dir) / "checkout";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir.parent_path(), ec);
  fs::copy(cached, dir, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) return Fail(ErrorKind::kIo, "cannot copy the checkout into " + dir.string() + ": " +
                                          ec.message());
  fs::remove(dir / ".trainq-checkout-complete", ec);
  return dir.string();
}

void Worker::Sandbox(ProcessSpec& spec, const std::vector<std::string>& writable,
                     const std::string& run_dir, bool share_ipc) {
  if (config_.bwrap.empty()) return;
  SandboxRun sr;
  sr.writable = writable;
  sr.share_ipc = share_ipc;
  fs::path tmp = fs::path(run_dir) / "tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (fs::create_directories(tmp, ec); !ec) sr.tmp = tmp.string();
  WrapInSandbox(spec, config_.bwrap, config_.sandbox, sr);
}

void Worker::NoteFailure(const Error& e) {
  backoff_ms_ =
      backoff_ms_ == 0 ? config_.retry_base_ms : std::min(backoff_ms_ * 2, config_.retry_max_ms);
  next_try_ms_ = clock_.Now() + backoff_ms_;
  spdlog::warn("server not reachable: {}; next try in {}", e.message, FormatDuration(backoff_ms_));
}

Status Worker::Register() {
  json gpus = json::array();
  for (const auto& g : config_.gpus) {
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_mb", g.memory_mb}});
  }
  json req = {{"name", config_.machine},
              {"hostname", config_.hostname},
              {"pid", config_.pid},
              {"slots", config_.slots},
              {"gpus", gpus},
              {"cpus", config_.cpus},
              {"memory_mb", config_.memory_mb},
              {"version", config_.version},
              // Whether `trainer:` runs can start here: `trainq submit` warns
              // when no worker of an experiment's pool has trainq-train.
              {"trainer", FindTrainqTrain(config_.bin_dir, PathEnv())}};
  if (config_.runs_per_gpu > 0) req["runs_per_gpu"] = config_.runs_per_gpu;
  auto a = Call("/api/v1/workers/register", req);
  if (!a) return {};  // retried after the backoff
  if (a->status == 409) {
    spdlog::info("the server answered that machine '{}' is not to run anything ({}); exiting",
                 config_.machine, ErrorOf(a->body));
    draining_ = true;
    exit_code_ = 0;
    return {};
  }
  if (a->status != 200) {
    std::string why = "register at " + UrlForLog(config_.server) + " refused: HTTP " +
                      std::to_string(a->status) + " " + ErrorOf(a->body);
    // A machine the server will never take (a wrong or revoked token) only
    // costs money: a provider-booted worker stops it.
    if ((a->status == 401 || a->status == 403) && !self_stop_.empty()) {
      spdlog::error("{}; running the pool's self-stop command", why);
      RunSelfStop();
    }
    return Fail(ErrorKind::kInvalidArgument, why);
  }
  worker_id_ = Get<std::int64_t>(a->body, "worker_id", 0);
  registered_ = true;
  heartbeat_ms_ = std::max<TimeMs>(100, Get<TimeMs>(a->body, "heartbeat_ms", 10'000));
  orphan_timeout_ms_ = Get<TimeMs>(a->body, "orphan_timeout_ms", config_.orphan_timeout_ms);
  self_stop_ = Get<std::string>(a->body, "self_stop", self_stop_);
  if (config_.runs_per_gpu <= 0) {  // the pool's packing
    config_.runs_per_gpu = std::max(1, Get<int>(a->body, "runs_per_gpu", 1));
    gpus_ = GpuPool(config_.gpus, config_.runs_per_gpu);
  }
  spdlog::info("registered with {} as worker {} of pool '{}' ({} slot(s), {} GPU(s))",
               UrlForLog(config_.server), *worker_id_, Get<std::string>(a->body, "pool", ""),
               config_.slots, config_.gpus.size());
  return {};
}

Status Worker::Lease() {
  int free_slots = config_.slots - static_cast<int>(jobs_.size());
  if (free_slots <= 0) return {};
  TimeMs wait = config_.lease_wait_ms;
  if (!jobs_.empty()) wait = std::min(wait, heartbeat_ms_ / 2);
  if (config_.once) wait = std::min<TimeMs>(wait, 2'000);  // one-shot: do not linger
  json req = {{"max_runs", free_slots},
              {"free_gpus", gpus_.FreeGpus()},
              {"runs_per_gpu", config_.runs_per_gpu},
              {"fuse_max", config_.fuse_max},
              {"wait_ms", wait}};
  auto a = Call("/api/v1/workers/" + std::to_string(*worker_id_) + "/lease", req, wait + 15'000);
  if (!a) return {};
  if (a->status == 409) {
    if (!draining_) spdlog::info("machine is draining ({}); finishing what runs", ErrorOf(a->body));
    draining_ = true;
    return {};
  }
  if (a->status == 401 || a->status == 403) {
    return Fail(ErrorKind::kInvalidArgument,
                "lease refused: HTTP " + std::to_string(a->status) + " " + ErrorOf(a->body));
  }
  if (a->status == 404) {
    spdlog::warn("the server does not know worker {} ({}); registering again", *worker_id_,
                 ErrorOf(a->body));
    worker_id_.reset();
    return {};
  }
  if (a->status != 200) {
    spdlog::warn("lease refused: HTTP {} {}", a->status, ErrorOf(a->body));
    NoteFailure(Error{ErrorKind::kUnavailable, "lease answered " + std::to_string(a->status)});
    return {};
  }
  if (Get<std::string>(a->body, "state", "ready") == "draining") {
    if (!draining_) spdlog::info("machine is draining; finishing what runs, leasing nothing more");
    draining_ = true;
  }
  std::vector<WorkerRun> runs;
  if (a->body.contains("runs") && a->body["runs"].is_array()) {
    for (const auto& j : a->body["runs"]) {
      auto r = ParseWorkerRun(j);
      if (!r) {
        spdlog::error("{}", r.error().message);
        continue;
      }
      runs.push_back(std::move(*r));
    }
  }
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
        fs::path dir = fs::path(config_.data_dir) / "runs" / std::to_string(r.lease.run_id);
        slot.paths.dir = dir.string();
        slot.paths.log = (dir / "output.log").string();
        slot.paths.metrics = (dir / "metrics.jsonl").string();
        slot.paths.output_dir = (dir / "output").string();
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

// Gang members (agent/runner/gang.h) take the whole machine and run beside
// the slot jobs; they are removed from `runs`.
void Worker::StartGangMembers(std::vector<WorkerRun>& runs) {
  for (auto& r : runs) {
    if (r.lease.nodes <= 0) continue;
    GangMemberConfig c;
    c.worker_id = *worker_id_;
    c.server = config_.server;
    c.data_dir = config_.data_dir;
    c.bin_dir = config_.bin_dir;
    c.env_passthrough = config_.env_passthrough;
    for (const auto& g : config_.gpus) c.devices.push_back(g.index);
    c.where = config_.machine.empty() ? config_.hostname : config_.machine;
    c.beat_ms = std::min<TimeMs>(heartbeat_ms_, 1'000);
    c.kill_grace_ms = config_.kill_grace_ms;
    GangIo io;
    io.call = [this](const std::string& path,
                     const json& body) -> std::optional<std::pair<int, json>> {
      auto a = Call(path, body);
      if (!a) return std::nullopt;
      return std::make_pair(a->status, a->body);
    };
    io.worktree = [this](const LeasedRun& run) {
      return RunCheckout(run, (fs::path(config_.data_dir) / "runs" /
                               std::to_string(run.run_id)).string());
    };
    io.sandbox = [this](ProcessSpec& spec, const RunPaths& paths, bool several) {
      Sandbox(spec, {paths.workdir, paths.dir}, paths.dir, several);
    };
    io.keep = [this](const PendingResult& kept, const std::string& why) {
      Keep(kept, fmt::format("gang run {} node {}", kept.run_id, kept.node_rank), why);
    };
    spdlog::info("gang run {}: node {} of {} x {} process(es): {} seed {} (attempt {})",
                 r.lease.run_id, r.lease.node_rank, r.lease.nodes, r.lease.procs_per_node,
                 r.lease.experiment, r.lease.seed, r.lease.attempt);
    gangs_.push_back(std::make_unique<GangMember>(r.lease, std::move(c), std::move(io), runner_,
                                                  clock_));
  }
  std::erase_if(runs, [](const WorkerRun& r) { return r.lease.nodes > 0; });
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
  for (auto id : run_ids) {
    RunSlot& r = runs_.at(id);
    std::error_code ec;
    fs::create_directories(r.paths.output_dir, ec);
    if (ec) return Fail(ErrorKind::kIo, r.paths.output_dir + ": " + ec.message());
    TRY(WriteFile(r.paths.metrics, ""));
  }
  Proc p;
  p.run_ids = run_ids;
  p.timeout_s = first.run.lease.timeout_s;
  LeasedRun spec_run = first.run.lease;
  std::string header;
  std::string where = config_.machine.empty() ? config_.hostname : config_.machine;
  if (fused) {
    fs::path gdir = fs::path(config_.data_dir) / "groups" /
                    (std::to_string(first.run.group) + "-" + std::to_string(run_ids.front()));
    std::error_code ec;
    fs::create_directories(gdir, ec);
    if (ec) return Fail(ErrorKind::kIo, gdir.string() + ": " + ec.message());
    // <group dir>/<seed> -> runs/<id>: each replica writes into its own run's files.
    for (auto id : run_ids) {
      const RunSlot& r = runs_.at(id);
      fs::path link = gdir / std::to_string(r.run.lease.seed);
      fs::remove(link, ec);
      fs::create_directory_symlink(fs::absolute(r.paths.dir), link, ec);
      if (ec) return Fail(ErrorKind::kIo, link.string() + ": " + ec.message());
    }
    spec_run.command = FusedTrainerCommand(first.run.trainer, first.run.lease.seed,
                                           static_cast<int>(run_ids.size()), gdir.string());
    p.log_path = (gdir / "output.log").string();
    header = "=== trainq: runs " + fmt::format("{}", fmt::join(run_ids, ", ")) + " (" +
             spec_run.experiment + ", seeds " + std::to_string(spec_run.seed) + "-" +
             std::to_string(spec_run.seed + static_cast<std::int64_t>(run_ids.size()) - 1) +
             " fused, attempt " + std::to_string(spec_run.attempt) + ") on " + where + " at " +
             FormatTimestamp(now) + " UTC ===\n";
  } else {
    p.log_path = first.paths.log;
    TRY(WriteFile(p.log_path, ""));  // this attempt's output only; the server keeps the rest
    header = RunBanner(spec_run, where, now);
  }
  header += PassthroughNote(spec_run, config_.env_passthrough);
  p.log_start = FileSize(p.log_path);
  {
    std::ofstream log(p.log_path, std::ios::app | std::ios::binary);
    log << header;
  }
  RunPaths paths = first.paths;
  paths.log = p.log_path;
  ASSIGN_OR_RETURN(paths.workdir, RunCheckout(spec_run, first.paths.dir));
  std::string cuda;
  for (int d : job.devices) cuda += (cuda.empty() ? "" : ",") + std::to_string(d);
  auto spec = BuildRunProcess(spec_run, paths, config_.bin_dir, cuda, config_.env_passthrough);
  // The trainer substitutes {seed} in its paths itself: not the run's seed.
  if (fused) spec.argv = {"/bin/sh", "-c", spec_run.command};
  if (job.gpus == 0) spec.env["CUDA_VISIBLE_DEVICES"] = "";
  {
    std::vector<std::string> writable = {paths.workdir};
    for (auto id : run_ids) writable.push_back(runs_.at(id).paths.dir);
    if (fused) writable.push_back(fs::path(p.log_path).parent_path().string());
    Sandbox(spec, writable, first.paths.dir, false);
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

bool Worker::Ship(RunSlot& r, const Proc& p, bool final) {
  const auto& run = r.run.lease;
  const std::string path = "/api/v1/runs/" + std::to_string(run.run_id);
  // Metric points the server has not seen; a half-written last line waits.
  std::string text = ReadFile(r.paths.metrics).value_or("");
  if (!final) {
    size_t nl = text.rfind('\n');
    text = nl == std::string::npos ? "" : text.substr(0, nl + 1);
  }
  auto reading = ReadRunMetric(text, "", run.metric_name, "");
  if (reading.points.size() > r.points_sent) {
    json points = json::array();
    for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
      const auto& pt = reading.points[i];
      if (!std::isfinite(pt.value)) continue;  // JSON and SQLite have no NaN
      json jp = {{"name", pt.name}, {"value", pt.value}, {"final", pt.final}};
      if (pt.step) jp["step"] = *pt.step;
      points.push_back(std::move(jp));
    }
    auto a = points.empty() ? Result<Answer>(Answer{200, {}, {}})
                            : Call(path + "/metrics", {{"token", run.token}, {"points", points}});
    if (a && a->status == 409) return false;
    if (a && a->status == 200) r.points_sent = reading.points.size();
  }
  // Log bytes from where the server is; one chunk per heartbeat, all at the end.
  for (int chunk = 0; chunk < (final ? 1000 : 1); ++chunk) {
    std::string data = ReadFrom(p.log_path, p.log_start + r.log_sent, config_.max_log_chunk);
    if (data.empty()) break;
    HttpRequest req;
    req.method = "POST";
    req.url = config_.server + path + "/log";
    req.headers = {{"Authorization", "Bearer " + config_.token},
                   {"Content-Type", "application/octet-stream"},
                   {"X-Trainq-Token", std::to_string(run.token)},
                   {"X-Trainq-Offset", std::to_string(r.log_sent)}};
    req.body = std::move(data);
    auto a = Post(req);
    if (!a) break;
    if (a->status == 409) return false;
    if (a->status != 200) {
      spdlog::warn("run {}: log refused: HTTP {} {}", run.run_id, a->status, ErrorOf(a->body));
      break;
    }
    std::int64_t size = Get<std::int64_t>(a->body, "size", r.log_sent + std::ssize(req.body));
    if (size <= r.log_sent) break;  // no progress: try again later
    r.log_sent = size;
  }
  return true;
}

bool Worker::Heartbeat(RunSlot& r, const Proc* p) {
  const auto& run = r.run.lease;
  TimeMs now = clock_.Now();
  r.last_heartbeat_ms = now;
  json req = {{"token", run.token}};
  bool say_started = r.started && !r.started_sent;
  if (say_started) req["started"] = true;
  auto a = Call("/api/v1/runs/" + std::to_string(run.run_id) + "/heartbeat", req);
  if (!a) return true;  // tried again at the next beat
  if (a->status == 409) {
    spdlog::info("run {}: lease lost ({}); stopping it", run.run_id, ErrorOf(a->body));
    return false;
  }
  if (a->status != 200) {
    spdlog::warn("run {}: heartbeat refused: HTTP {} {}", run.run_id, a->status, ErrorOf(a->body));
    return true;
  }
  if (say_started) r.started_sent = true;
  if (p && r.started) {
    if (!Ship(r, *p, false)) {
      spdlog::info("run {}: lease lost; stopping it", run.run_id);
      return false;
    }
  }
  return true;
}

void Worker::Complete(std::int64_t run_id, const std::string& outcome, std::optional<double> metric,
                      std::optional<int> exit_code, const std::string& error, bool config_error,
                      const Proc* proc) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  const auto& run = it->second.run.lease;
  json req = {{"token", run.token}, {"outcome", outcome}};
  // A kept copy still names the machine the run was leased to after a restart.
  if (worker_id_) req["worker_id"] = *worker_id_;
  if (metric) req["metric_value"] = *metric;
  if (exit_code) req["exit_code"] = *exit_code;
  if (!error.empty()) req["error"] = error;
  if (config_error) req["retry"] = false;  // fails the same way every time
  std::string path = "/api/v1/runs/" + std::to_string(run_id) + "/complete";
  // A server that is briefly away must not lose a result of hours: a few tries.
  Result<Answer> a = Fail(ErrorKind::kUnavailable, "not sent");
  // While stopping (a preemption notice gives seconds), one try only.
  const int tries = stopping_ ? 1 : 3;
  for (int attempt = 0; attempt < tries && !a; ++attempt) {
    if (attempt > 0) clock_.SleepFor(std::min<TimeMs>(1000 * attempt, 2000));
    a = Call(path, req);
  }
  if (!a && outcome != "interrupted") {
    // Kept on disk, with what the server has not seen, and delivered when it
    // is back (DeliverKept): the run's result is not lost with the connection.
    const RunSlot& r = it->second;
    PendingResult kept;
    kept.run_id = run_id;
    kept.complete = req;
    auto reading = ReadRunMetric(ReadFile(r.paths.metrics).value_or(""), "", run.metric_name, "");
    for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
      const auto& pt = reading.points[i];
      if (!std::isfinite(pt.value)) continue;
      json jp = {{"name", pt.name}, {"value", pt.value}, {"final", pt.final}};
      if (pt.step) jp["step"] = *pt.step;
      kept.points.push_back(std::move(jp));
    }
    if (proc) {
      kept.log_offset = r.log_sent;
      kept.log = ResultOutbox::LogTail(proc->log_path, proc->log_start + r.log_sent);
    }
    Keep(kept, "run " + std::to_string(run_id), a.error().message);
  } else if (!a) {
    spdlog::error("run {}: result not delivered ({}); its lease will expire", run_id,
                  a.error().message);
  } else if (a->status == 409) {
    spdlog::info("run {}: result refused, the lease is stale ({})", run_id, ErrorOf(a->body));
  } else if (a->status != 200) {
    spdlog::warn("run {}: result refused: HTTP {} {}", run_id, a->status, ErrorOf(a->body));
  } else if (outcome == "succeeded") {
    spdlog::info("run {} succeeded: {} seed {}, {} = {}", run_id, run.experiment, run.seed,
                 run.metric_name, FormatDouble(metric.value_or(0), 4));
  } else if (outcome == "interrupted") {
    spdlog::info("run {} interrupted: {} seed {} goes back to the queue", run_id, run.experiment,
                 run.seed);
  } else {
    spdlog::warn("run {} failed: {} seed {}: {}", run_id, run.experiment, run.seed, error);
  }
  runs_.erase(it);
}

void Worker::Keep(const PendingResult& kept, const std::string& what, const std::string& why) {
  const std::string outcome = kept.complete.value("outcome", std::string());
  kept_ = true;
  next_deliver_ms_ = clock_.Now() + heartbeat_ms_;
  if (auto st = outbox_.Put(kept); st) {
    spdlog::warn("{}: server not reachable ({}); its result ({}) is kept in {} and "
                 "delivered when the server is back",
                 what, why, outcome, outbox_.PathOf(kept.run_id, kept.node_rank));
  } else {
    // Not on disk: held in memory, written and delivered when either can be.
    spdlog::error("{}: server not reachable ({}), and its result ({}) cannot be kept on disk "
                  "({}); it is held in memory, and written to disk or delivered as soon as "
                  "either works (it is lost only if this worker ends first)",
                  what, why, outcome, st.error().message);
    persist_failing_ = true;
    persist_error_ = st.error().message;
  }
}

void Worker::DeliverKept() {
  if (outbox_.held() > 0) {
    const std::size_t held = outbox_.held();
    if (auto st = outbox_.Persist(); st) {
      // Said again now, since a log on the full disk may have lost the first time.
      spdlog::info("{} result(s) held in memory (not written then: {}) are now kept on disk in "
                   "{}",
                   held, persist_error_, (fs::path(config_.data_dir) / "outbox").string());
      persist_failing_ = false;
    } else if (!persist_failing_) {
      spdlog::error("{} result(s) held in memory still cannot be written: {}", held,
                    st.error().message);
      persist_failing_ = true;
      persist_error_ = st.error().message;
    }
  }
  for (const auto& k : outbox_.All()) {
    const std::string path = "/api/v1/runs/" + std::to_string(k.run_id);
    // Points and output first (a 409 there: the lease expired; the result may
    // still be taken), then the result itself.
    // The machine the run was leased to (an earlier worker on this data dir
    // may have kept it): named in what is delivered.
    const auto leased_to = k.complete.find("worker_id");
    const bool named = leased_to != k.complete.end() && leased_to->is_number_integer();
    if (!k.points.empty()) {
      json body = {{"token", k.token()}, {"points", k.points}};
      if (named) body["worker_id"] = *leased_to;
      if (!Call(path + "/metrics", body)) return;
    }
    if (!k.log.empty()) {
      HttpRequest req;
      req.method = "POST";
      req.url = config_.server + path + "/log";
      req.headers = {{"Authorization", "Bearer " + config_.token},
                     {"Content-Type", "application/octet-stream"},
                     {"X-Trainq-Token", std::to_string(k.token())},
                     {"X-Trainq-Offset", std::to_string(k.log_offset)}};
      if (named) req.headers.emplace_back("X-Trainq-Worker", leased_to->dump());
      req.body = k.log;
      if (!Post(req)) return;
    }
    // A gang member's result goes where its beats went.
    auto a = Call(path + (k.node_rank >= 0 ? "/gang" : "/complete"), k.complete);
    if (!a) return;  // still away: after the backoff
    const std::string outcome = k.complete.value("outcome", std::string());
    const std::string what = k.node_rank >= 0 ? fmt::format("gang run {} node {}", k.run_id,
                                                            k.node_rank)
                                              : fmt::format("run {}", k.run_id);
    if (a->status == 200) {
      spdlog::info("{}: kept result delivered ({})", what, outcome);
    } else {
      spdlog::warn("{}: kept result ({}) refused: HTTP {} {}", what, outcome, a->status,
                   ErrorOf(a->body));
    }
    outbox_.Remove(k.run_id, k.node_rank);
  }
  kept_ = false;
  persist_failing_ = false;
}

void Worker::ReportHeldLost() {
  for (const auto& k : outbox_.All()) {
    if (outbox_.held() == 0) break;
    const std::string path = outbox_.PathOf(k.run_id, k.node_rank);
    if (fs::exists(path)) continue;
    spdlog::error("run {}: its result ({}) was held in memory only (the disk was full) and is "
                  "lost with this worker; the run's lease will expire and it runs again",
                  k.run_id, k.complete.value("outcome", std::string()));
  }
}

void Worker::Forget(std::int64_t run_id) { runs_.erase(run_id); }

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
    fs::remove_all(fs::path(it->second.paths.dir) / "checkout", ec);
    fs::remove_all(fs::path(it->second.paths.dir) / "tmp", ec);
  }
  std::string log_text = ReadFrom(p.log_path, p.log_start, std::int64_t{1} << 30);
  for (auto id : p.run_ids) {
    auto it = runs_.find(id);
    if (it == runs_.end()) continue;
    RunSlot& r = it->second;
    const auto& run = r.run.lease;
    auto metrics_text = ReadFile(r.paths.metrics).value_or("");
    // A fused log holds every seed's lines: only the metrics files tell them apart.
    auto [reading, outcome] = JudgeAttempt(run, status, p.timed_out, log_text, metrics_text, fused);
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
      json points = json::array();
      for (size_t i = r.points_sent; i < reading.points.size(); ++i) {
        const auto& pt = reading.points[i];
        if (!std::isfinite(pt.value)) continue;
        points.push_back({{"name", pt.name}, {"value", pt.value}, {"final", pt.final}});
      }
      if (!points.empty()) {
        (void)Call("/api/v1/runs/" + std::to_string(id) + "/metrics",
                   {{"token", run.token}, {"points", points}});
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

void Worker::RunSelfStop() {
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
                    stopped ? "interrupted by a stop signal"
                            : "still running after " +
                                  FormatDuration(config_.self_stop_timeout_ms));
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

Result<Worker::Phase> Worker::Step() {
  TimeMs now = clock_.Now();
  if (!worker_id_ && !draining_) {
    if (now >= next_try_ms_) TRY(Register());
  }
  if (draining_ && !worker_id_) return Phase::kDone;  // 409 on register

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
      if (it == runs_.end() || clock_.Now() - it->second.last_heartbeat_ms < heartbeat_ms_)
        continue;
      if (!Heartbeat(it->second, it->second.started && job.proc ? &*job.proc : nullptr)) Forget(id);
    }
  }
  // Drop what was forgotten: a process whose runs are all gone is killed.
  for (auto& job : jobs_) {
    if (job.proc) {
      std::erase_if(job.proc->run_ids, [&](std::int64_t id) { return !runs_.contains(id); });
      if (job.proc->run_ids.empty()) {
        StopProc(*job.proc);
        job.proc.reset();
      }
    }
    for (auto& s : job.pending) {
      std::erase_if(s, [&](std::int64_t id) { return !runs_.contains(id); });
    }
    std::erase_if(job.pending, [](const auto& s) { return s.empty(); });
    if (!job.proc) StartJob(job);
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->proc && it->pending.empty()) {
      gpus_.Give(it->devices, it->gpus);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  if (kept_ && clock_.Now() >= next_deliver_ms_) {
    next_deliver_ms_ = clock_.Now() + heartbeat_ms_;
    DeliverKept();
  }
  // Gang members.
  std::erase_if(gangs_, [](const std::unique_ptr<GangMember>& g) { return !g->Step(); });
  // Lease (a gang member holds the whole machine).
  if (worker_id_ && !draining_ && static_cast<int>(jobs_.size()) < config_.slots &&
      gangs_.empty() && clock_.Now() >= next_try_ms_) {
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
  if (jobs_.empty() && gangs_.empty() && now - last_contact_ms_ >= orphan_timeout_ms_) {
    spdlog::warn("no answer from the server for {} and nothing running: {}",
                 FormatDuration(now - last_contact_ms_),
                 self_stop_.empty() ? "exiting" : "running the pool's self-stop command");
    ReportHeldLost();
    RunSelfStop();
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
      if (backoff_ms_ == 0) (void)Ship(it->second, *job.proc, true);
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
  stop_ = &stop;
  while (!stop.load()) {
    auto phase = Step();
    if (!phase) {
      Interrupt("trainq worker stopped: " + phase.error().message);
      return std::unexpected(phase.error());
    }
    if (*phase == Phase::kDone) {
      if (exit_code_ == 0) Leave();
      return exit_code_;
    }
    // Leases pace the loop while slots are free; otherwise look at the
    // children often enough to report an end promptly.
    bool leasing = worker_id_ && !draining_ && static_cast<int>(jobs_.size()) < config_.slots &&
                   gangs_.empty() && clock_.Now() >= next_try_ms_;
    if (!leasing) {
      clock_.SleepFor(jobs_.empty() && gangs_.empty() ? 200 : 50);
    } else if (lease_came_back_empty_) {
      clock_.SleepFor(20);  // a server that answers at once (too many polls waiting): no busy loop
    }
  }
  spdlog::info("stopping: {} run(s) go back to the queue", runs_.size());
  Interrupt("the worker was stopped (SIGTERM: preemption or shutdown)");
  // A serve that stops its machines may still take what this worker kept.
  if (kept_) DeliverKept();
  ReportHeldLost();
  Leave();
  return 0;
}

void Worker::Leave() {
  if (!worker_id_) return;
  auto a = Call("/api/v1/workers/" + std::to_string(*worker_id_) + "/leave", json::object(), 5'000);
  if (!a || a->status != 200) {
    spdlog::debug("leave: {}", a ? "HTTP " + std::to_string(a->status) : a.error().message);
  }
}

Result<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "--token-file (or TRAINQ_TOKEN_FILE) is required");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Fail(ErrorKind::kNotFound, "token file " + path + ": " + std::strerror(errno));
  }
  auto text = ReadFile(path);
  if (!text) return Fail(ErrorKind::kIo, "token file " + path + ": " + text.error().message);
  std::string token(Trim(*text));
  if (token.empty()) return Fail(ErrorKind::kInvalidArgument, "token file " + path + " is empty");
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return Fail(ErrorKind::kInvalidArgument,
                "token file " + path + " holds more than one word (expected the pool token only)");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    spdlog::warn("token file {} is readable by other users (mode {:o}); chmod 600 it", path,
                 st.st_mode & 0777);
  }
  return token;
}

Result<int> CmdWorker(const WorkerCommandOptions& o, const Clock& clock,
                      const std::atomic<bool>& stop) {
  // Not dumpable: its environment and token stay away from processes of the
  // same user (a run without a sandbox included).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (o.server.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "--server (or TRAINQ_SERVER) is required");
  }
  if (o.slots < 1) return Fail(ErrorKind::kInvalidArgument, "--slots must be at least 1");
  if (o.runs_per_gpu < 0) {
    return Fail(ErrorKind::kInvalidArgument, "--runs-per-gpu must be at least 1 (0: the pool's)");
  }
  if (o.fuse_max < 1) return Fail(ErrorKind::kInvalidArgument, "--fuse-max must be at least 1");
  WorkerConfig c;
  c.server = o.server;
  while (c.server.ends_with('/')) c.server.pop_back();
  ASSIGN_OR_RETURN(c.token, ReadTokenFile(o.token_file));
  c.machine = o.machine;
  c.slots = o.slots;
  ASSIGN_OR_RETURN(c.gpus, ResolveGpus(o.gpus));
  c.runs_per_gpu = o.runs_per_gpu;
  c.fuse_max = o.fuse_max;
  c.once = o.once;
  if (o.source != "auto" && o.source != "server") {
    return Fail(ErrorKind::kInvalidArgument,
                "--source: expected auto or server, got \"" + o.source + "\"");
  }
  c.source = o.source;
  if (o.orphan_timeout_s < 1) {
    return Fail(ErrorKind::kInvalidArgument, "--orphan-timeout must be at least 1 second");
  }
  c.orphan_timeout_ms = static_cast<TimeMs>(o.orphan_timeout_s) * 1000;
  c.self_stop = o.self_stop;
  if (o.self_stop_timeout_s < 1) {
    return Fail(ErrorKind::kInvalidArgument, "--self-stop-timeout must be at least 1 second");
  }
  c.self_stop_timeout_ms = static_cast<TimeMs>(o.self_stop_timeout_s) * 1000;
  c.env_passthrough = o.env_passthrough;
  c.kill_grace_ms = o.kill_grace_s * 1000;
  c.data_dir = fs::absolute(o.data_dir.empty() ? "trainq-worker" : o.data_dir).string();
  std::error_code ec;
  fs::create_directories(c.data_dir, ec);
  if (ec) return Fail(ErrorKind::kIo, "--data-dir " + c.data_dir + ": " + ec.message());
  TRY(CheckSandboxMode(o.sandbox, "--sandbox"));
  ASSIGN_OR_RETURN(c.bwrap, ResolveSandbox(o.sandbox));
  c.sandbox.mode = o.sandbox;
  // Runs never see this worker's files (other runs, the outbox) nor its token.
  c.sandbox.hide = {c.data_dir, fs::absolute(o.token_file).string()};
  for (const auto& h : o.sandbox_hide) c.sandbox.hide.push_back(fs::absolute(h).string());
  for (const auto& w : o.sandbox_writable) c.sandbox.writable.push_back(fs::absolute(w).string());
  if (c.bwrap.empty()) {
    spdlog::warn("runs start without a sandbox ({}): a run can read what this worker's user "
                 "can read, its token file included",
                 o.sandbox == "none" ? "--sandbox none" : "no bwrap installed");
  } else {
    spdlog::info("runs start in a bwrap sandbox ({}); writable: their checkout, run directory "
                 "and /tmp{}", c.bwrap, c.sandbox.writable.empty() ? "" : " and " +
                 fmt::format("{}", fmt::join(c.sandbox.writable, ", ")));
  }
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) c.bin_dir = self.parent_path().string();
  if (FindTrainqTrain(c.bin_dir, PathEnv()).empty()) {
    spdlog::warn("trainq-train is neither beside this trainq ({}) nor on PATH: `trainer:` runs "
                 "will fail here (install it, and libtorch, on each worker)",
                 c.bin_dir.empty() ? "?" : c.bin_dir);
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  c.hostname = host;
  c.pid = static_cast<int>(::getpid());
  c.cpus = static_cast<int>(std::thread::hardware_concurrency());
  c.memory_mb = DetectMemoryMb();
  spdlog::info("worker for {}: {} slot(s), {} GPU(s){}, {} CPU(s), {} MiB; files in {}",
               UrlForLog(c.server), c.slots, c.gpus.size(),
               c.gpus.empty() ? "" : fmt::format(" x {} run(s) each", c.runs_per_gpu), c.cpus,
               c.memory_mb, c.data_dir);
  ::signal(SIGPIPE, SIG_IGN);
  CurlHttpClient http;
  PosixProcessRunner runner;
  Worker worker(http, runner, clock, std::move(c));
  return worker.Run(stop);
}

}  // namespace trainq
