#include "core/clock.h"

#include <chrono>

namespace trainq {

TimeMs SystemClock::Now() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

const Clock& SystemClock::Get() {
  static const SystemClock clock;
  return clock;
}

}  // namespace trainq
