#include "trainer/train.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <mutex>
#include <set>
#include <thread>

#include "core/strings.h"
#include "trainer/cli.h"
#include "trainer/data.h"
#include "trainer/macrobatch.h"
#include "trainer/metrics_writer.h"
#include "trainer/model.h"
#include "trainer/cpu_kernels.h"
#include "trainer/fast_mlp.h"
#include "trainer/progress.h"
#include "trainer/rng.h"

namespace trainq::trainer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::unexpected<TrainFailure> Failure(int code, std::string message) {
  return std::unexpected(TrainFailure{code, std::move(message)});
}

// Element-wise optimizers over stacked parameters: every operation acts on
// each replica's slice alone, with a per-replica learning rate (0 for a
// replica that stopped early).
class Optimizer {
 public:
  Optimizer(const OptimizerSpec& spec, std::vector<torch::Tensor> params) : spec_(spec), params_(std::move(params)) {
    for (const auto& p : params_) {
      state1_.push_back(torch::zeros_like(p));
      if (spec_.type != "sgd") state2_.push_back(torch::zeros_like(p));
    }
  }

  // lr: [K] on the parameters' device. When every replica has the same rate
  // (`uniform_lr`, no replica stopped early) the scalar form saves passes.
  // lr_host: the same rates on the host, one per replica (the CPU path).
  // Counts a step and prepares its constants; Step does this itself, the
  // fast path calls it once per batch before UpdateSlice.
  void BeginStep() {
    ++step_;
    const double b1 = spec_.beta1, b2 = spec_.beta2, wd = spec_.weight_decay;
    bc1_ = 1.0 - std::pow(b1, static_cast<double>(step_));
    bc2_ = 1.0 - std::pow(b2, static_cast<double>(step_));
    adam_.beta1 = static_cast<float>(b1);
    adam_.beta2 = static_cast<float>(b2);
    adam_.eps = static_cast<float>(spec_.eps);
    adam_.weight_decay = static_cast<float>(wd);
    adam_.decoupled = spec_.type == "adamw";
    adam_.bias_correction1 = static_cast<float>(bc1_);
    adam_.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bc2_));
  }

  // Whether UpdateSlice may be used: every parameter and its state are
  // contiguous float32 on the CPU.
  bool CpuSlices() const {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!CpuFloatContiguous(params_[i]) || !CpuFloatContiguous(state1_[i]) ||
          (!state2_.empty() && !CpuFloatContiguous(state2_[i]))) {
        return false;
      }
    }
    return true;
  }

  // Updates replica r's slice of parameter i from its gradient g (the slice's
  // size), with the constants of the step BeginStep began.
  void UpdateSlice(std::size_t i, std::int64_t r, const float* g, float lr) {
    torch::Tensor& p = params_[i];
    const std::int64_t n = p.numel() / p.size(0);
    float* pd = p.data_ptr<float>() + r * n;
    float* s1 = state1_[i].data_ptr<float>() + r * n;
    if (spec_.type == "sgd") {
      SgdUpdate(pd, g, s1, n, lr, static_cast<float>(spec_.weight_decay), static_cast<float>(spec_.momentum),
                spec_.nesterov, step_ == 1);
    } else {
      AdamUpdate(pd, g, s1, state2_[i].data_ptr<float>() + r * n, n, lr, adam_);
    }
  }

  void Step(const torch::Tensor& lr, std::optional<double> uniform_lr, const std::vector<float>& lr_host) {
    torch::NoGradGuard no_grad;
    BeginStep();
    const double b1 = spec_.beta1, b2 = spec_.beta2, wd = spec_.weight_decay;
    const double bc1 = bc1_, bc2 = bc2_;
    const AdamConstants& adam = adam_;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      torch::Tensor g = p.grad();
      if (CpuFloatContiguous(p) && CpuFloatContiguous(g) && CpuFloatContiguous(state1_[i]) &&
          (state2_.empty() || CpuFloatContiguous(state2_[i]))) {
        // One pass per replica slice over p, g and the state (see cpu_kernels.h).
        const std::int64_t k = p.size(0), n = p.numel() / k;
        float* pd = p.data_ptr<float>();
        const float* gd = g.data_ptr<float>();
        float* s1 = state1_[i].data_ptr<float>();
        float* s2 = state2_.empty() ? nullptr : state2_[i].data_ptr<float>();
        for (std::int64_t r = 0; r < k; ++r) {
          const float rate = lr_host[static_cast<std::size_t>(r)];
          if (spec_.type == "sgd") {
            SgdUpdate(pd + r * n, gd + r * n, s1 + r * n, n, rate, static_cast<float>(wd),
                      static_cast<float>(spec_.momentum), spec_.nesterov, step_ == 1);
          } else {
            AdamUpdate(pd + r * n, gd + r * n, s1 + r * n, s2 + r * n, n, rate, adam);
          }
        }
        p.mutable_grad().reset();
        continue;
      }
      torch::Tensor lr_v;
      if (!uniform_lr) {
        std::vector<std::int64_t> view(static_cast<std::size_t>(p.dim()), 1);
        view[0] = p.size(0);
        lr_v = lr.view(view);
      }
      if (spec_.type == "sgd") {
        if (wd != 0) g = g.add(p, wd);
        if (spec_.momentum > 0) {
          torch::Tensor& buf = state1_[i];
          if (step_ == 1) {
            buf.copy_(g);
          } else {
            buf.mul_(spec_.momentum).add_(g);
          }
          g = spec_.nesterov ? g.add(buf, spec_.momentum) : buf;
        }
        if (uniform_lr) {
          p.add_(g, -*uniform_lr);
        } else {
          p.sub_(lr_v * g);
        }
      } else {
        if (spec_.type == "adam" && wd != 0) g = g.add(p, wd);
        if (spec_.type == "adamw" && wd != 0) {
          if (uniform_lr) {
            p.mul_(1.0 - *uniform_lr * wd);
          } else {
            p.sub_(lr_v * wd * p);
          }
        }
        torch::Tensor& m = state1_[i];
        torch::Tensor& v = state2_[i];
        m.mul_(b1).add_(g, 1.0 - b1);
        v.mul_(b2).addcmul_(g, g, 1.0 - b2);
        torch::Tensor denom = v.sqrt().div_(std::sqrt(bc2)).add_(spec_.eps);
        if (uniform_lr) {
          p.addcdiv_(m, denom, -*uniform_lr / bc1);
        } else {
          p.sub_((lr_v / bc1) * m / denom);
        }
      }
      p.mutable_grad().reset();
    }
  }

 private:
  static bool CpuFloatContiguous(const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
  }
  OptimizerSpec spec_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> state1_, state2_;
  std::int64_t step_ = 0;
  double bc1_ = 1, bc2_ = 1;
  AdamConstants adam_;
};

