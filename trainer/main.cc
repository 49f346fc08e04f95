// trainq-train: trains the model a YAML spec describes, for one seed or K
// seeds fused, and writes its metrics as JSON lines. Exit codes: 0 ok,
// 1 training failure, 2 bad spec or usage, 3 data error, 4 a distributed
// rank failed (trainer/exit_codes.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/strings.h"
#include "core/process.h"
#include "trainer/cli.h"
#include "trainer/launcher.h"
#include "trainer/metrics_writer.h"
#include "trainer/spec.h"
#include "trainer/spec_tree.h"
#include "trainer/system.h"
#include "trainer/train.h"

namespace {

int Run(int argc, char** argv) {
  using namespace trainq::trainer;
  auto parsed = ParseCommandLine(argc, argv, [](const char* name) { return std::getenv(name); });
  if (!parsed) {
    std::fprintf(stderr, "trainq-train: error: %s\n", parsed.error().message.c_str());
    return kExitBadSpec;
  }
  if (!*parsed) return kExitOk;  // --help
  const Options& opt = **parsed;
  // With --threads N, fused repeats run as N groups of replicas on N threads,
  // each single-threaded; otherwise N is libtorch's intra-op thread count.
  const bool replica_threads = opt.threads > 1 && opt.repeats > 1 && opt.fuse == "auto";
  // With several intra-op threads, OpenMP's default of spinning while it waits
  // makes training many times slower when the cores are shared (measured:
  // fused digits, 10 seeds, 5 epochs, --threads 2 on a loaded 2-core machine:
  // 29.8 s spinning, 4.9 s passive). libgomp reads the setting when it is
  // loaded, so the process restarts itself once with it set.
  if (opt.threads > 1 && !replica_threads && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv("/proc/self/exe", argv);  // on failure, go on spinning
  }

  auto tree = LoadSpecTree(opt.spec);
  if (!tree) {
    std::fprintf(stderr, "trainq-train: bad spec: %s\n", tree.error().message.c_str());
    return kExitBadSpec;
  }
  for (const std::string& o : opt.sets) {
    if (auto st = ApplyOverride(*tree, o); !st) {
      std::fprintf(stderr, "trainq-train: bad spec: %s\n", st.error().message.c_str());
      return kExitBadSpec;
    }
  }
  auto spec = ParseSpec(*tree, opt.spec);
  if (!spec) {
    std::fprintf(stderr, "trainq-train: bad spec: %s\n", spec.error().message.c_str());
    return kExitBadSpec;
  }
  if (opt.print_spec) {
    std::fputs(ToYaml(*tree).c_str(), stdout);
    return kExitOk;
  }
  if (auto warning = ReferenceBlasWarning(ReadProcMaps())) std::fprintf(stderr, "%s\n", warning->c_str());
  SetBlasThreads(replica_threads ? 1 : opt.threads);
  KeepFreedMemory();

  TrainConfig config;
  config.seeds.clear();
  for (std::int64_t i = 0; i < opt.repeats; ++i) config.seeds.push_back(opt.seed + static_cast<std::uint64_t>(i));
  config.device = opt.device;
  config.threads = opt.threads;
  config.fuse = opt.fuse == "auto";
  config.metrics_file = opt.metrics_file;
  config.output_dir = opt.output_dir;
  config.progress = !opt.quiet;
  config.progress_terminal = ::isatty(STDERR_FILENO) == 1;

  // distributed.workers > 1: which rank this process is. Only rank 0 writes
  // metrics, checkpoints, the merged spec and progress.
  std::optional<RankPlan> plan;
  std::string who = "trainq-train";
  if (spec->distributed && spec->distributed->workers > 1) {
    auto planned = PlanRank(*spec->distributed, [](const char* name) { return std::getenv(name); });
    if (!planned) {
      std::fprintf(stderr, "trainq-train: bad spec: %s\n", planned.error().message.c_str());
      return kExitBadSpec;
    }
    plan = *planned;
    config.rendezvous = plan->rendezvous;
    if (plan->rendezvous.rank != 0) {
      who = "trainq-train: rank " + std::to_string(plan->rendezvous.rank);
      config.metrics_file.clear();
      config.output_dir.clear();
      config.progress = false;
      if (plan->parent_pid > 0) WatchParent(plan->rendezvous.rank, plan->parent_pid);
    }
  }
  const bool lead = !plan || plan->rendezvous.rank == 0;

  // The merged spec goes next to the checkpoints, so a run can be repeated exactly.
  if (!opt.output_dir.empty() && lead) {
    for (std::size_t i = 0; i < config.seeds.size(); ++i) {
      const std::string dir = ReplicaPath(opt.output_dir, config.seeds[i], static_cast<std::int64_t>(i));
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (auto st = trainq::WriteFile((std::filesystem::path(dir) / "spec.yaml").string(), ToYaml(*tree)); !st) {
        std::fprintf(stderr, "trainq-train: error: %s\n", st.error().message.c_str());
        return kExitTrainingFailed;
      }
    }
  }

  // rendezvous auto: rank 0 starts the other ranks and watches them.
  trainq::PosixProcessRunner runner;
  std::unique_ptr<LocalRanks> local_ranks;
  if (plan && plan->spawn_local) {
    auto started = LocalRanks::Start(std::vector<std::string>(argv, argv + argc), *plan, runner);
    if (!started) {
      std::fprintf(stderr, "trainq-train: error: distributed: %s\n", started.error().message.c_str());
      return kExitDistributed;
    }
    local_ranks = std::move(*started);
    config.rendezvous = plan->rendezvous;
  }

  auto report = Train(*spec, config);
  if (!report) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), report.error().message.c_str());
    if (local_ranks) local_ranks->Abort();
    return report.error().exit_code;
  }
  if (local_ranks) {
    if (auto st = local_ranks->Finish(); !st) {
      std::fprintf(stderr, "trainq-train: error: distributed: %s\n", st.error().message.c_str());
      return kExitDistributed;
    }
  }
  if (!opt.quiet && lead) {
    std::fprintf(stderr, "trainq-train: %zu seed%s%s on %s in %.2fs (training %.2fs)\n", report->replicas.size(),
                 report->replicas.size() == 1 ? "" : "s", report->fused ? " fused" : "", report->device.c_str(),
                 report->total_seconds, report->train_seconds);
  }
  // The final metric on stdout, one line per seed, for people and for regexes.
  for (const auto& r : report->replicas) {
    std::string line = "seed " + std::to_string(r.seed);
    for (const auto& [name, v] : r.final_metrics) line += " " + r.final_split + "_" + name + " " + trainq::FormatDouble(v, 4);
    std::printf("%s\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
