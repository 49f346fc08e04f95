#include "trainer/evaluate.h"

#include <algorithm>

#include "core/strings.h"

namespace trainq::trainer {

torch::Tensor PerReplicaLoss(const std::string& type, const torch::Tensor& out, const torch::Tensor& y) {
  const std::int64_t k = out.size(0), b = out.size(1);
  if (type == "cross_entropy") {
    namespace F = torch::nn::functional;
    return F::cross_entropy(out.reshape({k * b, out.size(2)}), y.reshape({k * b}),
                            F::CrossEntropyFuncOptions().reduction(torch::kNone))
        .view({k, b})
        .mean(1);
  }
  if (type == "mse") return (out - y).pow(2).mean({1, 2});
  if (type == "l1") return (out - y).abs().mean({1, 2});
  return torch::binary_cross_entropy_with_logits(out, y, {}, {}, at::Reduction::None).mean({1, 2});
}


TensorSet ToTensors(RowBlock& block, std::int64_t features, std::int64_t labels, bool class_ids,
                    torch::Device device) {
  TensorSet t;
  t.rows = block.rows;
  t.x = torch::from_blob(block.x.data(), {block.rows, features}, torch::kFloat32).to(device, false, true);
  torch::Tensor y = torch::from_blob(block.y.data(), {block.rows, labels}, torch::kFloat32);
  t.y = class_ids ? y.select(1, 0).to(torch::kLong).to(device) : y.to(device, false, true);
  return t;
}

double MacroF1(const torch::Tensor& pred, const torch::Tensor& truth, std::int64_t classes) {
  auto p = pred.accessor<std::int64_t, 1>();
  auto t = truth.accessor<std::int64_t, 1>();
  std::vector<double> tp(static_cast<std::size_t>(classes)), fp(tp.size()), fn(tp.size());
  for (std::int64_t i = 0; i < pred.size(0); ++i) {
    if (p[i] == t[i]) {
      tp[static_cast<std::size_t>(p[i])] += 1;
    } else {
      fp[static_cast<std::size_t>(p[i])] += 1;
      if (t[i] >= 0 && t[i] < classes) fn[static_cast<std::size_t>(t[i])] += 1;
    }
  }
  double sum = 0;
  int present = 0;
  for (std::size_t c = 0; c < tp.size(); ++c) {
    if (tp[c] + fp[c] + fn[c] == 0) continue;
    sum += 2 * tp[c] / (2 * tp[c] + fp[c] + fn[c]);
    ++present;
  }
  return present ? sum / present : 0.0;
}

std::vector<std::map<std::string, double>> Evaluate(FusedModel& model, const TensorSet& set, const Spec& spec,
                                                    ForwardContext& ctx, const std::string& prefix) {
  torch::NoGradGuard no_grad;
  ForwardContext eval = ctx;
  eval.training = false;
  const std::int64_t k = model.replicas();
  std::vector<torch::Tensor> outs;
  torch::Tensor loss_sum = torch::zeros({k}, set.x.options());
  for (std::int64_t start = 0; start < set.rows; start += spec.trainer.eval_batch_size) {
    const std::int64_t n = std::min(spec.trainer.eval_batch_size, set.rows - start);
    torch::Tensor xb = set.x.narrow(0, start, n);
    std::vector<std::int64_t> shape = xb.sizes().vec();
    shape.insert(shape.begin(), k);
    torch::Tensor out = model.Forward(xb.unsqueeze(0).expand(shape), eval);
    torch::Tensor yb = set.y.narrow(0, start, n);
    std::vector<std::int64_t> yshape = yb.sizes().vec();
    yshape.insert(yshape.begin(), k);
    loss_sum += PerReplicaLoss(spec.loss.type, out, yb.unsqueeze(0).expand(yshape)) * static_cast<double>(n);
    outs.push_back(out.to(torch::kCPU));
  }
  torch::Tensor out = torch::cat(outs, 1);  // [K, N, C]
  torch::Tensor losses = (loss_sum / static_cast<double>(set.rows)).to(torch::kCPU);
  torch::Tensor y = set.y.to(torch::kCPU);
  std::vector<std::map<std::string, double>> result(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < k; ++r) {
    auto& m = result[static_cast<std::size_t>(r)];
    torch::Tensor o = out[r];
    for (const std::string& name : spec.metrics) {
      double v = 0;
      if (name == "loss") {
        v = losses[r].item<double>();
      } else if (name == "accuracy") {
        if (spec.loss.type == "cross_entropy") {
          v = o.argmax(1).eq(y).to(torch::kFloat64).mean().item<double>();
        } else {
          v = (o > 0).to(torch::kFloat32).eq(y).to(torch::kFloat64).mean().item<double>();
        }
      } else if (name == "f1") {
        if (spec.loss.type == "cross_entropy") {
          v = MacroF1(o.argmax(1).contiguous(), y.contiguous(), o.size(1));
        } else {
          torch::Tensor pred = (o > 0).to(torch::kFloat64), truth = y.to(torch::kFloat64);
          const double tp = (pred * truth).sum().item<double>();
          const double denom = pred.sum().item<double>() + truth.sum().item<double>();
          v = denom > 0 ? 2 * tp / denom : 0.0;
        }
      } else if (name == "mse") {
        v = (o - y).pow(2).to(torch::kFloat64).mean().item<double>();
      } else if (name == "mae") {
        v = (o - y).abs().to(torch::kFloat64).mean().item<double>();
      }
      m[prefix + name] = v;
    }
  }
  return result;
}

std::string FormatSummary(const std::vector<std::map<std::string, double>>& per_replica,
                          const std::vector<bool>& active) {
  std::map<std::string, std::pair<double, int>> sums;
  for (std::size_t r = 0; r < per_replica.size(); ++r) {
    if (!active[r]) continue;
    for (const auto& [name, v] : per_replica[r]) {
      sums[name].first += v;
      sums[name].second += 1;
    }
  }
  std::string out;
  // train_loss first, then the rest alphabetically.
  if (auto it = sums.find("train_loss"); it != sums.end()) {
    out = "train_loss " + FormatDouble(it->second.first / it->second.second, 4);
  }
  for (const auto& [name, s] : sums) {
    if (name == "train_loss") continue;
    out += (out.empty() ? "" : "  ") + name + " " + FormatDouble(s.first / s.second, 4);
  }
  return out;
}

}  // namespace trainq::trainer
