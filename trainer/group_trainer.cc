#include "trainer/group_trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "core/strings.h"
#include "trainer/cpu_kernels.h"
#include "trainer/exit_codes.h"
#include "trainer/macrobatch.h"
#include "trainer/rng.h"

namespace trainq::trainer {
namespace {

std::unexpected<TrainFailure> Failure(int code, std::string message) {
  return std::unexpected(TrainFailure{code, std::move(message)});
}

// Checks that the model's output fits the loss and the labels.
std::optional<std::string> CheckOutput(const FusedModel& model, const GroupInputs& s) {
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

}  // namespace

std::optional<FastPath> FastPath::TryCreate(const FusedModel& model, const Optimizer& optimizer,
                                            const GroupInputs& in) {
  const Spec& spec = in.spec;
  if (!in.config.fast_path || !in.device.is_cpu() || !in.class_ids || spec.loss.type != "cross_entropy" ||
      in.input_shape.size() != 1 || LoadedSgemm() == nullptr || !optimizer.CpuSlices() ||
      spec.trainer.batch_size >= (1 << 20)) {
    return std::nullopt;
  }
  auto stack = model.DenseStack();
  if (!stack) return std::nullopt;
  auto ok = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
           t.numel() < (std::int64_t{1} << 31);
  };
  FastPath fast;
  std::vector<DenseShape> shapes;
  bool usable = true;
  std::size_t index = 0;
  std::int64_t widest = 1;
  for (const DenseLayer& l : *stack) {
    usable = usable && ok(l.w) && (!l.b.defined() || ok(l.b));
    shapes.push_back(DenseShape{static_cast<int>(l.w.size(1)), static_cast<int>(l.w.size(2)), l.b.defined(), l.relu});
    widest = std::max({widest, l.w.size(1), l.w.size(2)});
    fast.param.push_back(index);
    index += l.b.defined() ? 2 : 1;
  }
  if (!usable || widest * spec.trainer.batch_size >= (std::int64_t{1} << 31)) return std::nullopt;
  fast.step.emplace(shapes, static_cast<int>(spec.trainer.batch_size), LoadedSgemm());
  for (std::int64_t r = 0; r < model.replicas(); ++r) {
    std::vector<DenseWeights> w;
    for (const DenseLayer& l : *stack) {
      const std::int64_t in_dim = l.w.size(1), out = l.w.size(2);
      w.push_back(DenseWeights{l.w.data_ptr<float>() + r * in_dim * out,
                               l.b.defined() ? l.b.data_ptr<float>() + r * out : nullptr});
    }
    fast.weights.push_back(std::move(w));
  }
  return fast;
}

std::expected<std::unique_ptr<GroupTrainer>, TrainFailure> GroupTrainer::Create(
    GroupInputs& in, const std::vector<std::uint64_t>& seeds, std::int64_t first_repeat, Progress* progress,
    TrainReport& report) {
  auto built = FusedModel::Build(in.spec.model, in.input_shape, seeds, in.device);
  if (!built) return Failure(kExitBadSpec, built.error().message);
  if (auto problem = CheckOutput(**built, in)) return Failure(kExitBadSpec, *problem);
  return std::unique_ptr<GroupTrainer>(
      new GroupTrainer(in, seeds, first_repeat, progress, report, std::move(*built)));
}

GroupTrainer::GroupTrainer(GroupInputs& in, const std::vector<std::uint64_t>& seeds, std::int64_t first_repeat,
                           Progress* progress, TrainReport& report, std::unique_ptr<FusedModel> model)
    : in_(in),
      spec_(in.spec),
      seeds_(seeds),
      k_(static_cast<std::int64_t>(seeds.size())),
      progress_(progress),
      report_(report),
      model_(std::move(model)),
      reps_(seeds.size()),
      optimizer_(spec_.optimizer, model_->Parameters()),
      active_(seeds.size(), true),
      steps_(seeds.size(), 0),
      lines_(in.metrics, in.io_mutex, seeds, first_repeat) {
  for (std::int64_t r = 0; r < k_; ++r) reps_[static_cast<std::size_t>(r)].seed = seeds_[static_cast<std::size_t>(r)];
  if (in_.config.record_details) {
    for (const auto& p : model_->Parameters()) {
      for (std::int64_t r = 0; r < k_; ++r) {
        torch::Tensor flat = p[r].detach().to(torch::kCPU).contiguous().view(-1);
        auto& dst = reps_[static_cast<std::size_t>(r)].initial_parameters;
        dst.insert(dst.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
      }
    }
  }
  // Ranks of a distributed run share the shuffle stream (they agree on the
  // order of the rows) but draw their own dropout masks.
  const int rank = in_.comm ? in_.comm->rank() : 0;
  for (std::uint64_t seed : seeds_) {
    const std::uint64_t dropout = DeriveSeed(seed, kStreamDropout);
    dropout_gens_.push_back(at::make_generator<at::CPUGeneratorImpl>(
        rank == 0 ? dropout : DeriveSeed(dropout, static_cast<std::uint64_t>(rank))));
    shuffle_gens_.emplace_back(DeriveSeed(seed, kStreamShuffle));
  }
  if (in_.comm) dp_ = std::make_unique<DataParallel>(*in_.comm, *spec_.distributed, *model_, spec_.trainer.epochs);
  fast_ = FastPath::TryCreate(*model_, optimizer_, in_);
  report_.fast_path = fast_.has_value();
  ctx_.dropout_generators = &dropout_gens_;
  ctx_.active = torch::ones({k_}, torch::TensorOptions().device(in_.device));

  const TrainerSpec& t = spec_.trainer;
  if (t.checkpointing && lead()) checkpointer_.emplace(*t.checkpointing, in_.config.output_dir, seeds_, first_repeat);
  if (t.early_stopping) early_stopping_.emplace(*t.early_stopping, k_);
  if (t.loss_logging && t.loss_logging->every_batches > 0) loss_window_.emplace(t.loss_logging->every_batches, k_);
  log_macro_ = t.loss_logging && t.loss_logging->macrobatches;
  per_batch_callbacks_ = loss_window_.has_value() || (t.checkpointing && t.checkpointing->every_batches > 0);
}

Done GroupTrainer::Write(std::int64_t r, const std::string& name, double value, std::int64_t epoch,
                         const std::string& split, bool final) {
  return lines_.Write(r, name, value, steps_[static_cast<std::size_t>(r)], epoch, split, final);
}

void GroupTrainer::BatchProgress(std::int64_t epoch) {
  if (!progress_) return;
  std::lock_guard<std::mutex> lock(in_.io_mutex);
  progress_->Batch(epoch, batch_in_epoch_);
}

Done GroupTrainer::Run() {
  for (std::int64_t epoch = 1; epoch <= spec_.trainer.epochs; ++epoch) {
    if (auto t = TrainEpoch(epoch); !t) return t;
    auto go_on = EndEpoch(epoch);
    if (!go_on) return std::unexpected(go_on.error());
    if (!*go_on) break;
  }
  return Finish();
}

std::vector<std::int64_t> GroupTrainer::ShuffleOrder(std::int64_t m) {
  if (dp_ && !dp_->gradient_sync()) return dp_->Shard(m, spec_.trainer.shuffle, shuffle_gens_[0]);
  std::vector<std::int64_t> order(static_cast<std::size_t>(k_ * m));
  for (std::int64_t r = 0; r < k_; ++r) {
    std::vector<std::int64_t> perm(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < m; ++i) perm[static_cast<std::size_t>(i)] = i;
    if (spec_.trainer.shuffle) Shuffle(perm, shuffle_gens_[static_cast<std::size_t>(r)]);
    std::copy(perm.begin(), perm.end(), order.begin() + r * m);
  }
  return order;
}

Done GroupTrainer::TrainEpoch(std::int64_t epoch) {
  lr_ = LearningRate(spec_.optimizer, epoch - 1, spec_.trainer.epochs);
  lr_k_ = ctx_.active * lr_;
  lr_host_.clear();
  for (bool a : active_) lr_host_.push_back(a ? static_cast<float>(lr_) : 0.0f);
  loss_sum_ = torch::zeros({k_}, torch::TensorOptions().device(in_.device).dtype(torch::kFloat64));
  rows_done_ = 0;
  batch_in_epoch_ = 0;
  macro_in_epoch_ = 0;
  macro_base_.assign(static_cast<std::size_t>(k_), 0.0);
  if (in_.config.record_details) report_.rows_seen.emplace_back();

  std::optional<MacroBatchReader> reader;
  if (!in_.resident_train) {
    reader.emplace(in_.source, in_.norm,
                   PlanMacroBatches(in_.split.train, spec_.trainer.macro_batch_size, spec_.data.split.split_seed,
                                    epoch, spec_.trainer.shuffle, spec_.trainer.shuffle_blocks));
  }
  MacroBatch mb;
  bool first = true;
  while (true) {
    TensorSet macro;
    const std::vector<std::int64_t>* macro_rows = &in_.split.train;
    if (reader) {
      auto more = reader->Next(&mb);
      if (!more) return Failure(kExitDataError, more.error().message);
      if (!*more) break;
      macro = ToTensors(mb.block, in_.source.feature_count(), in_.source.label_count(), in_.class_ids, in_.device);
      macro_rows = &mb.rows;
    } else {
      if (!first) break;
      macro = *in_.resident_train;
    }
    first = false;
    const std::int64_t m = macro.rows;
    ++macro_in_epoch_;
    ++macro_count_;
    const std::vector<std::int64_t> order = ShuffleOrder(m);
    if (in_.config.record_details) {
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(order.size()) / k_; ++i) {
        report_.rows_seen.back().push_back((*macro_rows)[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])]);
      }
    }
    const std::int64_t rows_before = rows_done_;
    Done trained;
    if (dp_ && dp_->gradient_sync()) {
      trained = fast_ ? TrainMacroBatchFastSynced(macro, order, epoch) : TrainMacroBatchTorchSynced(macro, order, epoch);
    } else {
      trained = fast_ ? TrainMacroBatchFast(macro, order, epoch) : TrainMacroBatchTorch(macro, order, epoch);
    }
    if (!trained) return trained;
    if (auto c = AfterMacroBatch(epoch, rows_done_ - rows_before); !c) return c;
  }
  if (reader) report_.max_macrobatches_alive = std::max(report_.max_macrobatches_alive, reader->max_alive());
  return {};
}

