#include "trainer/launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/strings.h"
#include "trainer/exit_codes.h"

namespace trainq::trainer {
namespace {

Result<int> EnvInt(const std::function<const char*(const char*)>& getenv, const char* name, bool required,
                   int fallback, const std::string& why) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) return Fail(ErrorKind::kInvalidArgument, std::string(name) + " is not set (" + why + ")");
    return fallback;
  }
  int out = 0;
  const std::string s = v;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || ptr != s.data() + s.size() || out < 0) {
    return Fail(ErrorKind::kInvalidArgument, std::string(name) + "='" + s + "' is not a non-negative integer");
  }
  return out;
}

}  // namespace

Result<RankPlan> PlanRank(const DistributedSpec& spec, const std::function<const char*(const char*)>& getenv) {
  RankPlan plan;
  RendezvousPlan& r = plan.rendezvous;
  r.world = static_cast<int>(spec.workers);
  r.timeout_seconds = spec.timeout_seconds;
  const std::string where = spec.where + ": distributed.rendezvous";
  if (spec.rendezvous == "auto") {
    const char* rank = getenv("TRAINQ_DIST_RANK");
    if (rank == nullptr || *rank == '\0') {
      plan.spawn_local = true;  // the store path is set by LocalRanks::Start
      return plan;
    }
    ASSIGN_OR_RETURN(r.rank, EnvInt(getenv, "TRAINQ_DIST_RANK", true, 0, "a local rank"));
    ASSIGN_OR_RETURN(int world, EnvInt(getenv, "TRAINQ_DIST_WORLD", true, 0, "a local rank"));
    ASSIGN_OR_RETURN(plan.parent_pid, EnvInt(getenv, "TRAINQ_DIST_PARENT", true, 0, "a local rank"));
    const char* store = getenv("TRAINQ_DIST_STORE");
    if (store == nullptr || *store == '\0') return Fail(ErrorKind::kInvalidArgument, "TRAINQ_DIST_STORE is not set");
    r.file_store = store;
    if (world != r.world) {
      return Fail(ErrorKind::kInvalidArgument, "TRAINQ_DIST_WORLD=" + std::to_string(world) +
                                                   " but distributed.workers is " + std::to_string(r.world));
    }
    r.local_rank = r.rank;
    return plan;
  }
  // env, tcp://HOST:PORT: torchrun's variables.
  const std::string why = "rendezvous " + spec.rendezvous + " reads torchrun's environment";
  ASSIGN_OR_RETURN(r.rank, EnvInt(getenv, "RANK", true, 0, why));
  ASSIGN_OR_RETURN(int world, EnvInt(getenv, "WORLD_SIZE", true, 0, why));
  ASSIGN_OR_RETURN(r.local_rank, EnvInt(getenv, "LOCAL_RANK", false, r.rank, why));
  if (world != r.world) {
    return Fail(ErrorKind::kInvalidArgument, where + ": WORLD_SIZE is " + std::to_string(world) +
                                                 " but distributed.workers is " + std::to_string(r.world) +
                                                 " (" + spec.where + ")");
  }
  if (r.rank >= r.world) {
    return Fail(ErrorKind::kInvalidArgument, "RANK=" + std::to_string(r.rank) + " is not below WORLD_SIZE=" +
                                                 std::to_string(world));
  }
  if (spec.rendezvous == "env") {
    const char* addr = getenv("MASTER_ADDR");
    if (addr == nullptr || *addr == '\0') return Fail(ErrorKind::kInvalidArgument, "MASTER_ADDR is not set (" + why + ")");
    r.host = addr;
    ASSIGN_OR_RETURN(r.port, EnvInt(getenv, "MASTER_PORT", true, 0, why));
  } else {
    const std::string rest = spec.rendezvous.substr(6);  // checked by ParseSpec
    const auto colon = rest.rfind(':');
    r.host = rest.substr(0, colon);
    r.port = std::atoi(rest.c_str() + colon + 1);
  }
  return plan;
}

