// Progress on stderr: on a terminal a bar with ETA redrawn as batches finish;
// otherwise (a log file under the worker) one line per epoch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace trainq::trainer {

class Progress {
 public:
  // `now` returns seconds on a monotonic clock (injected for tests).
  Progress(std::FILE* out, bool terminal, std::function<double()> now, std::int64_t epochs,
           std::int64_t batches_per_epoch);
  void Batch(std::int64_t epoch, std::int64_t batch_in_epoch);
  // `summary` is e.g. "train_loss 0.1234  val_accuracy 0.9611".
  void EpochEnd(std::int64_t epoch, const std::string& summary);
  void Message(const std::string& line);

  // "1m05s" style; for the ETA.
  static std::string FormatSeconds(double s);

 private:
  std::FILE* out_;
  bool terminal_;
  std::function<double()> now_;
  std::int64_t epochs_, batches_per_epoch_;
  double start_;
  double last_draw_ = -1;
  bool bar_drawn_ = false;
};

// A steady-clock `now` for the real program.
std::function<double()> SteadySeconds();

}  // namespace trainq::trainer