Done GroupTrainer::TrainMacroBatchFast(const TensorSet& macro, const std::vector<std::int64_t>& order,
                                       std::int64_t epoch) {
  // A rank of a distributed run trains its shard: `order` may hold fewer than macro.rows rows.
  const std::int64_t m = static_cast<std::int64_t>(order.size()) / k_, bs = spec_.trainer.batch_size;
  const torch::Tensor xs = macro.x.contiguous(), ys = macro.y.contiguous();
  const float* xd = xs.data_ptr<float>();
  const std::int64_t* yd = ys.data_ptr<std::int64_t>();
  std::vector<double> sums(static_cast<std::size_t>(k_), 0.0);
  for (std::int64_t start = 0; start < m; start += bs) {
    const std::int64_t b = std::min(bs, m - start);
    optimizer_.BeginStep();
    for (std::int64_t r = 0; r < k_; ++r) {
      const std::size_t ri = static_cast<std::size_t>(r);
      if (!active_[ri]) continue;  // frozen: its weights stay as they are
      const float rate = lr_host_[ri];
      const float loss = fast_->step->Step(fast_->weights[ri], xd, yd, order.data() + r * m + start,
                                           static_cast<int>(b), [&](int layer, const float* gw, const float* gb) {
                                             const std::size_t i = fast_->param[static_cast<std::size_t>(layer)];
                                             optimizer_.UpdateSlice(i, r, gw, rate);
                                             if (gb != nullptr) optimizer_.UpdateSlice(i + 1, r, gb, rate);
                                           });
      sums[ri] += static_cast<double>(loss) * static_cast<double>(b);
      ++steps_[ri];
      if (auto c = AfterBatch(r, loss, epoch); !c) return c;
    }
    rows_done_ += b;
    ++batch_in_epoch_;
    BatchProgress(epoch);
  }
  loss_sum_ += torch::tensor(sums, torch::TensorOptions().dtype(torch::kFloat64)).to(in_.device);
  return {};
}