Result<std::unique_ptr<LocalRanks>> LocalRanks::Start(const std::vector<std::string>& argv, RankPlan& plan,
                                                      ProcessRunner& runner) {
  char dir_template[] = "/tmp/trainq-dist-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    return Fail(ErrorKind::kIo, "cannot create a rendezvous folder under /tmp");
  }
  std::unique_ptr<LocalRanks> ranks(new LocalRanks(runner, dir_template));
  plan.rendezvous.file_store = ranks->store_dir_ + "/store";
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Fail(ErrorKind::kIo, "cannot read /proc/self/exe: " + ec.message());
  for (int rank = 1; rank < plan.rendezvous.world; ++rank) {
    ProcessSpec spec;
    spec.argv = argv;
    spec.argv[0] = self;
    spec.env["TRAINQ_DIST_RANK"] = std::to_string(rank);
    spec.env["TRAINQ_DIST_WORLD"] = std::to_string(plan.rendezvous.world);
    spec.env["TRAINQ_DIST_STORE"] = plan.rendezvous.file_store;
    spec.env["TRAINQ_DIST_PARENT"] = std::to_string(::getpid());
    auto pid = runner.Spawn(spec);
    if (!pid) {
      ranks->Abort();
      return Fail(ErrorKind::kUnavailable, "cannot start rank " + std::to_string(rank) + ": " + pid.error().message);
    }
    ranks->pids_.push_back(*pid);
    std::fprintf(stderr, "trainq-train: rank %d started (pid %d)\n", rank, *pid);
  }
  ranks->status_.resize(ranks->pids_.size());
  ranks->watchdog_ = std::thread([r = ranks.get()] { r->Watch(); });
  return ranks;
}

void LocalRanks::Watch() {
  while (!stop_) {
    bool all = true;
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (status_[i]) continue;
      }
      auto st = runner_.Poll(pids_[i]);
      if (!st) {
        all = false;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        status_[i] = *st;
      }
      reaped_cv_.notify_all();
      if (!st->ok() && !finishing_ && !stop_) {
        std::fprintf(stderr, "trainq-train: error: rank %zu (pid %d) ended: %s; stopping the other ranks\n", i + 1,
                     pids_[i], st->Describe().c_str());
        for (std::size_t j = 0; j < pids_.size(); ++j) {
          if (j != i) runner_.KillGroup(pids_[j], SIGKILL);
        }
        for (std::size_t j = 0; j < pids_.size(); ++j) {
          if (j != i) runner_.Wait(pids_[j]);
        }
        std::error_code ec;
        std::filesystem::remove_all(store_dir_, ec);
        std::fflush(stderr);
        ::_exit(kExitDistributed);
      }
    }
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll interval, not a wait for a result
  }
}

Status LocalRanks::Finish() {
  finishing_ = true;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // The ranks end right after the last collective; a minute is plenty.
    reaped_cv_.wait_for(lock, std::chrono::seconds(60), [&] {
      for (const auto& s : status_) {
        if (!s) return false;
      }
      return true;
    });
  }
  Status result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < status_.size() && result; ++i) {
      if (!status_[i]) {
        result = Fail(ErrorKind::kTimeout, "rank " + std::to_string(i + 1) + " (pid " + std::to_string(pids_[i]) +
                                               ") did not exit after training");
      } else if (!status_[i]->ok()) {
        result = Fail(ErrorKind::kUnavailable, "rank " + std::to_string(i + 1) + " (pid " +
                                                   std::to_string(pids_[i]) + ") ended: " + status_[i]->Describe());
      }
    }
  }
  if (!result) Abort();
  return result;
}

void LocalRanks::Abort() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  status_.resize(pids_.size());
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (status_[i]) continue;
    runner_.KillGroup(pids_[i], SIGKILL);
    status_[i] = runner_.Wait(pids_[i]);
  }
}

LocalRanks::~LocalRanks() {
  Abort();
  std::error_code ec;
  std::filesystem::remove_all(store_dir_, ec);
}

void WatchParent(int rank, int parent_pid) {
  std::thread([rank, parent_pid] {
    while (::getppid() == parent_pid) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a poll interval
    }
    std::fprintf(stderr, "trainq-train: rank %d: error: rank 0 (pid %d) is gone; stopping\n", rank, parent_pid);
    std::fflush(stderr);
    ::_exit(kExitDistributed);
  }).detach();
}

}  // namespace trainq::trainer
