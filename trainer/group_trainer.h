// GroupTrainer trains one group of K replicas (seeds) as one fused model: the
// epoch loop over macrobatches, the optimizer step (the CPU fast path or
// libtorch), the callbacks and the final evaluation. Train (train.h) loads the
// data once and runs one GroupTrainer per group: one for fused seeds, one per
// thread with --threads N, or one per seed with --fuse off.
//
// Shape of Run: for each epoch, train every macrobatch (shuffled per replica,
// a batch at a time, the per-batch and per-macrobatch callbacks after each),
// then evaluate on the validation split and run the end-of-epoch callbacks
// (metric lines, checkpoints, early stopping); last, evaluate on the test split.
//
// A GroupTrainer runs on one thread; groups on several threads share
// GroupInputs, whose metrics writer and messages are guarded by io_mutex.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "trainer/callbacks.h"
#include "trainer/data.h"
#include "trainer/data_parallel.h"
#include "trainer/distributed.h"
#include "trainer/evaluate.h"
#include "trainer/fast_mlp.h"
#include "trainer/metrics_writer.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/progress.h"
#include "trainer/spec.h"
#include "trainer/train.h"

namespace trainq::trainer {

// What every group reads: the spec, the data (on the device or streamed from
// `source`), and where output goes.
struct GroupInputs {
  const Spec& spec;
  const TrainConfig& config;
  torch::Device device;
  const RowSource& source;
  const Normalizer& norm;
  const SplitRows& split;
  std::optional<TensorSet> resident_train;  // when the training set is placed on the device once
  std::optional<TensorSet> validation, test;
  MetricsWriter& metrics;
  bool class_ids;
  std::vector<std::int64_t> input_shape;
  std::mutex io_mutex{};         // guards metrics and the progress messages
  Progress* messages = nullptr;  // where notices and final lines go (may be null)
  // distributed (workers > 1): this rank's group, one replica per rank. Only
  // rank 0 evaluates, writes metrics and checkpoints.
  Collective* comm = nullptr;
};

// The CPU fast path (fast_mlp.h) for linear/ReLU stacks trained with
// cross_entropy: each replica's step on raw buffers, the optimizer applied
// per layer as its gradient is ready.
struct FastPath {
  // The fast path for this model, or nullopt when it does not apply.
  static std::optional<FastPath> TryCreate(const FusedModel& model, const Optimizer& optimizer,
                                           const GroupInputs& in);
  std::optional<DenseStackStep> step;            // optional only because it has no default constructor
  std::vector<std::size_t> param;                // per layer: its weight's index in Parameters(); bias next
  std::vector<std::vector<DenseWeights>> weights;  // per replica, per layer
};

class GroupTrainer {
 public:
  // Builds the model for `seeds` (replica r is repeat first_repeat + r).
  // `progress` (may be null) gets the batches and epoch ends; `report`
  // receives the replica reports when Run ends.
  static std::expected<std::unique_ptr<GroupTrainer>, TrainFailure> Create(GroupInputs& in,
                                                                          const std::vector<std::uint64_t>& seeds,
                                                                          std::int64_t first_repeat,
                                                                          Progress* progress, TrainReport& report);
  Done Run();

 private:
  GroupTrainer(GroupInputs& in, const std::vector<std::uint64_t>& seeds, std::int64_t first_repeat,
               Progress* progress, TrainReport& report, std::unique_ptr<FusedModel> model);

  // One epoch's training over its macrobatches; adds to loss_sum_ and rows_done_.
  Done TrainEpoch(std::int64_t epoch);
  // Replica r's order of a macrobatch of m rows: [K * m] row indices.
  std::vector<std::int64_t> ShuffleOrder(std::int64_t m);
  Done TrainMacroBatchFast(const TensorSet& macro, const std::vector<std::int64_t>& order, std::int64_t epoch);
  Done TrainMacroBatchTorch(const TensorSet& macro, const std::vector<std::int64_t>& order, std::int64_t epoch);
  // Gradient all-reduce (distributed): every rank takes its part of each global batch.
  Done TrainMacroBatchFastSynced(const TensorSet& macro, const std::vector<std::int64_t>& order, std::int64_t epoch);
  Done TrainMacroBatchTorchSynced(const TensorSet& macro, const std::vector<std::int64_t>& order,
                                  std::int64_t epoch);
  bool lead() const { return !dp_ || dp_->rank() == 0; }
  // One batch of replica r is done with this loss: the per-batch callbacks.
  Done AfterBatch(std::int64_t r, double loss, std::int64_t epoch);
  // The NaN check and the per-macrobatch callbacks.
  Done AfterMacroBatch(std::int64_t epoch, std::int64_t m);
  // Validation, metric lines and callbacks; false when every replica has stopped.
  std::expected<bool, TrainFailure> EndEpoch(std::int64_t epoch);
  // Final metrics, tagged final: on the test split, else validation, else train.
  Done Finish();
  void BatchProgress(std::int64_t epoch);
  Done Write(std::int64_t r, const std::string& name, double value, std::int64_t epoch, const std::string& split,
             bool final);

  GroupInputs& in_;
  const Spec& spec_;
  std::vector<std::uint64_t> seeds_;
  std::int64_t k_;
  Progress* progress_;
  TrainReport& report_;
  std::unique_ptr<FusedModel> model_;
  std::vector<ReplicaReport> reps_;
  std::vector<at::Generator> dropout_gens_;
  std::vector<std::mt19937_64> shuffle_gens_;
  Optimizer optimizer_;
  std::optional<FastPath> fast_;
  std::unique_ptr<DataParallel> dp_;  // distributed only
  std::vector<bool> active_;
  std::vector<std::int64_t> steps_;
  ForwardContext ctx_;

  // Callbacks.
  MetricLines lines_;
  std::optional<Checkpointer> checkpointer_;
  std::optional<EarlyStopping> early_stopping_;
  std::optional<LossWindow> loss_window_;
  bool log_macro_ = false;
  bool per_batch_callbacks_ = false;  // loss logging or step checkpoints

  // The current epoch.
  double lr_ = 0;
  torch::Tensor lr_k_;
  std::vector<float> lr_host_;
  torch::Tensor loss_sum_;  // [K] float64: loss x rows
  std::int64_t rows_done_ = 0, batch_in_epoch_ = 0;
  std::int64_t macro_in_epoch_ = 0, macro_count_ = 0;
  std::vector<double> macro_base_;  // the epoch's loss sums when the current macrobatch began
};

}  // namespace trainq::trainer
