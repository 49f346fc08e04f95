// Training: the epoch loop over macrobatches, the optimizer, evaluation,
// callbacks and metric output, for K replicas at once. This header is
// torch-free so that main and tests of the command need no torch.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainer/distributed.h"
#include "trainer/spec.h"

namespace trainq::trainer {

struct TrainConfig {
  std::vector<std::uint64_t> seeds{1};  // one replica per seed
  std::string device = "cpu";           // auto | cpu | cuda
  int threads = 1;
  bool fuse = true;                     // false: the seeds run one after another
  std::string metrics_file;             // pattern, may hold {seed} and {repeat}; empty: none
  std::string output_dir;               // pattern, may hold {seed} and {repeat}; empty: none
  bool progress = false;
  bool progress_terminal = false;
  std::function<double()> now;          // monotonic seconds; empty: steady clock
  // For tests: keep each replica's initial parameters and the order in which
  // replica 0 saw the training rows.
  bool record_details = false;
  // On the CPU, a model of linear layers and ReLUs trained with cross_entropy
  // takes the fast path (trainer/fast_mlp.h); false forces the libtorch path
  // (for tests and comparisons: same trajectories within float tolerance).
  bool fast_path = true;
  // distributed.workers > 1: how this rank joins its group (trainer/launcher.h's
  // PlanRank). Ranks other than 0 write no metrics, checkpoints or progress.
  std::optional<RendezvousPlan> rendezvous;
};

struct ReplicaReport {
  std::uint64_t seed = 0;
  std::vector<double> train_loss;                            // per epoch run
  std::vector<std::map<std::string, double>> validation;     // per epoch run, "val_*"
  std::map<std::string, double> final_metrics;               // on the test split (see docs)
  std::string final_split;                                   // test | validation | train
  std::int64_t epochs_run = 0;
  bool stopped_early = false;
  std::int64_t restored_epoch = 0;                           // early_stopping restored this epoch's weights; 0: none
  std::int64_t steps = 0;
  // loss_logging callback: (step, mean loss of the last batches) and the
  // mean loss of each macrobatch, as written to the metrics file.
  std::vector<std::pair<std::int64_t, double>> batch_losses;
  std::vector<double> macrobatch_losses;
  std::vector<float> initial_parameters;                     // record_details only
};

struct TrainReport {
  std::vector<ReplicaReport> replicas;
  bool fused = false;
  bool fast_path = false;      // the CPU fast path (trainer/fast_mlp.h) trained the replicas
  std::string device;
  double train_seconds = 0;   // model building, training and evaluation; no data loading
  double total_seconds = 0;
  bool streamed = false;       // macrobatches were read from the source each epoch
  int max_macrobatches_alive = 0;
  std::vector<std::vector<std::int64_t>> rows_seen;  // record_details: per epoch, replica 0's row order
  std::vector<std::string> notices;                  // one-line notices also printed on stderr
};

struct TrainFailure {
  int exit_code = 1;  // exit_codes.h: 2 bad spec, 3 data error, 1 training failure, 4 distributed
  std::string message;
};

std::expected<TrainReport, TrainFailure> Train(const Spec& spec, const TrainConfig& config);

}  // namespace trainq::trainer
