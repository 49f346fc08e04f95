// The typed training spec, parsed from a merged SpecNode tree.
//
// Every key is checked: a wrong type, an out-of-range value or an unknown key
// fails with "file:line: section.key: what is wrong". docs/TRAINER.md lists
// every section and key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "trainer/spec_tree.h"

namespace trainq::trainer {

struct SplitSpec {
  // Each part is a fraction (< 1) or a row count (>= 1); test takes the rest
  // when it is not given.
  double train = 0.8;
  double validation = 0.0;
  std::optional<double> test;
  bool shuffle = true;          // false: rows are split in file order
  std::uint64_t split_seed = 0; // the split is the same for every run seed
};

struct DataSpec {
  std::string path;                // resolved: relative paths are taken from the spec file's folder
  std::string format;              // csv | csv.gz | f32
  std::int64_t columns = 0;        // f32 only: values per row
  std::optional<std::int64_t> header;  // lines to skip; unset = auto (skip a non-numeric first line)
  std::vector<std::int64_t> features;  // column indices; empty = every column but the labels
  std::vector<std::int64_t> labels{-1};
  SplitSpec split;
  std::string normalize = "none";  // none | standard | minmax
  std::string where;               // file:line of the data section, for messages
};

struct LayerSpec {
  std::string type;
  std::int64_t out = 0;            // linear, conv2d (out channels)
  std::int64_t kernel = 0;         // conv2d, maxpool2d
  std::int64_t stride = 0;         // conv2d (default 1), maxpool2d (default kernel)
  std::int64_t padding = 0;
  std::int64_t hidden = 0;         // lstm, gru
  std::int64_t vocab = 0, dim = 0; // embedding
  double p = 0.5;                  // dropout
  double eps = 1e-5;               // batchnorm, layernorm
  double momentum = 0.1;           // batchnorm
  bool bias = true;
  bool sequence = false;           // lstm/gru: return every step instead of the last
  std::vector<std::int64_t> shape; // reshape (per sample)
  std::string where;               // "file:line: model.layers[i]"
};

struct ModelSpec {
  std::vector<LayerSpec> layers;
};

struct LossSpec {
  std::string type = "cross_entropy";  // cross_entropy | mse | l1 | bce_with_logits
};

struct ScheduleSpec {
  std::string type = "none";  // none | step | cosine
  std::int64_t step_size = 10;  // step: epochs between decays
  double gamma = 0.1;           // step: factor
  double min_lr = 0.0;          // cosine: final learning rate
  std::int64_t warmup_epochs = 0;
};

struct OptimizerSpec {
  std::string type = "adam";  // sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  // adamw default 0.01
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  ScheduleSpec schedule;
};

struct CheckpointSpec {
  std::string path = "checkpoints";  // under the output dir
  std::int64_t every = 0;            // epochs between checkpoints; 0 = only best/last
  std::int64_t every_batches = 0;    // optimizer steps between step-N.pt; 0 = none
  std::int64_t every_macrobatches = 0;  // macrobatches between epoch-E-macro-I.pt; 0 = none
  std::string monitor;               // e.g. val_accuracy; empty = no best
  std::string mode = "max";          // max | min
  bool keep_best = true;
};

struct EarlyStoppingSpec {
  std::string monitor = "val_loss";
  std::string mode = "min";
  std::int64_t patience = 5;
  double min_delta = 0.0;
  // When it stops: go back to the weights of the best epoch (by `monitor`)
  // before the final evaluation.
  bool restore_best = true;
};

// loss_logging: training-loss lines written while an epoch runs.
struct LossLoggingSpec {
  std::int64_t every_batches = 0;  // a `batch_loss` line (mean of the last N batches) every N steps; 0 = none
  bool macrobatches = true;        // a `macrobatch_loss` line at the end of each macrobatch
};

struct TrainerSpec {
  std::int64_t epochs = 10;
  std::int64_t batch_size = 32;
  std::int64_t macro_batch_size = 0;  // 0: the whole training set is one macrobatch
  std::int64_t shuffle_blocks = 16;   // runs of consecutive rows per streamed macrobatch (see PlanMacroBatches)
  std::int64_t eval_batch_size = 1024;
  bool shuffle = true;
  std::optional<CheckpointSpec> checkpointing;
  std::optional<EarlyStoppingSpec> early_stopping;
  std::optional<LossLoggingSpec> loss_logging;
};

// distributed: W processes train this one run (docs/TRAINER.md, "Distributed").
struct DistributedSpec {
  std::int64_t workers = 1;        // ranks in all; 1 = off (the section is then ignored)
  std::int64_t nodes = 1;          // machines, workers / nodes ranks each; > 1 needs rendezvous env or tcp://
  std::int64_t gpus_per_node = 0;  // a rank uses cuda:(local_rank % gpus_per_node); 0 = the --device choice
  std::string mode = "synchronous";  // synchronous | partially_asynchronous | asynchronous
  // synchronous: 0 = gradients all-reduced every step; n = weights averaged every n epochs.
  // asynchronous: n = merges with the general model every n epochs; 0 = only the mean at the end.
  std::int64_t every_n_epochs = 0;
  std::string shuffle = "total";   // total | blocks | within_blocks | both | none
  std::string rendezvous = "auto"; // auto | env | tcp://HOST:PORT
  std::int64_t timeout_seconds = 300;  // each collective; the rendezvous waits max(this, 300 s)
  std::string where;               // file:line of the section, for messages

  bool GradientSync() const { return mode == "synchronous" && every_n_epochs == 0; }
};

struct Spec {
  std::string file;
  DataSpec data;
  ModelSpec model;
  LossSpec loss;
  OptimizerSpec optimizer;
  TrainerSpec trainer;
  std::vector<std::string> metrics{"accuracy", "loss"};
  std::optional<DistributedSpec> distributed;
};

// Parses the merged tree; `spec_file` is the top spec (for messages).
Result<Spec> ParseSpec(const SpecNode& root, const std::string& spec_file);

// LoadSpecTree + overrides + ParseSpec.
Result<Spec> LoadSpec(const std::string& path, const std::vector<std::string>& overrides);

// Whether a metric is better when larger (accuracy, f1) or smaller (loss, mse, mae).
bool MetricIsHigherBetter(const std::string& name);

}  // namespace trainq::trainer