Done GroupTrainer::TrainMacroBatchTorch(const TensorSet& macro, const std::vector<std::int64_t>& order,
                                        std::int64_t epoch) {
  const std::int64_t m = static_cast<std::int64_t>(order.size()) / k_, bs = spec_.trainer.batch_size;
  const bool all_active = std::all_of(active_.begin(), active_.end(), [](bool a) { return a; });
  const bool log_every = loss_window_.has_value();
  std::vector<std::int64_t> order_copy = order;  // from_blob needs a mutable pointer
  torch::Tensor order_t = torch::from_blob(order_copy.data(), {k_, m}, torch::kLong).to(in_.device);
  for (std::int64_t start = 0; start < m; start += bs) {
    const std::int64_t b = std::min(bs, m - start);
    torch::Tensor idx = order_t.narrow(1, start, b).reshape({-1});
    std::vector<std::int64_t> xshape{k_, b};
    xshape.insert(xshape.end(), in_.input_shape.begin(), in_.input_shape.end());
    torch::Tensor xb = macro.x.index_select(0, idx).view(xshape);
    torch::Tensor yb = macro.y.index_select(0, idx);
    yb = in_.class_ids ? yb.view({k_, b}) : yb.view({k_, b, -1});
    ctx_.training = true;
    torch::Tensor out = model_->Forward(xb, ctx_);
    torch::Tensor losses = PerReplicaLoss(spec_.loss.type, out, yb);
    losses.sum().backward();
    optimizer_.Step(lr_k_, all_active ? std::optional<double>(lr_) : std::nullopt, lr_host_);
    loss_sum_ += losses.detach().to(torch::kFloat64) * static_cast<double>(b);
    rows_done_ += b;
    ++batch_in_epoch_;
    for (std::int64_t r = 0; r < k_; ++r) {
      if (active_[static_cast<std::size_t>(r)]) ++steps_[static_cast<std::size_t>(r)];
    }
    if (per_batch_callbacks_) {
      // Reading the losses waits for the device: only when a callback asks.
      torch::Tensor host = log_every ? losses.detach().to(torch::kCPU, torch::kFloat64) : torch::Tensor();
      for (std::int64_t r = 0; r < k_; ++r) {
        if (!active_[static_cast<std::size_t>(r)]) continue;
        if (auto c = AfterBatch(r, log_every ? host[r].item<double>() : 0.0, epoch); !c) return c;
      }
    }
    BatchProgress(epoch);
  }
  return {};
}

