// Gang leases (agent/runner/gang.h): a lease of one node of a multi-node run
// becomes a GangMember beside the slot jobs, wired to this worker's calls,
// checkouts, sandbox and outbox.
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
#include "agent/runner/worker.h"
#include "core/http_client.h"

using nlohmann::json;

namespace trainq {

// Gang members (agent/runner/gang.h) take the whole machine and run beside
// the slot jobs; they are removed from `runs`.
void Worker::StartGangMembers(std::vector<WorkerRun>& runs) {
  for (auto& r : runs) {
    if (r.lease.nodes <= 0) continue;
    GangMemberConfig c;
    c.worker_id = *registration_.machine();
    c.server = config_.server;
    c.data_dir = config_.data_dir;
    c.bin_dir = config_.bin_dir;
    c.env_passthrough = config_.env_passthrough;
    for (const auto& g : config_.gpus) c.devices.push_back(g.index);
    c.where = config_.machine.empty() ? config_.hostname : config_.machine;
    c.beat_ms = std::min<TimeMs>(registration_.heartbeat_ms(), 1'000);
    c.kill_grace_ms = config_.kill_grace_ms;
    GangIo io;
    io.call = [this](const std::string& path,
                     const json& body) -> std::optional<std::pair<int, json>> {
      auto a = link_.Call(path, body);
      if (!a) return std::nullopt;
      return std::make_pair(a->status, a->body);
    };
    io.worktree = [this](const LeasedRun& run) {
      return RunCheckout(run, RunPathsFor(config_.data_dir, run.run_id).work);
    };
    io.sandbox = [this](ProcessSpec& spec, const RunPaths& paths, bool several) {
      Sandbox(spec, {paths.workdir, paths.work}, {}, paths.work, several);
    };
    io.keep = [this](const PendingResult& kept, const std::string& why) {
      kept_.Keep(kept, fmt::format("gang run {} node {}", kept.run_id, kept.node_rank), why,
                 registration_.heartbeat_ms());
    };
    spdlog::info("gang run {}: node {} of {} x {} process(es): {} seed {} (attempt {})",
                 r.lease.run_id, r.lease.node_rank, r.lease.nodes, r.lease.procs_per_node,
                 r.lease.experiment, r.lease.seed, r.lease.attempt);
    gangs_.push_back(std::make_unique<GangMember>(r.lease, std::move(c), std::move(io), runner_,
                                                  clock_));
  }
  std::erase_if(runs, [](const WorkerRun& r) { return r.lease.nodes > 0; });
}

}  // namespace trainq
