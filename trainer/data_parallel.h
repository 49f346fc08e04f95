// What W ranks of one run exchange, and when (docs/TRAINER.md, "Distributed").
// GroupTrainer calls it at fixed points; the transport is a Collective
// (distributed.h), so this file has no c10d in it.
//
//   synchronous, every_n_epochs 0: each global batch (batch_size rows) is
//     split between the ranks; the gradients, weighted by each rank's rows,
//     are summed after every step, so every rank takes the same step as one
//     process would with the same batch. At the end of each epoch the loss
//     sums are added up and the batchnorm statistics averaged.
//   synchronous, every_n_epochs n: each rank trains its shard of the rows
//     (distributed.shuffle) with the full batch_size; every n epochs and after
//     the last, the weights and batchnorm statistics are averaged (optimizer
//     state stays local, as PyTorch's PeriodicModelAverager).
//   partially_asynchronous: after each epoch a rank merges into the general
//     model that rank 0 holds, general <- (general + rank) / 2, in the order
//     the ranks arrive, and goes on from the result (no barrier between the
//     ranks; rank 0's server thread answers). Not bit-reproducible.
//   asynchronous: the same merge only every n epochs, or (0) never.
//   Every weights mode ends with the plain mean of the ranks' weights.
//
// One instance per rank, used from the training thread (the merge server is
// its own thread, started and joined here).
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/result.h"
#include "trainer/distributed.h"
#include "trainer/model.h"
#include "trainer/spec.h"

namespace trainq::trainer {

class DataParallel {
 public:
  DataParallel(Collective& comm, const DistributedSpec& spec, FusedModel& model, std::int64_t epochs);
  ~DataParallel();

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  bool gradient_sync() const { return spec_.GradientSync(); }

  // Weights modes: the rows (indices into a macrobatch of m rows) this rank
  // trains this epoch, by distributed.shuffle; `gen` is the run's shuffle
  // stream, the same on every rank (so every rank draws the same numbers).
  std::vector<std::int64_t> Shard(std::int64_t m, bool shuffle, std::mt19937_64& gen) const;
  // Gradient mode: this rank's rows [lo, hi) of a global batch of b rows.
  std::pair<std::int64_t, std::int64_t> BatchSlice(std::int64_t b) const;
  // Gradient mode: grads (n floats, this rank's gradient of its mean loss over
  // `local` of the batch's `global` rows) become the gradient of the global
  // batch's mean loss, on every rank.
  Status SumGradients(float* grads, std::int64_t n, std::int64_t local, std::int64_t global);

  // End of an epoch. loss_sum and rows are this rank's; in gradient mode and
  // at a synchronous averaging epoch they become the sums over the ranks.
  Status EndEpoch(std::int64_t epoch, double* loss_sum, double* rows);
  // Rank 0's decision (to stop) on every rank; gradient mode and synchronous
  // every epoch only.
  Result<bool> AgreeStop(bool stop);
  // After the last epoch: the plain mean of the weights (weights modes).
  Status Finish();
  // Communication since the last call (for the per-epoch metric lines).
  CommStats TakeEpochStats();
  // Communication of the whole run so far.
  CommStats TotalStats() const { return comm_.stats(); }

 private:
  std::vector<torch::Tensor> State() const;  // parameters then buffers
  std::vector<float> Flatten() const;
  void Unflatten(const std::vector<float>& flat);
  Status AverageWeights();
  Status Merge();                // this rank's merge with the general model
  void Serve(std::int64_t merges);  // rank 0's merge server

  Collective& comm_;
  DistributedSpec spec_;
  FusedModel& model_;
  std::int64_t epochs_;
  CommStats last_;

  // partially_asynchronous / asynchronous, rank 0.
  std::mutex general_mu_;
  std::vector<float> general_;  // guarded by general_mu_
  std::thread server_;
  Status server_status_;        // set by the server thread before it ends
};

}  // namespace trainq::trainer