Done GroupTrainer::TrainMacroBatchFastSynced(const TensorSet& macro, const std::vector<std::int64_t>& order,
                                             std::int64_t epoch) {
  // One replica (k_ == 1). Each step: this rank's part of the global batch
  // through the fast path with its gradients collected (not applied), the
  // sum over the ranks, then the same update on every rank.
  const std::int64_t m = macro.rows, bs = spec_.trainer.batch_size;
  const torch::Tensor xs = macro.x.contiguous(), ys = macro.y.contiguous();
  const float* xd = xs.data_ptr<float>();
  const std::int64_t* yd = ys.data_ptr<std::int64_t>();
  const std::vector<torch::Tensor> params = model_->Parameters();
  std::vector<std::int64_t> offset(params.size() + 1, 0);
  for (std::size_t i = 0; i < params.size(); ++i) offset[i + 1] = offset[i] + params[i].numel();
  std::vector<float> grads(static_cast<std::size_t>(offset.back()));
  double sum = 0;
  for (std::int64_t start = 0; start < m; start += bs) {
    const std::int64_t b = std::min(bs, m - start);
    const auto [lo, hi] = dp_->BatchSlice(b);
    optimizer_.BeginStep();
    float loss = 0;
    if (hi > lo) {
      loss = fast_->step->Step(fast_->weights[0], xd, yd, order.data() + start + lo, static_cast<int>(hi - lo),
                               [&](int layer, const float* gw, const float* gb) {
                                 const std::size_t i = fast_->param[static_cast<std::size_t>(layer)];
                                 std::copy(gw, gw + params[i].numel(), grads.data() + offset[i]);
                                 if (gb != nullptr) {
                                   std::copy(gb, gb + params[i + 1].numel(), grads.data() + offset[i + 1]);
                                 }
                               });
    }
    if (auto st = dp_->SumGradients(grads.data(), offset.back(), hi - lo, b); !st) {
      return Failure(kExitDistributed, "distributed: " + st.error().message);
    }
    if (active_[0]) {
      for (std::size_t i = 0; i < params.size(); ++i) optimizer_.UpdateSlice(i, 0, grads.data() + offset[i], lr_host_[0]);
    }
    sum += static_cast<double>(loss) * static_cast<double>(hi - lo);
    ++steps_[0];
    if (auto c = AfterBatch(0, loss, epoch); !c) return c;
    rows_done_ += hi - lo;
    ++batch_in_epoch_;
    BatchProgress(epoch);
  }
  loss_sum_ += torch::tensor(std::vector<double>{sum}, torch::TensorOptions().dtype(torch::kFloat64)).to(in_.device);
  return {};
}

