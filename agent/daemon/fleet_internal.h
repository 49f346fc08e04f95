// Inside the fleet (fleet.cc, fleet_boot.cc, fleet_budget.cc); not for
// other code: the boot threads and the conversions the loop and the boots
// share.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/daemon/fleet.h"
#include "cloud/autoscaler.h"
#include "cloud/provider.h"
#include "core/result.h"
#include "core/thread_annotations.h"
#include "queue/types.h"

namespace trainq {

namespace fleet_internal {

// A machine row's state, or nullopt for a name the autoscaler does not know.
std::optional<cloud::MachineState> ParseMachineState(std::string_view s);
// The autoscaler's view of a machine row. heard_since: when this fleet
// started listening (or came back from a stall): a worker could not be heard
// before that, so its silence counts from then at the earliest.
cloud::Machine ToMachine(const MachineRow& m, TimeMs heard_since = 0);

}  // namespace fleet_internal

// ---- Boots off the loop (their calls: fleet_boot.cc) ------------------------
// One boot: built and recorded on the loop thread; only provider->Boot(spec)
// runs on a boot thread.
struct Fleet::BootJob {
  enum class State { kQueued, kRunning, kDone };
  std::int64_t row = 0;
  std::string pool;
  cloud::Provider* provider = nullptr;
  cloud::BootSpec spec;
  State state = State::kQueued;
  Result<std::string> result = std::string();
};

// At most `threads` Provider::Boot calls at once; the threads start as boots
// come and end with this object (after their current call).
class Fleet::BootThreads {
 public:
  explicit BootThreads(int threads) : max_threads_(static_cast<std::size_t>(std::max(1, threads))) {}
  ~BootThreads() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BootThreads(const BootThreads&) = delete;
  BootThreads& operator=(const BootThreads&) = delete;

  void Add(BootJob job) {
    MutexLock lock(mu_);
    const std::int64_t row = job.row;
    jobs_.emplace(row, std::move(job));
    queue_.push_back(row);
    if (threads_.size() < max_threads_ && threads_.size() < queue_.size() + running_) {
      threads_.emplace_back([this] { Loop(); });
    }
    work_.notify_one();
  }

  // The finished boots, in the order they finished.
  std::vector<BootJob> TakeDone() {
    MutexLock lock(mu_);
    std::vector<BootJob> out;
    out.reserve(done_.size());
    for (std::int64_t row : done_) {
      auto it = jobs_.find(row);
      out.push_back(std::move(it->second));
      jobs_.erase(it);
    }
    done_.clear();
    return out;
  }

  // Finished boots whose recording failed (the store refused the write: a
  // full disk), finished again for the next harvest.
  void PutBack(std::vector<BootJob> jobs) {
    MutexLock lock(mu_);
    std::vector<std::int64_t> rows;
    for (auto& job : jobs) {
      const std::int64_t row = job.row;
      job.state = BootJob::State::kDone;
      jobs_.emplace(row, std::move(job));
      rows.push_back(row);
    }
    done_.insert(done_.begin(), rows.begin(), rows.end());
  }

  // The queued boots of `pool` ("" = all), taken off the queue.
  std::vector<BootJob> TakeQueued(const std::string& pool) {
    MutexLock lock(mu_);
    std::vector<BootJob> out;
    std::erase_if(queue_, [&](std::int64_t row) REQUIRES(mu_) {
      auto it = jobs_.find(row);
      if (!pool.empty() && it->second.pool != pool) return false;
      out.push_back(std::move(it->second));
      jobs_.erase(it);
      return true;
    });
    return out;
  }

  // Whether machine `row`'s boot is queued (taken off: true), or running or
  // finished (false, *pending set), or unknown (false).
  bool CallOff(std::int64_t row, bool* pending) {
    MutexLock lock(mu_);
    auto it = jobs_.find(row);
    *pending = it != jobs_.end();
    if (!*pending || it->second.state != BootJob::State::kQueued) return false;
    std::erase(queue_, row);
    jobs_.erase(it);
    *pending = false;
    return true;
  }

  // Until nothing is queued or running, or `until`; true when nothing is.
  bool WaitIdle(std::chrono::steady_clock::time_point until) {
    MutexLock lock(mu_);
    return done_cv_.wait_until(lock.native(), until,
                               [&]() REQUIRES(mu_) { return queue_.empty() && running_ == 0; });
  }

  // Names of `pool`'s machines whose boot is not recorded yet.
  std::set<std::string> Names(const std::string& pool) const {
    MutexLock lock(mu_);
    std::set<std::string> out;
    for (const auto& [row, job] : jobs_) {
      if (job.pool == pool) out.insert(job.spec.name);
    }
    return out;
  }

  int Pending() const {
    MutexLock lock(mu_);
    return static_cast<int>(jobs_.size());
  }
  bool Pending(std::int64_t row) const {
    MutexLock lock(mu_);
    return jobs_.contains(row);
  }

 private:
  void Loop() {
    MutexLock lock(mu_);
    for (;;) {
      work_.wait(lock.native(), [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const std::int64_t row = queue_.front();
      queue_.pop_front();
      BootJob& job = jobs_.at(row);  // stays put: only queued and done jobs are erased
      job.state = BootJob::State::kRunning;
      ++running_;
      lock.Unlock();
      Result<std::string> result = std::string();
      try {
        result = job.provider->Boot(job.spec);
      } catch (const std::exception& e) {
        result = Fail(ErrorKind::kInternal, std::string("boot: ") + e.what());
      }
      lock.Lock();
      job.result = std::move(result);
      job.state = BootJob::State::kDone;
      done_.push_back(row);
      --running_;
      done_cv_.notify_all();
    }
  }

  const std::size_t max_threads_;
  mutable Mutex mu_;
  std::condition_variable work_;     // a boot queued, or stop
  std::condition_variable done_cv_;  // a boot finished
  // A running job's entry stays put (only queued and done jobs are erased):
  // its boot thread writes its result after taking mu_ again.
  std::map<std::int64_t, BootJob> jobs_ GUARDED_BY(mu_);  // by machine row: queued, running, done
  std::deque<std::int64_t> queue_ GUARDED_BY(mu_);
  std::vector<std::int64_t> done_ GUARDED_BY(mu_);
  std::size_t running_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  // Touched only by the thread that owns this object (Add, the destructor's
  // joins, which must not hold mu_).
  std::vector<std::thread> threads_;
};
}  // namespace trainq
