#include "core/clock.h"

#include <time.h>

#include <algorithm>
#include <chrono>

namespace trainq {

TimeMs SystemClock::Now() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

void SystemClock::SleepFor(TimeMs ms) const {
  if (ms <= 0) return;
  struct timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
  nanosleep(&ts, nullptr);  // a signal ends it early
}

bool SystemClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                            TimeMs deadline, const std::function<bool()>& done) const {
  TimeMs left = deadline - Now();
  if (left <= 0) return done();
  return cv.wait_for(lock, std::chrono::milliseconds(left), done);
}

const Clock& SystemClock::Get() {
  static const SystemClock clock;
  return clock;
}

void FakeClock::Set(TimeMs ms) {
  now_ = ms;
  Moved();
}

void FakeClock::Moved() const {
  // Lock order: mu_, then a waiter's mutex. A waiter never holds its mutex
  // while it takes mu_ (WaitUntil lets go of it first), so this cannot
  // deadlock; holding mu_ keeps every registered waiter alive meanwhile.
  std::lock_guard<std::mutex> lock(mu_);
  moved_.notify_all();
  for (const auto& w : waiters_) {
    std::lock_guard<std::mutex> theirs(*w.mu);
    w.cv->notify_all();
  }
}

void FakeClock::SleepFor(TimeMs ms) const {
  if (ms <= 0) return;
  if (sleeps_ == Sleeps::kAdvance) {
    now_ += ms;
    Moved();
    return;
  }
  const TimeMs until = now_.load() + ms;
  std::unique_lock<std::mutex> lock(mu_);
  ++sleepers_;
  moved_.wait(lock, [&] { return now_.load() >= until; });
  --sleepers_;
}

bool FakeClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          TimeMs deadline, const std::function<bool()>& done) const {
  if (done()) return true;
  if (sleeps_ == Sleeps::kAdvance) {
    if (now_.load() < deadline) {
      // Moved() takes the waiter mutexes of other threads: not with ours held.
      lock.unlock();
      now_ = std::max(now_.load(), deadline);
      Moved();
      lock.lock();
    }
    return done();
  }
  std::mutex* mu = lock.mutex();
  lock.unlock();
  {
    std::lock_guard<std::mutex> g(mu_);
    waiters_.push_back({mu, &cv});
    ++sleepers_;
  }
  lock.lock();
  cv.wait(lock, [&] { return done() || now_.load() >= deadline; });
  lock.unlock();
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(),
                           [&](const Waiter& w) { return w.mu == mu && w.cv == &cv; });
    if (it != waiters_.end()) waiters_.erase(it);
    --sleepers_;
  }
  lock.lock();
  return done();
}

int FakeClock::sleepers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sleepers_;
}

}  // namespace trainq