double LearningRate(const OptimizerSpec& o, std::int64_t epoch /*0-based*/, std::int64_t epochs) {
  const ScheduleSpec& s = o.schedule;
  if (s.warmup_epochs > 0 && epoch < s.warmup_epochs) {
    return o.lr * static_cast<double>(epoch + 1) / static_cast<double>(s.warmup_epochs);
  }
  if (s.type == "step") {
    return o.lr * std::pow(s.gamma, static_cast<double>((epoch - s.warmup_epochs) / s.step_size));
  }
  if (s.type == "cosine") {
    const double span = static_cast<double>(std::max<std::int64_t>(1, epochs - s.warmup_epochs));
    const double t = static_cast<double>(epoch - s.warmup_epochs) / span;
    return s.min_lr + 0.5 * (o.lr - s.min_lr) * (1.0 + std::cos(M_PI * t));
  }
  return o.lr;
}

// out: [K, B, C]; y: [K, B] (class ids) or [K, B, L]. Returns [K] mean losses.
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

struct TensorSet {
  torch::Tensor x;  // [N, features...]
  torch::Tensor y;  // [N] long or [N, L] float
  std::int64_t rows = 0;
};

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

// Evaluates every replica on `set`; returns per-replica metrics named by `prefix`.
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

struct Shared {
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
  // Replica groups on several threads share the metrics writer and the
  // progress messages; this guards both.
  std::mutex io_mutex{};
  Progress* messages = nullptr;  // where notices and final lines go (may be null)
};

