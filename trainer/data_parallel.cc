#include "trainer/data_parallel.h"

#include <numeric>

#include "trainer/rng.h"

namespace trainq::trainer {
namespace {

constexpr int kMergeRequest = 11;  // a rank's weights to rank 0
constexpr int kMergeReply = 12;    // the general model back

// Epochs after which the weights modes merge (partially_asynchronous,
// asynchronous) with the general model.
bool MergeEpoch(const DistributedSpec& spec, std::int64_t epoch) {
  if (spec.mode == "synchronous") return false;
  return spec.every_n_epochs > 0 && epoch % spec.every_n_epochs == 0;
}

}  // namespace

DataParallel::DataParallel(Collective& comm, const DistributedSpec& spec, FusedModel& model, std::int64_t epochs)
    : comm_(comm), spec_(spec), model_(model), epochs_(epochs), last_(comm.stats()) {
  if (spec_.mode != "synchronous") {
    general_ = Flatten();  // the initial weights: the same on every rank
    std::int64_t merges = 0;
    for (std::int64_t e = 1; e <= epochs_; ++e) merges += MergeEpoch(spec_, e) ? comm_.size() - 1 : 0;
    if (rank() == 0 && merges > 0) server_ = std::thread([this, merges] { Serve(merges); });
  }
}

DataParallel::~DataParallel() {
  // On a failure elsewhere the server may wait for merges that never come:
  // the process exits without joining it (trainq-train exits right after).
  if (server_.joinable()) server_.detach();
}

std::vector<torch::Tensor> DataParallel::State() const {
  std::vector<torch::Tensor> state = model_.Parameters();
  for (const auto& b : model_.Buffers()) state.push_back(b);
  return state;
}

std::vector<float> DataParallel::Flatten() const {
  std::vector<float> flat;
  for (const auto& t : State()) {
    torch::Tensor c = t.detach().to(torch::kCPU).to(torch::kFloat32).contiguous();
    flat.insert(flat.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return flat;
}

void DataParallel::Unflatten(const std::vector<float>& flat) {
  torch::NoGradGuard no_grad;
  std::size_t offset = 0;
  for (auto& t : State()) {
    const std::int64_t n = t.numel();
    torch::Tensor src = torch::from_blob(const_cast<float*>(flat.data() + offset), t.sizes(), torch::kFloat32);
    t.copy_(src);
    offset += static_cast<std::size_t>(n);
  }
}

std::vector<std::int64_t> DataParallel::Shard(std::int64_t m, bool shuffle, std::mt19937_64& gen) const {
  const std::int64_t w = size(), r = rank();
  std::vector<std::int64_t> out;
  const std::string mode = shuffle ? spec_.shuffle : "none";
  if (mode == "total") {
    // One permutation of all rows (the same on every rank), dealt round-robin.
    std::vector<std::int64_t> perm(static_cast<std::size_t>(m));
    std::iota(perm.begin(), perm.end(), 0);
    Shuffle(perm, gen);
    for (std::int64_t i = r; i < m; i += w) out.push_back(perm[static_cast<std::size_t>(i)]);
    return out;
  }
  // W blocks of consecutive rows; blocks: dealt in a new order each epoch;
  // within_blocks: rows shuffled inside each block; both; none.
  std::vector<std::int64_t> block(static_cast<std::size_t>(w));
  std::iota(block.begin(), block.end(), 0);
  if (mode == "blocks" || mode == "both") Shuffle(block, gen);
  for (std::int64_t j = 0; j < w; ++j) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = m * j / w; i < m * (j + 1) / w; ++i) rows.push_back(i);
    // Every rank shuffles every block, so that the stream stays the same everywhere.
    if (mode == "within_blocks" || mode == "both") Shuffle(rows, gen);
    if (j == block[static_cast<std::size_t>(r)]) out = std::move(rows);
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> DataParallel::BatchSlice(std::int64_t b) const {
  return {b * rank() / size(), b * (rank() + 1) / size()};
}

Status DataParallel::SumGradients(float* grads, std::int64_t n, std::int64_t local, std::int64_t global) {
  const float scale = static_cast<float>(local) / static_cast<float>(global);
  for (std::int64_t i = 0; i < n; ++i) grads[i] = local > 0 ? grads[i] * scale : 0.0f;
  return comm_.AllReduceSum(grads, n);
}

Status DataParallel::AverageWeights() {
  std::vector<float> flat = Flatten();
  TRY(comm_.AllReduceSum(flat.data(), static_cast<std::int64_t>(flat.size())));
  const float inv = 1.0f / static_cast<float>(size());
  for (float& v : flat) v *= inv;
  Unflatten(flat);
  return {};
}

Status DataParallel::EndEpoch(std::int64_t epoch, double* loss_sum, double* rows) {
  if (spec_.GradientSync()) {
    // The loss sums and the batchnorm statistics in one all-reduce.
    std::vector<double> buf{*loss_sum, *rows};
    std::vector<torch::Tensor> buffers = model_.Buffers();
    for (const auto& b : buffers) {
      torch::Tensor c = b.detach().to(torch::kCPU).to(torch::kFloat64).contiguous();
      buf.insert(buf.end(), c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    }
    TRY(comm_.AllReduceSum(buf.data(), static_cast<std::int64_t>(buf.size())));
    *loss_sum = buf[0];
    *rows = buf[1];
    torch::NoGradGuard no_grad;
    std::size_t offset = 2;
    for (auto& b : buffers) {
      torch::Tensor mean = torch::from_blob(buf.data() + offset, b.sizes(), torch::kFloat64) /
                           static_cast<double>(size());
      b.copy_(mean);
      offset += static_cast<std::size_t>(b.numel());
    }
    return {};
  }
  if (spec_.mode == "synchronous") {
    if (epoch % spec_.every_n_epochs != 0 && epoch != epochs_) return {};
    TRY(AverageWeights());
    double buf[2] = {*loss_sum, *rows};
    TRY(comm_.AllReduceSum(buf, 2));
    *loss_sum = buf[0];
    *rows = buf[1];
    return {};
  }
  if (rank() == 0) {
    std::lock_guard<std::mutex> lock(general_mu_);
    if (!server_status_) return server_status_;
  }
  if (MergeEpoch(spec_, epoch)) TRY(Merge());
  return {};
}

Status DataParallel::Merge() {
  std::vector<float> own = Flatten();
  if (rank() == 0) {
    std::lock_guard<std::mutex> lock(general_mu_);
    for (std::size_t i = 0; i < own.size(); ++i) general_[i] = 0.5f * (general_[i] + own[i]);
    own = general_;
  } else {
    TRY(comm_.Send(own.data(), static_cast<std::int64_t>(own.size()), 0, kMergeRequest));
    TRY(comm_.Recv(own.data(), static_cast<std::int64_t>(own.size()), 0, kMergeReply));
  }
  Unflatten(own);
  return {};
}

void DataParallel::Serve(std::int64_t merges) {
  std::vector<float> incoming(general_.size()), reply;
  for (std::int64_t i = 0; i < merges; ++i) {
    auto from = comm_.RecvAny(incoming.data(), static_cast<std::int64_t>(incoming.size()), kMergeRequest);
    if (!from) {
      std::lock_guard<std::mutex> lock(general_mu_);
      server_status_ = std::unexpected(from.error());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(general_mu_);
      for (std::size_t j = 0; j < incoming.size(); ++j) general_[j] = 0.5f * (general_[j] + incoming[j]);
      reply = general_;
    }
    if (auto st = comm_.Send(reply.data(), static_cast<std::int64_t>(reply.size()), *from, kMergeReply); !st) {
      std::lock_guard<std::mutex> lock(general_mu_);
      server_status_ = st;
      return;
    }
  }
}

Result<bool> DataParallel::AgreeStop(bool stop) {
  float flag = stop ? 1.0f : 0.0f;
  TRY(comm_.Broadcast(&flag, 1, 0));
  return flag != 0.0f;
}

Status DataParallel::Finish() {
  if (spec_.mode == "synchronous") return {};  // gradients: one model; weights: averaged after the last epoch
  if (server_.joinable()) server_.join();
  {
    std::lock_guard<std::mutex> lock(general_mu_);
    if (!server_status_) return server_status_;
  }
  return AverageWeights();
}

CommStats DataParallel::TakeEpochStats() {
  const CommStats now = comm_.stats();
  CommStats delta{now.bytes_sent - last_.bytes_sent, now.calls - last_.calls, now.seconds - last_.seconds};
  last_ = now;
  return delta;
}

}  // namespace trainq::trainer