Done GroupTrainer::TrainMacroBatchTorchSynced(const TensorSet& macro, const std::vector<std::int64_t>& order,
                                              std::int64_t epoch) {
  const std::int64_t m = macro.rows, bs = spec_.trainer.batch_size;
  std::vector<std::int64_t> order_copy = order;
  torch::Tensor order_t = torch::from_blob(order_copy.data(), {1, m}, torch::kLong).to(in_.device);
  const std::vector<torch::Tensor> params = model_->Parameters();
  std::int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<float> grads(static_cast<std::size_t>(total));
  for (std::int64_t start = 0; start < m; start += bs) {
    const std::int64_t b = std::min(bs, m - start);
    const auto [lo, hi] = dp_->BatchSlice(b);
    double loss = 0;
    std::fill(grads.begin(), grads.end(), 0.0f);
    if (hi > lo) {
      torch::Tensor idx = order_t.narrow(1, start + lo, hi - lo).reshape({-1});
      std::vector<std::int64_t> xshape{1, hi - lo};
      xshape.insert(xshape.end(), in_.input_shape.begin(), in_.input_shape.end());
      torch::Tensor xb = macro.x.index_select(0, idx).view(xshape);
      torch::Tensor yb = macro.y.index_select(0, idx);
      yb = in_.class_ids ? yb.view({1, hi - lo}) : yb.view({1, hi - lo, -1});
      ctx_.training = true;
      torch::Tensor losses = PerReplicaLoss(spec_.loss.type, model_->Forward(xb, ctx_), yb);
      losses.sum().backward();
      loss = losses.detach().to(torch::kCPU, torch::kFloat64).item<double>();
      std::int64_t off = 0;
      for (const auto& p : params) {
        if (p.grad().defined()) {
          torch::Tensor g = p.grad().detach().to(torch::kCPU).contiguous();
          std::copy(g.data_ptr<float>(), g.data_ptr<float>() + g.numel(), grads.data() + off);
        }
        off += p.numel();
      }
    }
    if (auto st = dp_->SumGradients(grads.data(), total, hi - lo, b); !st) {
      return Failure(kExitDistributed, "distributed: " + st.error().message);
    }
    {
      torch::NoGradGuard no_grad;
      std::int64_t off = 0;
      for (const auto& p : params) {
        torch::Tensor g = torch::from_blob(grads.data() + off, p.sizes(), torch::kFloat32).to(p.device()).clone();
        p.mutable_grad() = g;
        off += p.numel();
      }
    }
    optimizer_.Step(lr_k_, active_[0] ? std::optional<double>(lr_) : std::nullopt, lr_host_);
    loss_sum_ += torch::tensor(std::vector<double>{loss * static_cast<double>(hi - lo)},
                               torch::TensorOptions().dtype(torch::kFloat64))
                     .to(in_.device);
    rows_done_ += hi - lo;
    ++batch_in_epoch_;
    if (active_[0]) ++steps_[0];
    if (per_batch_callbacks_ && active_[0]) {
      if (auto c = AfterBatch(0, loss, epoch); !c) return c;
    }
    BatchProgress(epoch);
  }
  return {};
}

