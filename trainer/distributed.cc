// The only file that calls c10d (ProcessGroupGloo, FileStore, TCPStore): that
// API is internal to libtorch and changed after 1.13 (2.x splits
// ProcessGroup and Backend). Debian's libtorch defines USE_C10D_GLOO for its
// users; without the header (another libtorch build) ConnectGloo says so.
#include "trainer/distributed.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#if __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>) && defined(USE_C10D_GLOO)
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#define TRAINQ_HAVE_GLOO 1
#endif

namespace trainq::trainer {

#ifdef TRAINQ_HAVE_GLOO
namespace {

// Bytes this process has written so far (sockets included): /proc/self/io wchar.
std::int64_t WrittenBytes() {
  std::FILE* f = std::fopen("/proc/self/io", "r");
  if (f == nullptr) return 0;
  char key[64];
  long long value = 0;
  std::int64_t out = 0;
  while (std::fscanf(f, "%63s %lld", key, &value) == 2) {
    if (std::string(key) == "wchar:") out = value;
  }
  std::fclose(f);
  return out;
}

Status Void(const Result<int>& r) {
  if (!r) return std::unexpected(r.error());
  return {};
}

class GlooCollective : public Collective {
 public:
  GlooCollective(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::ProcessGroupGloo> group,
                 int rank, int size)
      : store_(std::move(store)), group_(std::move(group)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllReduceSum(float* data, std::int64_t n) override {
    return Void(Run("all-reduce", [&] {
      std::vector<at::Tensor> t{torch::from_blob(data, {n}, torch::kFloat32)};
      group_->allreduce(t)->wait();
      return 0;
    }));
  }
  Status AllReduceSum(double* data, std::int64_t n) override {
    return Void(Run("all-reduce", [&] {
      std::vector<at::Tensor> t{torch::from_blob(data, {n}, torch::kFloat64)};
      group_->allreduce(t)->wait();
      return 0;
    }));
  }
  Status Broadcast(float* data, std::int64_t n, int root) override {
    return Void(Run("broadcast", [&] {
      std::vector<at::Tensor> t{torch::from_blob(data, {n}, torch::kFloat32)};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      group_->broadcast(t, opts)->wait();
      return 0;
    }));
  }
  Status Send(const float* data, std::int64_t n, int to, int tag) override {
    return Void(Run("send to rank " + std::to_string(to), [&] {
      std::vector<at::Tensor> t{torch::from_blob(const_cast<float*>(data), {n}, torch::kFloat32)};
      group_->send(t, to, tag)->wait();
      return 0;
    }));
  }
  Status Recv(float* data, std::int64_t n, int from, int tag) override {
    return Void(Run("receive from rank " + std::to_string(from), [&] {
      std::vector<at::Tensor> t{torch::from_blob(data, {n}, torch::kFloat32)};
      group_->recv(t, from, tag)->wait();
      return 0;
    }));
  }
  Result<int> RecvAny(float* data, std::int64_t n, int tag) override {
    // Not measured for bytes: it waits for a peer while this process's
    // training thread writes metric lines, which wchar would count.
    return Run("receive", /*count_bytes=*/false, [&] {
      std::vector<at::Tensor> t{torch::from_blob(data, {n}, torch::kFloat32)};
      auto work = group_->recvAnysource(t, tag);
      work->wait();
      return work->sourceRank();
    });
  }
  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  template <typename F>
  Result<int> Run(const std::string& what, F&& f) {
    return Run(what, true, std::forward<F>(f));
  }
  template <typename F>
  Result<int> Run(const std::string& what, bool count_bytes, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::int64_t w0 = count_bytes ? WrittenBytes() : 0;
    int out = 0;
    try {
      out = f();
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      const bool timeout = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos;
      return Fail(timeout ? ErrorKind::kTimeout : ErrorKind::kUnavailable,
                  "rank " + std::to_string(rank_) + ": " + what + " failed" +
                      (timeout ? " (a rank is alive but silent: stopped or hung?)" : " (a rank exited?)") + ": " +
                      msg);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::int64_t written = count_bytes ? WrittenBytes() - w0 : 0;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_sent += written;
    stats_.seconds += seconds;
    ++stats_.calls;
    return out;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int rank_, size_;
  mutable std::mutex mu_;
  CommStats stats_;  // guarded by mu_
};

bool IsLoopback(const std::string& host) { return host == "127.0.0.1" || host == "localhost" || host == "::1"; }

}  // namespace

Result<std::unique_ptr<Collective>> ConnectGloo(const RendezvousPlan& plan) {
  const std::chrono::milliseconds timeout(plan.timeout_seconds * 1000);
  const std::chrono::milliseconds rendezvous_timeout(std::max<std::int64_t>(plan.timeout_seconds, 300) * 1000);
  try {
    c10::intrusive_ptr<c10d::Store> store;
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    if (!plan.file_store.empty()) {
      store = c10::make_intrusive<c10d::FileStore>(plan.file_store, plan.world);
      store->setTimeout(rendezvous_timeout);
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(plan.port);
      so.isServer = plan.rank == 0;
      so.numWorkers = static_cast<std::size_t>(plan.world);
      so.waitWorkers = false;
      so.timeout = rendezvous_timeout;
      store = c10::make_intrusive<c10d::TCPStore>(plan.host, so);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (IsLoopback(plan.host)) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
    }
    // The ranks start at different times (process start, data loading), so
    // they first meet at the store with the rendezvous deadline; the group's
    // own connection setup then runs under the collective timeout.
    const auto deadline = std::chrono::steady_clock::now() + rendezvous_timeout;
    store->add("trainq/arrived", 1);
    while (store->add("trainq/arrived", 0) < plan.world) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("not every rank arrived within " + std::to_string(rendezvous_timeout.count() / 1000) +
                                 " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a poll interval
    }
    opts->threads = 2;
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, plan.rank, plan.world, opts);
    return std::unique_ptr<Collective>(new GlooCollective(store, group, plan.rank, plan.world));
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return Fail(ErrorKind::kUnavailable, "rank " + std::to_string(plan.rank) + " of " + std::to_string(plan.world) +
                                             ": rendezvous failed (" +
                                             (plan.file_store.empty() ? plan.host + ":" + std::to_string(plan.port)
                                                                      : plan.file_store) +
                                             "): " + msg);
  }
}

#else

Result<std::unique_ptr<Collective>> ConnectGloo(const RendezvousPlan&) {
  return Fail(ErrorKind::kInvalidArgument,
              "distributed.workers > 1: this libtorch has no c10d/Gloo (ProcessGroupGloo.hpp); build against "
              "Debian's libtorch-dev with libgloo-dev, or a libtorch with distributed support");
}

#endif

}  // namespace trainq::trainer