// Checks that the model's output fits the loss and the labels.
std::optional<std::string> CheckOutput(const FusedModel& model, const Shared& s) {
  const auto& shape = model.output_shape();
  std::string where = model.last_layer_where();
  if (shape.size() != 1) {
    return where + ": the model must end in a flat output per sample (add flatten and linear layers)";
  }
  const std::int64_t outputs = shape[0];
  if (s.class_ids) {
    double max_label = -1;
    for (const auto* t : {&s.resident_train, &s.validation, &s.test}) {
      if (t->has_value() && (*t)->rows > 0) max_label = std::max(max_label, (*t)->y.max().item<double>());
    }
    if (outputs < 2) return where + ": cross_entropy needs at least 2 outputs (one per class)";
    if (max_label >= static_cast<double>(outputs)) {
      return where + ": the labels go up to " + FormatDouble(max_label, 0) + " but the model has " +
             std::to_string(outputs) + " outputs (one per class)";
    }
  } else if (outputs != s.source.label_count()) {
    return where + ": the model has " + std::to_string(outputs) + " outputs but the data has " +
           std::to_string(s.source.label_count()) + " label columns";
  }
  return std::nullopt;
}

// Trains the replicas for `seeds` together; appends their reports.
std::expected<void, TrainFailure> TrainGroup(Shared& s, const std::vector<std::uint64_t>& seeds,
                                             std::int64_t first_repeat, Progress* progress, TrainReport& report) {
  const Spec& spec = s.spec;
  const std::int64_t k = static_cast<std::int64_t>(seeds.size());
  auto built = FusedModel::Build(spec.model, s.input_shape, seeds, s.device);
  if (!built) return Failure(kExitBadSpec, built.error().message);
  FusedModel& model = **built;
  if (auto problem = CheckOutput(model, s)) return Failure(kExitBadSpec, *problem);

  std::vector<ReplicaReport> reps(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < k; ++r) reps[static_cast<std::size_t>(r)].seed = seeds[static_cast<std::size_t>(r)];
  if (s.config.record_details) {
    for (const auto& p : model.Parameters()) {
      for (std::int64_t r = 0; r < k; ++r) {
        torch::Tensor flat = p[r].detach().to(torch::kCPU).contiguous().view(-1);
        auto& dst = reps[static_cast<std::size_t>(r)].initial_parameters;
        dst.insert(dst.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
      }
    }
  }

  std::vector<at::Generator> dropout_gens;
  std::vector<std::mt19937_64> shuffle_gens;
  for (std::uint64_t seed : seeds) {
    dropout_gens.push_back(at::make_generator<at::CPUGeneratorImpl>(DeriveSeed(seed, kStreamDropout)));
    shuffle_gens.emplace_back(DeriveSeed(seed, kStreamShuffle));
  }
  Optimizer optimizer(spec.optimizer, model.Parameters());
  // The CPU fast path (fast_mlp.h) for linear/ReLU stacks trained with
  // cross_entropy: each replica's step on raw buffers, the optimizer applied
  // per layer as its gradient is ready. Other models take the libtorch path.
  std::optional<DenseStackStep> fast;
  std::vector<std::size_t> fast_param;                 // per layer: its weight's index in Parameters(); bias next
  std::vector<std::vector<DenseWeights>> fast_weights;  // per replica, per layer
  if (s.config.fast_path && s.device.is_cpu() && s.class_ids && spec.loss.type == "cross_entropy" &&
      s.input_shape.size() == 1 && LoadedSgemm() != nullptr && optimizer.CpuSlices() &&
      spec.trainer.batch_size < (1 << 20)) {
    if (auto stack = model.DenseStack()) {
      auto ok = [](const torch::Tensor& t) {
        return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
               t.numel() < (std::int64_t{1} << 31);
      };
      std::vector<DenseShape> shapes;
      bool usable = true;
      std::size_t index = 0;
      std::int64_t widest = 1;
      for (const DenseLayer& l : *stack) {
        usable = usable && ok(l.w) && (!l.b.defined() || ok(l.b));
        shapes.push_back(
            DenseShape{static_cast<int>(l.w.size(1)), static_cast<int>(l.w.size(2)), l.b.defined(), l.relu});
        widest = std::max({widest, l.w.size(1), l.w.size(2)});
        fast_param.push_back(index);
        index += l.b.defined() ? 2 : 1;
      }
      if (usable && widest * spec.trainer.batch_size < (std::int64_t{1} << 31)) {
        fast.emplace(shapes, static_cast<int>(spec.trainer.batch_size), LoadedSgemm());
        for (std::int64_t r = 0; r < k; ++r) {
          std::vector<DenseWeights> w;
          for (const DenseLayer& l : *stack) {
            const std::int64_t in = l.w.size(1), out = l.w.size(2);
            w.push_back(DenseWeights{l.w.data_ptr<float>() + r * in * out,
                                     l.b.defined() ? l.b.data_ptr<float>() + r * out : nullptr});
          }
          fast_weights.push_back(std::move(w));
        }
      }
    }
  }
  report.fast_path = fast.has_value();
  std::vector<bool> active(static_cast<std::size_t>(k), true);
  std::vector<std::int64_t> steps(static_cast<std::size_t>(k), 0);
  ForwardContext ctx;
  ctx.dropout_generators = &dropout_gens;
  ctx.active = torch::ones({k}, torch::TensorOptions().device(s.device));

  // Callback state, per replica.
  std::vector<double> es_best(static_cast<std::size_t>(k), NAN), ck_best(static_cast<std::size_t>(k), NAN);
  std::vector<std::int64_t> es_bad(static_cast<std::size_t>(k), 0);
  // early_stopping.restore_best: each replica's weights (and batchnorm
  // statistics) at its best epoch so far, and that epoch.
  std::vector<std::vector<torch::Tensor>> es_best_state(static_cast<std::size_t>(k));
  std::vector<std::int64_t> es_best_epoch(static_cast<std::size_t>(k), 0);
  auto replica_state = [&](std::int64_t r) {
    std::vector<torch::Tensor> state;
    for (const auto& p : model.Parameters()) state.push_back(p[r].detach().clone());
    for (const auto& b : model.Buffers()) state.push_back(b[r].detach().clone());
    return state;
  };
  auto restore_state = [&](std::int64_t r, const std::vector<torch::Tensor>& state) {
    torch::NoGradGuard no_grad;
    std::size_t i = 0;
    for (const auto& p : model.Parameters()) p[r].copy_(state[i++]);
    for (const auto& b : model.Buffers()) b[r].copy_(state[i++]);
  };
  auto improved = [](double v, double best, const std::string& mode, double min_delta) {
    if (std::isnan(best)) return true;
    return mode == "max" ? v > best + min_delta : v < best - min_delta;
  };
  auto replica_dir = [&](std::int64_t r) {
    std::string dir = ReplicaPath(s.config.output_dir, seeds[static_cast<std::size_t>(r)], first_repeat + r);
    if (seeds.size() > 1 && s.config.output_dir.find("{seed}") == std::string::npos &&
        s.config.output_dir.find("{repeat}") == std::string::npos) {
      dir = (fs::path(dir) / ("seed-" + std::to_string(seeds[static_cast<std::size_t>(r)]))).string();
    }
    return dir;
  };
  auto save_checkpoint = [&](std::int64_t r, const std::string& name) -> std::expected<void, TrainFailure> {
    fs::path dir = fs::path(replica_dir(r)) / spec.trainer.checkpointing->path;
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::vector<torch::Tensor> slices;
    for (const auto& p : model.Parameters()) slices.push_back(p[r].detach().to(torch::kCPU).clone());
    for (const auto& b : model.Buffers()) slices.push_back(b[r].detach().to(torch::kCPU).clone());
    try {
      torch::save(slices, (dir / name).string());
    } catch (const std::exception& e) {
      return Failure(kExitTrainingFailed, "cannot write checkpoint " + (dir / name).string() + ": " + e.what());
    }
    return {};
  };

  const std::int64_t epochs = spec.trainer.epochs;
  const std::int64_t bs = spec.trainer.batch_size;
  auto write = [&](std::int64_t r, const std::string& name, double value, std::int64_t epoch, const std::string& split,
                   bool final) -> std::expected<void, TrainFailure> {
    MetricLine line{name, value, steps[static_cast<std::size_t>(r)], epoch, seeds[static_cast<std::size_t>(r)], split,
                    final};
    std::lock_guard<std::mutex> lock(s.io_mutex);
    if (auto st = s.metrics.Write(line, first_repeat + r); !st) {
      return Failure(kExitTrainingFailed, st.error().message);
    }
    return {};
  };

  // Callbacks that fire while an epoch runs: after every batch (per replica,
  // on its own step count) and after every macrobatch.
  const std::int64_t log_every = spec.trainer.loss_logging ? spec.trainer.loss_logging->every_batches : 0;
  const bool log_macro = spec.trainer.loss_logging && spec.trainer.loss_logging->macrobatches;
  const std::int64_t ck_steps = spec.trainer.checkpointing ? spec.trainer.checkpointing->every_batches : 0;
  const std::int64_t ck_macros = spec.trainer.checkpointing ? spec.trainer.checkpointing->every_macrobatches : 0;
  std::vector<double> window_sum(static_cast<std::size_t>(k), 0.0);
  std::vector<std::int64_t> window_batches(static_cast<std::size_t>(k), 0);
  std::int64_t macro_count = 0;
  // One batch of replica r is done with this loss: the per-batch callbacks.
  auto after_batch = [&](std::int64_t r, double loss, std::int64_t epoch) -> std::expected<void, TrainFailure> {
    const std::size_t ri = static_cast<std::size_t>(r);
    const std::int64_t step = steps[ri];
    if (log_every > 0) {
      window_sum[ri] += loss;
      if (++window_batches[ri] == log_every) {
        const double mean = window_sum[ri] / static_cast<double>(log_every);
        window_sum[ri] = 0;
        window_batches[ri] = 0;
        reps[ri].batch_losses.emplace_back(step, mean);
        if (auto w = write(r, "batch_loss", mean, epoch, "train", false); !w) return w;
      }
    }
    if (ck_steps > 0 && step % ck_steps == 0) {
      if (auto c = save_checkpoint(r, "step-" + std::to_string(step) + ".pt"); !c) return c;
    }
    return {};
  };

  for (std::int64_t epoch = 1; epoch <= epochs; ++epoch) {
    const double lr = LearningRate(spec.optimizer, epoch - 1, epochs);
    torch::Tensor lr_k = ctx.active * lr;
    const bool all_active = std::all_of(active.begin(), active.end(), [](bool a) { return a; });
    std::vector<float> lr_host;
    for (bool a : active) lr_host.push_back(a ? static_cast<float>(lr) : 0.0f);
    torch::Tensor loss_sum = torch::zeros({k}, torch::TensorOptions().device(s.device).dtype(torch::kFloat64));
    std::int64_t rows_done = 0, batch_in_epoch = 0;
    if (s.config.record_details) report.rows_seen.emplace_back();

    std::optional<MacroBatchReader> reader;
    if (!s.resident_train) {
      reader.emplace(s.source, s.norm,
                     PlanMacroBatches(s.split.train, spec.trainer.macro_batch_size, spec.data.split.split_seed,
                                      epoch, spec.trainer.shuffle, spec.trainer.shuffle_blocks));
    }
    MacroBatch mb;
    bool first = true;
    std::int64_t macro_in_epoch = 0;
    // The epoch's loss sums (loss x rows) when the current macrobatch began.
    std::vector<double> macro_base(static_cast<std::size_t>(k), 0.0);
    while (true) {
      TensorSet macro;
      const std::vector<std::int64_t>* macro_rows = &s.split.train;
      if (reader) {
        auto more = reader->Next(&mb);
        if (!more) return Failure(kExitDataError, more.error().message);
        if (!*more) break;
        macro = ToTensors(mb.block, s.source.feature_count(), s.source.label_count(), s.class_ids, s.device);
        macro_rows = &mb.rows;
      } else {
        if (!first) break;
        macro = *s.resident_train;
      }
      first = false;
      const std::int64_t m = macro.rows;
      ++macro_in_epoch;
      ++macro_count;
      // Per-replica order of this macrobatch's rows.
      std::vector<std::int64_t> order(static_cast<std::size_t>(k * m));
      for (std::int64_t r = 0; r < k; ++r) {
        std::vector<std::int64_t> perm(static_cast<std::size_t>(m));
        for (std::int64_t i = 0; i < m; ++i) perm[static_cast<std::size_t>(i)] = i;
        if (spec.trainer.shuffle) Shuffle(perm, shuffle_gens[static_cast<std::size_t>(r)]);
        std::copy(perm.begin(), perm.end(), order.begin() + r * m);
      }
      if (s.config.record_details) {
        for (std::int64_t i = 0; i < m; ++i) {
          report.rows_seen.back().push_back((*macro_rows)[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])]);
        }
      }
      if (fast) {
        const torch::Tensor xs = macro.x.contiguous(), ys = macro.y.contiguous();
        const float* xd = xs.data_ptr<float>();
        const std::int64_t* yd = ys.data_ptr<std::int64_t>();
        std::vector<double> sums(static_cast<std::size_t>(k), 0.0);
        for (std::int64_t start = 0; start < m; start += bs) {
          const std::int64_t b = std::min(bs, m - start);
          optimizer.BeginStep();
          for (std::int64_t r = 0; r < k; ++r) {
            const std::size_t ri = static_cast<std::size_t>(r);
            if (!active[ri]) continue;  // frozen: its weights stay as they are
            const float rate = lr_host[ri];
            const float loss = fast->Step(fast_weights[ri], xd, yd, order.data() + r * m + start, static_cast<int>(b),
                                          [&](int layer, const float* gw, const float* gb) {
                                            const std::size_t i = fast_param[static_cast<std::size_t>(layer)];
                                            optimizer.UpdateSlice(i, r, gw, rate);
                                            if (gb != nullptr) optimizer.UpdateSlice(i + 1, r, gb, rate);
                                          });
            sums[ri] += static_cast<double>(loss) * static_cast<double>(b);
            ++steps[ri];
            if (auto c = after_batch(r, loss, epoch); !c) return c;
          }
          rows_done += b;
          ++batch_in_epoch;
          if (progress) {
            std::lock_guard<std::mutex> lock(s.io_mutex);
            progress->Batch(epoch, batch_in_epoch);
          }
        }
        loss_sum += torch::tensor(sums, torch::TensorOptions().dtype(torch::kFloat64)).to(s.device);
      } else {
        torch::Tensor order_t = torch::from_blob(order.data(), {k, m}, torch::kLong).to(s.device);
        for (std::int64_t start = 0; start < m; start += bs) {
          const std::int64_t b = std::min(bs, m - start);
          torch::Tensor idx = order_t.narrow(1, start, b).reshape({-1});
          std::vector<std::int64_t> xshape{k, b};
          xshape.insert(xshape.end(), s.input_shape.begin(), s.input_shape.end());
          torch::Tensor xb = macro.x.index_select(0, idx).view(xshape);
          torch::Tensor yb = macro.y.index_select(0, idx);
          yb = s.class_ids ? yb.view({k, b}) : yb.view({k, b, -1});
          ctx.training = true;
          torch::Tensor out = model.Forward(xb, ctx);
          torch::Tensor losses = PerReplicaLoss(spec.loss.type, out, yb);
          losses.sum().backward();
          optimizer.Step(lr_k, all_active ? std::optional<double>(lr) : std::nullopt, lr_host);
          loss_sum += losses.detach().to(torch::kFloat64) * static_cast<double>(b);
          rows_done += b;
          ++batch_in_epoch;
          for (std::int64_t r = 0; r < k; ++r) {
            if (active[static_cast<std::size_t>(r)]) ++steps[static_cast<std::size_t>(r)];
          }
          if (log_every > 0 || ck_steps > 0) {
            // Reading the losses waits for the device: only when a callback asks.
            torch::Tensor host = log_every > 0 ? losses.detach().to(torch::kCPU, torch::kFloat64) : torch::Tensor();
            for (std::int64_t r = 0; r < k; ++r) {
              if (!active[static_cast<std::size_t>(r)]) continue;
              if (auto c = after_batch(r, log_every > 0 ? host[r].item<double>() : 0.0, epoch); !c) return c;
            }
          }
          if (progress) {
            std::lock_guard<std::mutex> lock(s.io_mutex);
            progress->Batch(epoch, batch_in_epoch);
          }
        }
      }
      // Per-macrobatch check: a NaN or infinite loss stops the run. One read
      // of the sums from the device serves the check and the callbacks.
      const torch::Tensor host_sum = loss_sum.to(torch::kCPU);
      const auto sum_at = host_sum.accessor<double, 1>();
      for (std::int64_t r = 0; r < k; ++r) {
        if (active[static_cast<std::size_t>(r)] && !std::isfinite(sum_at[r])) {
          return Failure(kExitTrainingFailed,
                         "training failed: the loss of seed " + std::to_string(seeds[static_cast<std::size_t>(r)]) +
                             " became " + (std::isnan(sum_at[r]) ? "NaN" : "infinite") +
                             " in epoch " + std::to_string(epoch) + " (step " +
                             std::to_string(steps[static_cast<std::size_t>(r)]) +
                             "); lower optimizer.lr or check the data");
        }
      }
      // Per-macrobatch callbacks.
      for (std::int64_t r = 0; r < k; ++r) {
        const std::size_t ri = static_cast<std::size_t>(r);
        const double macro_sum = sum_at[r] - macro_base[ri];
        macro_base[ri] = sum_at[r];
        if (!active[ri]) continue;
        if (log_macro) {
          const double mean = macro_sum / static_cast<double>(std::max<std::int64_t>(1, m));
          reps[ri].macrobatch_losses.push_back(mean);
          if (auto w = write(r, "macrobatch_loss", mean, epoch, "train", false); !w) return w;
        }
        if (ck_macros > 0 && macro_count % ck_macros == 0) {
          if (auto c = save_checkpoint(r, "epoch-" + std::to_string(epoch) + "-macro-" +
                                              std::to_string(macro_in_epoch) + ".pt");
              !c) {
            return c;
          }
        }
      }
    }
    if (reader) report.max_macrobatches_alive = std::max(report.max_macrobatches_alive, reader->max_alive());
    reader.reset();

    // End of epoch: metrics and callbacks.
    torch::Tensor train_loss = (loss_sum / static_cast<double>(std::max<std::int64_t>(1, rows_done))).to(torch::kCPU);
    std::vector<std::map<std::string, double>> epoch_metrics(static_cast<std::size_t>(k));
    if (s.validation) {
      epoch_metrics = Evaluate(model, *s.validation, spec, ctx, "val_");
    }
    std::vector<bool> was_active = active;
    for (std::int64_t r = 0; r < k; ++r) {
      const std::size_t ri = static_cast<std::size_t>(r);
      if (!was_active[ri]) continue;
      auto& em = epoch_metrics[ri];
      em["train_loss"] = train_loss[r].item<double>();
      ReplicaReport& rep = reps[ri];
      rep.train_loss.push_back(em["train_loss"]);
      std::map<std::string, double> val;
      for (const auto& [name, v] : em) {
        if (name != "train_loss") val[name] = v;
      }
      rep.validation.push_back(val);
      rep.epochs_run = epoch;
      if (auto w = write(r, "train_loss", em["train_loss"], epoch, "train", false); !w) return w;
      for (const auto& [name, v] : val) {
        if (auto w = write(r, name, v, epoch, "validation", false); !w) return w;
      }
      if (const auto& ck = spec.trainer.checkpointing) {
        if (ck->every > 0 && epoch % ck->every == 0) {
          if (auto c = save_checkpoint(r, "epoch-" + std::to_string(epoch) + ".pt"); !c) return c;
        }
        if (ck->keep_best && !ck->monitor.empty() && em.count(ck->monitor) &&
            improved(em[ck->monitor], ck_best[ri], ck->mode, 0.0)) {
          ck_best[ri] = em[ck->monitor];
          if (auto c = save_checkpoint(r, "best.pt"); !c) return c;
          std::ofstream meta(fs::path(replica_dir(r)) / ck->path / "best.json");
          meta << "{\"metric\":\"" << ck->monitor << "\",\"value\":" << FormatDouble(ck_best[ri], 6)
               << ",\"epoch\":" << epoch << "}\n";
        }
      }
      if (const auto& es = spec.trainer.early_stopping) {
        if (em.count(es->monitor)) {
          if (improved(em[es->monitor], es_best[ri], es->mode, es->min_delta)) {
            es_best[ri] = em[es->monitor];
            es_bad[ri] = 0;
            if (es->restore_best) {
              es_best_state[ri] = replica_state(r);
              es_best_epoch[ri] = epoch;
            }
          } else if (++es_bad[ri] >= es->patience && epoch < epochs) {
            active[ri] = false;
            rep.stopped_early = true;
            // The replica is frozen from here on, so its weights stay the restored ones.
            if (es->restore_best && !es_best_state[ri].empty()) {
              restore_state(r, es_best_state[ri]);
              rep.restored_epoch = es_best_epoch[ri];
              es_best_state[ri].clear();
            }
            const std::string notice = "seed " + std::to_string(seeds[ri]) + ": early stopping after epoch " +
                                       std::to_string(epoch) + " (" + es->monitor + " did not improve for " +
                                       std::to_string(es->patience) + " epochs)" +
                                       (rep.restored_epoch > 0
                                            ? "; restored the weights of epoch " + std::to_string(rep.restored_epoch)
                                            : "");
            report.notices.push_back(notice);
            if (s.messages) {
              std::lock_guard<std::mutex> lock(s.io_mutex);
              s.messages->Message(notice);
            }
          }
        }
      }
    }
    if (progress) {
      std::lock_guard<std::mutex> lock(s.io_mutex);
      std::string summary = FormatSummary(epoch_metrics, was_active);
      if (k > 1) summary = "mean of " + std::to_string(std::count(was_active.begin(), was_active.end(), true)) +
                           " seeds: " + summary;
      progress->EpochEnd(epoch, summary);
    }
    if (std::none_of(active.begin(), active.end(), [](bool a) { return a; })) break;
    if (active != was_active) {
      std::vector<float> mask;
      for (bool a : active) mask.push_back(a ? 1.0f : 0.0f);
      ctx.active = torch::tensor(mask).to(s.device);
    }
  }

  // Final metrics, tagged final: on the test split, else validation, else train.
  const TensorSet* final_set = nullptr;
  std::string final_split;
  if (s.test && s.test->rows > 0) {
    final_set = &*s.test;
    final_split = "test";
  } else if (s.validation && s.validation->rows > 0) {
    final_set = &*s.validation;
    final_split = "validation";
  } else {
    final_split = "train";
  }
  std::optional<TensorSet> train_eval;
  if (final_set == nullptr) {
    if (s.resident_train) {
      final_set = &*s.resident_train;
    } else {
      auto block = ReadRows(s.source, s.split.train, s.norm);
      if (!block) return Failure(kExitDataError, block.error().message);
      train_eval = ToTensors(*block, s.source.feature_count(), s.source.label_count(), s.class_ids, s.device);
      final_set = &*train_eval;
    }
  }
  auto finals = Evaluate(model, *final_set, spec, ctx, "");
  for (std::int64_t r = 0; r < k; ++r) {
    const std::size_t ri = static_cast<std::size_t>(r);
    reps[ri].final_metrics = finals[ri];
    reps[ri].final_split = final_split;
    reps[ri].steps = steps[ri];
    for (const auto& [name, v] : finals[ri]) {
      if (!std::isfinite(v)) {
        return Failure(kExitTrainingFailed, "training failed: the final " + name + " of seed " +
                                                std::to_string(seeds[ri]) + " is not finite");
      }
      if (auto w = write(r, name, v, reps[ri].epochs_run, final_split, true); !w) return w;
    }
    if (s.messages) {
      std::string line = "seed " + std::to_string(seeds[ri]) + ": " + final_split;
      for (const auto& [name, v] : finals[ri]) line += " " + name + " " + FormatDouble(v, 4);
      std::lock_guard<std::mutex> lock(s.io_mutex);
      s.messages->Message(line);
    }
  }
  report.replicas.insert(report.replicas.end(), reps.begin(), reps.end());
  return {};
}

}  // namespace