Done GroupTrainer::AfterBatch(std::int64_t r, double loss, std::int64_t epoch) {
  const std::size_t ri = static_cast<std::size_t>(r);
  const std::int64_t step = steps_[ri];
  if (loss_window_) {
    if (auto mean = loss_window_->Add(r, loss)) {
      reps_[ri].batch_losses.emplace_back(step, *mean);
      if (auto w = Write(r, "batch_loss", *mean, epoch, "train", false); !w) return w;
    }
  }
  if (checkpointer_) return checkpointer_->AfterStep(*model_, r, step);
  return {};
}

Done GroupTrainer::AfterMacroBatch(std::int64_t epoch, std::int64_t m) {
  // A NaN or infinite loss stops the run. One read of the sums from the
  // device serves the check and the callbacks.
  const torch::Tensor host_sum = loss_sum_.to(torch::kCPU);
  const auto sum_at = host_sum.accessor<double, 1>();
  for (std::int64_t r = 0; r < k_; ++r) {
    if (active_[static_cast<std::size_t>(r)] && !std::isfinite(sum_at[r])) {
      return Failure(kExitTrainingFailed,
                     "training failed: the loss of seed " + std::to_string(seeds_[static_cast<std::size_t>(r)]) +
                         " became " + (std::isnan(sum_at[r]) ? "NaN" : "infinite") + " in epoch " +
                         std::to_string(epoch) + " (step " + std::to_string(steps_[static_cast<std::size_t>(r)]) +
                         "); lower optimizer.lr or check the data");
    }
  }
  for (std::int64_t r = 0; r < k_; ++r) {
    const std::size_t ri = static_cast<std::size_t>(r);
    const double macro_sum = sum_at[r] - macro_base_[ri];
    macro_base_[ri] = sum_at[r];
    if (!active_[ri]) continue;
    if (log_macro_) {
      const double mean = macro_sum / static_cast<double>(std::max<std::int64_t>(1, m));
      reps_[ri].macrobatch_losses.push_back(mean);
      if (auto w = Write(r, "macrobatch_loss", mean, epoch, "train", false); !w) return w;
    }
    if (checkpointer_) {
      if (auto c = checkpointer_->AfterMacroBatch(*model_, r, epoch, macro_count_, macro_in_epoch_); !c) return c;
    }
  }
  return {};
}

