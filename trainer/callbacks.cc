#include "trainer/callbacks.h"

#include <filesystem>
#include <fstream>

#include "core/strings.h"
#include "trainer/exit_codes.h"

namespace trainq::trainer {
namespace {

namespace fs = std::filesystem;

std::unexpected<TrainFailure> Failure(int code, std::string message) {
  return std::unexpected(TrainFailure{code, std::move(message)});
}

}  // namespace

std::vector<torch::Tensor> ReplicaState(const FusedModel& model, std::int64_t r) {
  std::vector<torch::Tensor> state;
  for (const auto& p : model.Parameters()) state.push_back(p[r].detach().clone());
  for (const auto& b : model.Buffers()) state.push_back(b[r].detach().clone());
  return state;
}

void RestoreReplicaState(FusedModel& model, std::int64_t r, const std::vector<torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  std::size_t i = 0;
  for (const auto& p : model.Parameters()) p[r].copy_(state[i++]);
  for (const auto& b : model.Buffers()) b[r].copy_(state[i++]);
}

Done MetricLines::Write(std::int64_t r, const std::string& name, double value, std::int64_t step,
                        std::int64_t epoch, const std::string& split, bool final) {
  MetricLine line{name, value, step, epoch, seeds_[static_cast<std::size_t>(r)], split, final};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = writer_.Write(line, first_repeat_ + r); !st) {
    return Failure(kExitTrainingFailed, st.error().message);
  }
  return {};
}

Checkpointer::Checkpointer(const CheckpointSpec& spec, std::string output_dir,
                           const std::vector<std::uint64_t>& seeds, std::int64_t first_repeat)
    : spec_(spec),
      output_dir_(std::move(output_dir)),
      seeds_(seeds),
      first_repeat_(first_repeat),
      best_(seeds.size(), NAN) {}

std::string Checkpointer::ReplicaDir(std::int64_t r) const {
  std::string dir = ReplicaPath(output_dir_, seeds_[static_cast<std::size_t>(r)], first_repeat_ + r);
  if (seeds_.size() > 1 && output_dir_.find("{seed}") == std::string::npos &&
      output_dir_.find("{repeat}") == std::string::npos) {
    dir = (fs::path(dir) / ("seed-" + std::to_string(seeds_[static_cast<std::size_t>(r)]))).string();
  }
  return dir;
}

Done Checkpointer::Save(const FusedModel& model, std::int64_t r, const std::string& name) const {
  fs::path dir = fs::path(ReplicaDir(r)) / spec_.path;
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
}

Done Checkpointer::AfterStep(const FusedModel& model, std::int64_t r, std::int64_t step) {
  if (spec_.every_batches > 0 && step % spec_.every_batches == 0) {
    return Save(model, r, "step-" + std::to_string(step) + ".pt");
  }
  return {};
}

Done Checkpointer::AfterMacroBatch(const FusedModel& model, std::int64_t r, std::int64_t epoch,
                                   std::int64_t macro_count, std::int64_t macro_in_epoch) {
  if (spec_.every_macrobatches > 0 && macro_count % spec_.every_macrobatches == 0) {
    return Save(model, r, "epoch-" + std::to_string(epoch) + "-macro-" + std::to_string(macro_in_epoch) + ".pt");
  }
  return {};
}

Done Checkpointer::EndEpoch(const FusedModel& model, std::int64_t r, std::int64_t epoch,
                            const std::map<std::string, double>& metrics) {
  const std::size_t ri = static_cast<std::size_t>(r);
  if (spec_.every > 0 && epoch % spec_.every == 0) {
    if (auto c = Save(model, r, "epoch-" + std::to_string(epoch) + ".pt"); !c) return c;
  }
  auto it = metrics.find(spec_.monitor);
  if (spec_.keep_best && !spec_.monitor.empty() && it != metrics.end() &&
      Improved(it->second, best_[ri], spec_.mode, 0.0)) {
    best_[ri] = it->second;
    if (auto c = Save(model, r, "best.pt"); !c) return c;
    std::ofstream meta(fs::path(ReplicaDir(r)) / spec_.path / "best.json");
    meta << "{\"metric\":\"" << spec_.monitor << "\",\"value\":" << FormatDouble(best_[ri], 6)
         << ",\"epoch\":" << epoch << "}\n";
  }
  return {};
}

EarlyStopping::EarlyStopping(const EarlyStoppingSpec& spec, std::int64_t replicas)
    : spec_(spec),
      best_(static_cast<std::size_t>(replicas), NAN),
      bad_(best_.size(), 0),
      best_state_(best_.size()),
      best_epoch_(best_.size(), 0) {}

std::optional<EarlyStopping::Stop> EarlyStopping::EndEpoch(FusedModel& model, std::int64_t r, std::uint64_t seed,
                                                           std::int64_t epoch, std::int64_t epochs,
                                                           const std::map<std::string, double>& metrics) {
  const std::size_t ri = static_cast<std::size_t>(r);
  auto it = metrics.find(spec_.monitor);
  if (it == metrics.end()) return std::nullopt;
  if (Improved(it->second, best_[ri], spec_.mode, spec_.min_delta)) {
    best_[ri] = it->second;
    bad_[ri] = 0;
    if (spec_.restore_best) {
      best_state_[ri] = ReplicaState(model, r);
      best_epoch_[ri] = epoch;
    }
    return std::nullopt;
  }
  if (++bad_[ri] < spec_.patience || epoch >= epochs) return std::nullopt;
  Stop stop;
  // The replica is frozen from here on, so its weights stay the restored ones.
  if (spec_.restore_best && !best_state_[ri].empty()) {
    RestoreReplicaState(model, r, best_state_[ri]);
    stop.restored_epoch = best_epoch_[ri];
    best_state_[ri].clear();
  }
  stop.notice = "seed " + std::to_string(seed) + ": early stopping after epoch " + std::to_string(epoch) + " (" +
                spec_.monitor + " did not improve for " + std::to_string(spec_.patience) + " epochs)" +
                (stop.restored_epoch > 0 ? "; restored the weights of epoch " + std::to_string(stop.restored_epoch)
                                         : "");
  return stop;
}

std::optional<double> LossWindow::Add(std::int64_t r, double loss) {
  const std::size_t ri = static_cast<std::size_t>(r);
  sum_[ri] += loss;
  if (++count_[ri] < every_) return std::nullopt;
  const double mean = sum_[ri] / static_cast<double>(every_);
  sum_[ri] = 0;
  count_[ri] = 0;
  return mean;
}

}  // namespace trainq::trainer
