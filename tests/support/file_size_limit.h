// A real write failure for tests: RLIMIT_FSIZE (ulimit -f) lowered for the
// whole test process while the guard lives, with SIGXFSZ ignored (as trainq's
// main does, core/fatal_signals.h), so that a write past the limit fails with
// EFBIG -- the same path as a full disk, without a mount.
#pragma once

#include <signal.h>
#include <sys/resource.h>

namespace trainq::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit l = saved_;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() { Lift(); }
  void Lift() {
    if (lifted_) return;
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
    lifted_ = true;
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
  bool lifted_ = false;
};

}  // namespace trainq::testing
