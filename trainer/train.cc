#include "trainer/train.h"

#include <chrono>
#include <optional>
#include <thread>

#include "trainer/data.h"
#include "trainer/distributed.h"
#include "trainer/evaluate.h"
#include "trainer/exit_codes.h"
#include "trainer/group_trainer.h"
#include "trainer/metrics_writer.h"
#include "trainer/progress.h"

namespace trainq::trainer {
namespace {

using Clock = std::chrono::steady_clock;

std::unexpected<TrainFailure> Failure(int code, std::string message) {
  return std::unexpected(TrainFailure{code, std::move(message)});
}

// Builds and runs one GroupTrainer.
std::expected<void, TrainFailure> TrainGroup(GroupInputs& in, const std::vector<std::uint64_t>& seeds,
                                             std::int64_t first_repeat, Progress* progress, TrainReport& report) {
  auto trainer = GroupTrainer::Create(in, seeds, first_repeat, progress, report);
  if (!trainer) return std::unexpected(trainer.error());
  return (*trainer)->Run();
}

// The device --device asks for; cuda without CUDA is a usage error.
std::expected<torch::Device, TrainFailure> ChooseDevice(const std::string& wanted) {
  if (wanted == "cuda" || (wanted == "auto" && torch::cuda::is_available())) {
    if (!torch::cuda::is_available()) {
      return Failure(kExitBadSpec, "--device cuda: this libtorch has no CUDA or no GPU is visible "
                                   "(build against a CUDA libtorch with -DTorch_DIR=...)");
    }
    return torch::Device(torch::kCUDA);
  }
  return torch::Device(torch::kCPU);
}

// Runs the groups: one fused group, one per thread (--threads N with fused
// repeats), or one per seed (--fuse off); appends their replicas to `report`.
std::expected<void, TrainFailure> RunGroups(GroupInputs& s, std::int64_t batches, TrainReport& report) {
  const Spec& spec = s.spec;
  const TrainConfig& config = s.config;
  std::optional<Progress> progress;
  std::function<double()> now = config.now ? config.now : SteadySeconds();
  const bool fuse = config.fuse && config.seeds.size() > 1;
  report.fused = fuse;
  const std::size_t groups = fuse ? std::min<std::size_t>(static_cast<std::size_t>(std::max(1, config.threads)),
                                                          config.seeds.size())
                                  : 1;
  if (fuse && groups > 1) {
    // The replicas split into `groups` fused models, one per thread, each
    // single-threaded: per-op overheads then run in parallel too. Replica i
    // computes exactly what it computes in one fused model. The progress bar
    // follows the first group; every seed's notices and final line show.
    if (config.progress) progress.emplace(stderr, config.progress_terminal, now, spec.trainer.epochs, batches);
    s.messages = progress ? &*progress : nullptr;
    std::vector<std::vector<std::uint64_t>> parts(groups);
    std::vector<std::int64_t> first(groups);
    for (std::size_t g = 0, next = 0; g < groups; ++g) {
      const std::size_t n = config.seeds.size() / groups + (g < config.seeds.size() % groups ? 1 : 0);
      first[g] = static_cast<std::int64_t>(next);
      parts[g].assign(config.seeds.begin() + static_cast<std::ptrdiff_t>(next),
                      config.seeds.begin() + static_cast<std::ptrdiff_t>(next + n));
      next += n;
    }
    std::vector<TrainReport> partial(groups);
    std::vector<std::optional<TrainFailure>> failed(groups);
    std::vector<std::thread> pool;
    for (std::size_t g = 0; g < groups; ++g) {
      pool.emplace_back([&, g] {
        try {
          at::set_num_threads(1);  // OpenMP's thread count is per calling thread
          if (auto r = TrainGroup(s, parts[g], first[g], g == 0 && progress ? &*progress : nullptr, partial[g]);
              !r) {
            failed[g] = r.error();
          }
        } catch (const c10::Error& e) {
          failed[g] = TrainFailure{kExitTrainingFailed,
                                   std::string("training failed (libtorch): ") + e.what_without_backtrace()};
        } catch (const std::exception& e) {
          failed[g] = TrainFailure{kExitTrainingFailed, std::string("training failed: ") + e.what()};
        }
      });
    }
    for (auto& t : pool) t.join();
    for (auto& f : failed) {
      if (f) return std::unexpected(*f);
    }
    for (std::size_t g = 0; g < groups; ++g) {
      TrainReport& p = partial[g];
      report.replicas.insert(report.replicas.end(), p.replicas.begin(), p.replicas.end());
      report.notices.insert(report.notices.end(), p.notices.begin(), p.notices.end());
      report.max_macrobatches_alive = std::max(report.max_macrobatches_alive, p.max_macrobatches_alive);
      if (g == 0) report.rows_seen = std::move(p.rows_seen);
      report.fast_path = report.fast_path || p.fast_path;
    }
  } else if (fuse) {
    if (config.progress) progress.emplace(stderr, config.progress_terminal, now, spec.trainer.epochs, batches);
    s.messages = progress ? &*progress : nullptr;
    if (auto r = TrainGroup(s, config.seeds, 0, progress ? &*progress : nullptr, report); !r) {
      return std::unexpected(r.error());
    }
  } else {
    for (std::size_t i = 0; i < config.seeds.size(); ++i) {
      if (config.progress) {
        progress.emplace(stderr, config.progress_terminal, now, spec.trainer.epochs, batches);
        if (config.seeds.size() > 1) progress->Message("seed " + std::to_string(config.seeds[i]) + ":");
      }
      s.messages = progress ? &*progress : nullptr;
      if (auto r = TrainGroup(s, {config.seeds[i]}, static_cast<std::int64_t>(i), progress ? &*progress : nullptr,
                              report);
          !r) {
        return std::unexpected(r.error());
      }
    }
  }
  return {};
}

// distributed.workers > 1: one replica per rank, joined to its group.
std::expected<std::unique_ptr<Collective>, TrainFailure> JoinGroup(const Spec& spec, const TrainConfig& config) {
  const DistributedSpec& d = *spec.distributed;
  if (config.seeds.size() != 1) {
    return Failure(kExitBadSpec, d.where + ": distributed.workers: " + std::to_string(d.workers) +
                                     " ranks train one seed; --repeats " + std::to_string(config.seeds.size()) +
                                     " is not supported with it");
  }
  if (!config.rendezvous) {
    return Failure(kExitBadSpec, d.where + ": distributed.workers > 1 needs a rendezvous (trainq-train plans it)");
  }
  auto comm = ConnectGloo(*config.rendezvous);
  if (!comm) {
    return Failure(comm.error().kind == ErrorKind::kInvalidArgument ? kExitBadSpec : kExitDistributed,
                   "distributed: " + comm.error().message);
  }
  return std::move(*comm);
}

}  // namespace

std::expected<TrainReport, TrainFailure> Train(const Spec& spec, const TrainConfig& config) {
  const auto t0 = Clock::now();
  TrainReport report;
  try {
    // Fused repeats on several threads run single-threaded groups (below).
    const bool replica_threads = config.fuse && config.seeds.size() > 1 && config.threads > 1;
    torch::set_num_threads(replica_threads ? 1 : config.threads);
    auto chosen = ChooseDevice(config.device);
    if (!chosen) return std::unexpected(chosen.error());
    torch::Device device = *chosen;
    if (spec.distributed && spec.distributed->workers > 1 && spec.distributed->gpus_per_node > 0) {
      // A rank uses GPU local_rank % gpus_per_node of its node.
      if (!torch::cuda::is_available()) {
        return Failure(kExitBadSpec, spec.distributed->where +
                                         ": distributed.gpus_per_node: this libtorch has no CUDA or no GPU is visible");
      }
      const int local = config.rendezvous ? config.rendezvous->local_rank : 0;
      device = torch::Device(torch::kCUDA,
                             static_cast<c10::DeviceIndex>(local % static_cast<int>(spec.distributed->gpus_per_node)));
    }
    report.device = device.str();

    const bool class_ids = spec.loss.type == "cross_entropy";
    DataCheck check;
    check.integer_labels = class_ids || spec.loss.type == "bce_with_logits";
    // With macrobatches, CSV stays on disk too (data/macrobatch docs).
    StreamOptions stream;
    stream.stream = spec.trainer.macro_batch_size > 0;
    auto source = OpenRowSource(spec.data, check, stream);
    if (!source) return Failure(kExitDataError, "data error: " + source.error().message);
    auto split = SplitDataset((*source)->rows(), spec.data.split);
    if (!split) return Failure(kExitDataError, "data error: " + spec.data.path + ": " + split.error().message);
    const std::int64_t n_train = static_cast<std::int64_t>(split->train.size());
    report.streamed = spec.trainer.macro_batch_size > 0 && spec.trainer.macro_batch_size < n_train;
    // One read of the file: normalisation statistics, validation and test rows,
    // and the training rows unless they are streamed.
    auto blocks = ReadSplits(**source, *split, spec.data.normalize, !report.streamed);
    if (!blocks) return Failure(kExitDataError, "data error: " + blocks.error().message);
    auto metrics = MetricsWriter::Open(config.metrics_file);
    if (!metrics) return Failure(kExitTrainingFailed, metrics.error().message);

    const Normalizer& norm = blocks->norm;
    GroupInputs s{spec, config, device, **source, norm, *split, std::nullopt, std::nullopt, std::nullopt, **metrics,
             class_ids, {(*source)->feature_count()}};
    auto to_tensors = [&](RowBlock& block) {
      TensorSet t = ToTensors(block, (*source)->feature_count(), (*source)->label_count(), class_ids, device);
      block = RowBlock{};  // free the host copy
      return t;
    };
    if (!report.streamed) s.resident_train = to_tensors(blocks->train);
    if (!split->validation.empty()) s.validation = to_tensors(blocks->validation);
    if (!split->test.empty()) s.test = to_tensors(blocks->test);
    const bool distributed = spec.distributed && spec.distributed->workers > 1;
    const bool lead = !distributed || !config.rendezvous || config.rendezvous->rank == 0;
    if (spec.trainer.checkpointing && config.output_dir.empty() && lead) {
      return Failure(kExitBadSpec, "trainer.callbacks: checkpointing needs an output dir "
                                   "(--output-dir or TRAINQ_OUTPUT_DIR)");
    }

    std::unique_ptr<Collective> comm;
    if (distributed) {
      auto joined = JoinGroup(spec, config);
      if (!joined) return std::unexpected(joined.error());
      comm = std::move(*joined);
      s.comm = comm.get();
    }

    const auto t1 = Clock::now();
    const std::int64_t batches = (n_train + spec.trainer.batch_size - 1) / spec.trainer.batch_size;
    if (auto r = RunGroups(s, batches, report); !r) return std::unexpected(r.error());
    report.train_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  } catch (const c10::Error& e) {
    return Failure(kExitTrainingFailed, std::string("training failed (libtorch): ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Failure(kExitTrainingFailed, std::string("training failed: ") + e.what());
  }
  report.total_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace trainq::trainer
