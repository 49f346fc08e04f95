// Clock: the only way program logic learns the time. Tests drive a FakeClock.
#pragma once

#include <atomic>
#include <cstdint>

namespace trainq {

// Milliseconds since the Unix epoch.
using TimeMs = std::int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs Now() const override;
  static const Clock& Get();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeMs start = 1'700'000'000'000) : now_(start) {}
  TimeMs Now() const override { return now_.load(); }
  void Advance(TimeMs ms) { now_ += ms; }
  void Set(TimeMs ms) { now_ = ms; }

 private:
  std::atomic<TimeMs> now_;
};

}  // namespace trainq