std::expected<bool, TrainFailure> GroupTrainer::EndEpoch(std::int64_t epoch) {
  std::optional<CommStats> comm;
  if (dp_) {
    // The ranks' loss sums (and, by mode, weights or batchnorm statistics).
    double loss = loss_sum_.to(torch::kCPU)[0].item<double>(), rows = static_cast<double>(rows_done_);
    if (auto st = dp_->EndEpoch(epoch, &loss, &rows); !st) {
      return Failure(kExitDistributed, "distributed: " + st.error().message);
    }
    loss_sum_ = torch::full({1}, loss, torch::TensorOptions().dtype(torch::kFloat64));
    rows_done_ = static_cast<std::int64_t>(std::llround(rows));
    comm = dp_->TakeEpochStats();
  }
  torch::Tensor train_loss = (loss_sum_ / static_cast<double>(std::max<std::int64_t>(1, rows_done_))).to(torch::kCPU);
  std::vector<std::map<std::string, double>> epoch_metrics(static_cast<std::size_t>(k_));
  if (in_.validation && lead()) epoch_metrics = Evaluate(*model_, *in_.validation, spec_, ctx_, "val_");
  const std::vector<bool> was_active = active_;
  for (std::int64_t r = 0; r < k_; ++r) {
    const std::size_t ri = static_cast<std::size_t>(r);
    if (!was_active[ri]) continue;
    auto& em = epoch_metrics[ri];
    em["train_loss"] = train_loss[r].item<double>();
    ReplicaReport& rep = reps_[ri];
    rep.train_loss.push_back(em["train_loss"]);
    std::map<std::string, double> val;
    for (const auto& [name, v] : em) {
      if (name != "train_loss") val[name] = v;
    }
    rep.validation.push_back(val);
    rep.epochs_run = epoch;
    if (auto w = Write(r, "train_loss", em["train_loss"], epoch, "train", false); !w) return std::unexpected(w.error());
    for (const auto& [name, v] : val) {
      if (auto w = Write(r, name, v, epoch, "validation", false); !w) return std::unexpected(w.error());
    }
    if (checkpointer_) {
      if (auto c = checkpointer_->EndEpoch(*model_, r, epoch, em); !c) return std::unexpected(c.error());
    }
    if (comm) {
      if (auto w = Write(r, "dist_bytes_sent", static_cast<double>(comm->bytes_sent), epoch, "train", false); !w) {
        return std::unexpected(w.error());
      }
      if (auto w = Write(r, "dist_comm_seconds", comm->seconds, epoch, "train", false); !w) {
        return std::unexpected(w.error());
      }
    }
    if (early_stopping_ && dp_) {
      // Rank 0 decides (it alone evaluates) and tells the others.
      std::optional<EarlyStopping::Stop> stop;
      if (lead()) stop = early_stopping_->EndEpoch(*model_, r, seeds_[ri], epoch, spec_.trainer.epochs, em);
      auto agreed = dp_->AgreeStop(stop.has_value());
      if (!agreed) return Failure(kExitDistributed, "distributed: " + agreed.error().message);
      if (*agreed) {
        active_[ri] = false;
        rep.stopped_early = true;
        if (stop) {
          rep.restored_epoch = stop->restored_epoch;
          report_.notices.push_back(stop->notice);
          if (in_.messages) {
            std::lock_guard<std::mutex> lock(in_.io_mutex);
            in_.messages->Message(stop->notice);
          }
        }
      }
    } else if (early_stopping_) {
      if (auto stop = early_stopping_->EndEpoch(*model_, r, seeds_[ri], epoch, spec_.trainer.epochs, em)) {
        active_[ri] = false;
        rep.stopped_early = true;
        rep.restored_epoch = stop->restored_epoch;
        report_.notices.push_back(stop->notice);
        if (in_.messages) {
          std::lock_guard<std::mutex> lock(in_.io_mutex);
          in_.messages->Message(stop->notice);
        }
      }
    }
  }
  if (progress_) {
    std::lock_guard<std::mutex> lock(in_.io_mutex);
    std::string summary = FormatSummary(epoch_metrics, was_active);
    if (k_ > 1) {
      summary = "mean of " + std::to_string(std::count(was_active.begin(), was_active.end(), true)) +
                " seeds: " + summary;
    }
    progress_->EpochEnd(epoch, summary);
  }
  if (std::none_of(active_.begin(), active_.end(), [](bool a) { return a; })) return false;
  if (active_ != was_active) {
    std::vector<float> mask;
    for (bool a : active_) mask.push_back(a ? 1.0f : 0.0f);
    ctx_.active = torch::tensor(mask).to(in_.device);
  }
  return true;
}