std::expected<TrainReport, TrainFailure> Train(const Spec& spec, const TrainConfig& config) {
  const auto t0 = Clock::now();
  TrainReport report;
  try {
    // Fused repeats on several threads run single-threaded groups (below).
    const bool replica_threads = config.fuse && config.seeds.size() > 1 && config.threads > 1;
    torch::set_num_threads(replica_threads ? 1 : config.threads);
    torch::Device device(torch::kCPU);
    if (config.device == "cuda" || (config.device == "auto" && torch::cuda::is_available())) {
      if (!torch::cuda::is_available()) {
        return Failure(kExitBadSpec, "--device cuda: this libtorch has no CUDA or no GPU is visible "
                                     "(build against a CUDA libtorch with -DTorch_DIR=...)");
      }
      device = torch::Device(torch::kCUDA);
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
    Shared s{spec, config, device, **source, norm, *split, std::nullopt, std::nullopt, std::nullopt, **metrics,
             class_ids, {(*source)->feature_count()}};
    auto to_tensors = [&](RowBlock& block) {
      TensorSet t = ToTensors(block, (*source)->feature_count(), (*source)->label_count(), class_ids, device);
      block = RowBlock{};  // free the host copy
      return t;
    };
    if (!report.streamed) s.resident_train = to_tensors(blocks->train);
    if (!split->validation.empty()) s.validation = to_tensors(blocks->validation);
    if (!split->test.empty()) s.test = to_tensors(blocks->test);
    if (spec.trainer.checkpointing && config.output_dir.empty()) {
      return Failure(kExitBadSpec, "trainer.callbacks: checkpointing needs an output dir "
                                   "(--output-dir or TRAINQ_OUTPUT_DIR)");
    }

    const auto t1 = Clock::now();
    const std::int64_t batches = (n_train + spec.trainer.batch_size - 1) / spec.trainer.batch_size;
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
