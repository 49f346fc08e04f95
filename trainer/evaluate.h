// Losses and metrics of K stacked replicas: the per-replica training loss,
// evaluation on a split held on the device (accuracy, macro F1, loss, mse,
// mae) and the one-line epoch summary.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/spec.h"

namespace trainq::trainer {

// Rows placed on the device.
struct TensorSet {
  torch::Tensor x;  // [N, features...]
  torch::Tensor y;  // [N] long or [N, L] float
  std::int64_t rows = 0;
};

TensorSet ToTensors(RowBlock& block, std::int64_t features, std::int64_t labels, bool class_ids,
                    torch::Device device);

// out: [K, B, C]; y: [K, B] (class ids) or [K, B, L]. Returns [K] mean losses.
torch::Tensor PerReplicaLoss(const std::string& type, const torch::Tensor& out, const torch::Tensor& y);

// Macro F1 over the classes that occur in pred or truth (both [N] int64 on the CPU).
double MacroF1(const torch::Tensor& pred, const torch::Tensor& truth, std::int64_t classes);

// Evaluates every replica on `set`; returns per-replica metrics named by `prefix`.
std::vector<std::map<std::string, double>> Evaluate(FusedModel& model, const TensorSet& set, const Spec& spec,
                                                    ForwardContext& ctx, const std::string& prefix);

// "train_loss 0.1234  val_accuracy 0.9000 ...": the mean over active replicas.
std::string FormatSummary(const std::vector<std::map<std::string, double>>& per_replica,
                          const std::vector<bool>& active);

}  // namespace trainq::trainer
