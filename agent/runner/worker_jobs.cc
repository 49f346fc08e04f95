// How a lease answer becomes processes: PlanJobs (fused stretches of a
// trainer group), the fused trainer command line, and the GPU pool that
// hands devices to jobs.
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
#include "core/strings.h"

namespace fs = std::filesystem;

namespace trainq {

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

}  // namespace trainq
