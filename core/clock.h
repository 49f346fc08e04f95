// Clock: the only way program logic learns the time, and the way its loops
// wait. Tests drive a FakeClock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace trainq {

// Milliseconds since the Unix epoch.
using TimeMs = std::int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs Now() const = 0;
  // Sleeps `ms` of this clock's time. A real sleep ends early on a signal, so
  // a loop re-checks its stop flag after it (as leveldb's
  // Env::SleepForMicroseconds is the one way its background loops pause).
  virtual void SleepFor(TimeMs ms) const = 0;
  // With `lock` held on the mutex that guards `done`'s state: waits on `cv`
  // until done() or until this clock reaches `deadline`, and returns done().
  // Whoever changes that state notifies `cv`. The lock may be released and
  // taken again on the way, as in any condition-variable wait.
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         TimeMs deadline, const std::function<bool()>& done) const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs Now() const override;
  void SleepFor(TimeMs ms) const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, TimeMs deadline,
                 const std::function<bool()>& done) const override;
  static const Clock& Get();
};

// A clock that moves only when told to. Thread-safe.
//
// Its sleeps and waits either move it (kAdvance, the default: a loop on one
// thread runs through hours at once) or block until another thread moves it
// past their end (kBlock: a test drives a loop that runs on its own thread;
// `sleepers()` says how many wait now, so the test can wait for the loop to
// be asleep before it advances the clock).
class FakeClock final : public Clock {
 public:
  enum class Sleeps { kAdvance, kBlock };
  explicit FakeClock(TimeMs start = 1'700'000'000'000, Sleeps sleeps = Sleeps::kAdvance)
      : now_(start), sleeps_(sleeps) {}
  TimeMs Now() const override { return now_.load(); }
  void Advance(TimeMs ms) { Set(now_.load() + ms); }
  void Set(TimeMs ms);
  void SleepFor(TimeMs ms) const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, TimeMs deadline,
                 const std::function<bool()>& done) const override;
  // Sleeps and waits blocked on this clock now (kBlock).
  int sleepers() const;

 private:
  struct Waiter {
    std::mutex* mu;
    std::condition_variable* cv;
  };
  void Moved() const;  // wakes every sleeper and waiter

  mutable std::atomic<TimeMs> now_;
  const Sleeps sleeps_;
  mutable std::mutex mu_;  // guards waiters_ and sleepers_; see Moved() for the lock order
  mutable std::condition_variable moved_;
  mutable std::vector<Waiter> waiters_;
  mutable int sleepers_ = 0;
};

}  // namespace trainq