Done GroupTrainer::Finish() {
  if (dp_) {
    if (auto st = dp_->Finish(); !st) return Failure(kExitDistributed, "distributed: " + st.error().message);
    if (!lead()) return {};  // rank 0 evaluates and reports
    // The run's totals: in the asynchronous modes a merge can come after rank
    // 0's last epoch line, and the final mean comes after every epoch.
    const CommStats total = dp_->TotalStats();
    const std::int64_t epoch = reps_[0].epochs_run;
    if (auto w = Write(0, "dist_bytes_sent_total", static_cast<double>(total.bytes_sent), epoch, "train", false); !w) {
      return w;
    }
    if (auto w = Write(0, "dist_comm_seconds_total", total.seconds, epoch, "train", false); !w) return w;
  }
  const TensorSet* final_set = nullptr;
  std::string final_split;
  if (in_.test && in_.test->rows > 0) {
    final_set = &*in_.test;
    final_split = "test";
  } else if (in_.validation && in_.validation->rows > 0) {
    final_set = &*in_.validation;
    final_split = "validation";
  } else {
    final_split = "train";
  }
  std::optional<TensorSet> train_eval;
  if (final_set == nullptr) {
    if (in_.resident_train) {
      final_set = &*in_.resident_train;
    } else {
      auto block = ReadRows(in_.source, in_.split.train, in_.norm);
      if (!block) return Failure(kExitDataError, block.error().message);
      train_eval = ToTensors(*block, in_.source.feature_count(), in_.source.label_count(), in_.class_ids, in_.device);
      final_set = &*train_eval;
    }
  }
  auto finals = Evaluate(*model_, *final_set, spec_, ctx_, "");
  for (std::int64_t r = 0; r < k_; ++r) {
    const std::size_t ri = static_cast<std::size_t>(r);
    reps_[ri].final_metrics = finals[ri];
    reps_[ri].final_split = final_split;
    reps_[ri].steps = steps_[ri];
    for (const auto& [name, v] : finals[ri]) {
      if (!std::isfinite(v)) {
        return Failure(kExitTrainingFailed, "training failed: the final " + name + " of seed " +
                                                std::to_string(seeds_[ri]) + " is not finite");
      }
      if (auto w = Write(r, name, v, reps_[ri].epochs_run, final_split, true); !w) return w;
    }
    // How many examples the final metrics were scored on: trainq shows the
    // test-set noise floor sqrt(p(1-p)/n) beside the seed sd from it
    // (docs/STATISTICS.md). Not `final`: it is no metric to compare.
    if (auto w = Write(r, "eval_examples", static_cast<double>(final_set->rows),
                       reps_[ri].epochs_run, final_split, false);
        !w) {
      return w;
    }
    if (in_.messages) {
      std::string line = "seed " + std::to_string(seeds_[ri]) + ": " + final_split;
      for (const auto& [name, v] : finals[ri]) line += " " + name + " " + FormatDouble(v, 4);
      std::lock_guard<std::mutex> lock(in_.io_mutex);
      in_.messages->Message(line);
    }
  }
  report_.replicas.insert(report_.replicas.end(), reps_.begin(), reps_.end());
  return {};
}

}  // namespace trainq::trainer
