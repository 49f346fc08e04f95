// The training callbacks of docs/TRAINER.md, each replica of a fused group on
// its own step count: metric lines, checkpoints (per epoch, step, macrobatch,
// best), early stopping with restore-best, and loss logging. GroupTrainer
// (group_trainer.h) calls them; each holds only its own per-replica state.
// Not thread-safe except MetricLines, whose writer is shared by groups on
// several threads under the mutex it is given.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <expected>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trainer/metrics_writer.h"
#include "trainer/model.h"
#include "trainer/spec.h"
#include "trainer/train.h"

namespace trainq::trainer {

using Done = std::expected<void, TrainFailure>;

// Whether v improves on best (NaN: nothing yet) by more than min_delta.
inline bool Improved(double v, double best, const std::string& mode, double min_delta) {
  if (std::isnan(best)) return true;
  return mode == "max" ? v > best + min_delta : v < best - min_delta;
}

// Replica r's parameters then its buffers (batchnorm statistics), copied; and back.
std::vector<torch::Tensor> ReplicaState(const FusedModel& model, std::int64_t r);
void RestoreReplicaState(FusedModel& model, std::int64_t r, const std::vector<torch::Tensor>& state);

// One metric line per call, replica r of the group written as repeat first_repeat + r.
class MetricLines {
 public:
  MetricLines(MetricsWriter& writer, std::mutex& mu, const std::vector<std::uint64_t>& seeds,
              std::int64_t first_repeat)
      : writer_(writer), mu_(mu), seeds_(seeds), first_repeat_(first_repeat) {}
  Done Write(std::int64_t r, const std::string& name, double value, std::int64_t step, std::int64_t epoch,
             const std::string& split, bool final);

 private:
  MetricsWriter& writer_;
  std::mutex& mu_;  // guards writer_
  std::vector<std::uint64_t> seeds_;
  std::int64_t first_repeat_;
};

// checkpointing: files under <replica dir>/<path>.
class Checkpointer {
 public:
  Checkpointer(const CheckpointSpec& spec, std::string output_dir, const std::vector<std::uint64_t>& seeds,
               std::int64_t first_repeat);
  // After replica r's optimizer step number `step` (counted over the run).
  Done AfterStep(const FusedModel& model, std::int64_t r, std::int64_t step);
  // After the run's macrobatch number `macro_count`, the `macro_in_epoch`-th of `epoch`.
  Done AfterMacroBatch(const FusedModel& model, std::int64_t r, std::int64_t epoch, std::int64_t macro_count,
                       std::int64_t macro_in_epoch);
  // End of an epoch with the replica's metrics (train_loss, val_*): epoch-N.pt and best.pt.
  Done EndEpoch(const FusedModel& model, std::int64_t r, std::int64_t epoch,
                const std::map<std::string, double>& metrics);

 private:
  std::string ReplicaDir(std::int64_t r) const;
  Done Save(const FusedModel& model, std::int64_t r, const std::string& name) const;
  CheckpointSpec spec_;
  std::string output_dir_;
  std::vector<std::uint64_t> seeds_;
  std::int64_t first_repeat_;
  std::vector<double> best_;  // per replica, NaN: none yet
};

// early_stopping: a replica stops when its monitored metric has not improved
// for `patience` epochs; with restore_best it goes back to its best weights.
class EarlyStopping {
 public:
  EarlyStopping(const EarlyStoppingSpec& spec, std::int64_t replicas);
  struct Stop {
    std::int64_t restored_epoch = 0;  // 0: no weights restored
    std::string notice;               // "seed S: early stopping after epoch E (...)"
  };
  // End of `epoch` (of `epochs`) for replica r: nullopt to go on, else it stopped
  // (and, with restore_best, its weights are back at its best epoch).
  std::optional<Stop> EndEpoch(FusedModel& model, std::int64_t r, std::uint64_t seed, std::int64_t epoch,
                               std::int64_t epochs, const std::map<std::string, double>& metrics);

 private:
  EarlyStoppingSpec spec_;
  std::vector<double> best_;
  std::vector<std::int64_t> bad_;
  // restore_best: each replica's weights (and batchnorm statistics) at its
  // best epoch so far, and that epoch.
  std::vector<std::vector<torch::Tensor>> best_state_;
  std::vector<std::int64_t> best_epoch_;
};

// loss_logging.every_batches: the mean of each window of N batch losses.
class LossWindow {
 public:
  LossWindow(std::int64_t every, std::int64_t replicas)
      : every_(every), sum_(static_cast<std::size_t>(replicas), 0.0), count_(sum_.size(), 0) {}
  // Adds replica r's batch loss; returns the window's mean when it is full.
  std::optional<double> Add(std::int64_t r, double loss);

 private:
  std::int64_t every_;
  std::vector<double> sum_;
  std::vector<std::int64_t> count_;
};

}  // namespace trainq::trainer
