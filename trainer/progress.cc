#include "trainer/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/strings.h"

namespace trainq::trainer {

Progress::Progress(std::FILE* out, bool terminal, std::function<double()> now, std::int64_t epochs,
                   std::int64_t batches_per_epoch)
    : out_(out),
      terminal_(terminal),
      now_(std::move(now)),
      epochs_(epochs),
      batches_per_epoch_(std::max<std::int64_t>(1, batches_per_epoch)),
      start_(now_()) {}

std::string Progress::FormatSeconds(double s) {
  return FormatDuration(static_cast<std::int64_t>(std::llround(std::max(0.0, s) * 1000.0)));
}

void Progress::Batch(std::int64_t epoch, std::int64_t batch_in_epoch) {
  if (!terminal_) return;
  const double t = now_();
  if (last_draw_ >= 0 && t - last_draw_ < 0.1) return;
  last_draw_ = t;
  const double total = static_cast<double>(epochs_ * batches_per_epoch_);
  const double done = static_cast<double>((epoch - 1) * batches_per_epoch_ + batch_in_epoch);
  const double frac = std::clamp(done / total, 0.0, 1.0);
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  const double elapsed = t - start_;
  const double eta = done > 0 ? elapsed / done * (total - done) : 0;
  std::fprintf(out_, "\r[%s] %3d%%  epoch %lld/%lld  ETA %s   ", bar.c_str(), static_cast<int>(frac * 100),
               static_cast<long long>(epoch), static_cast<long long>(epochs_), FormatSeconds(eta).c_str());
  std::fflush(out_);
  bar_drawn_ = true;
}

void Progress::EpochEnd(std::int64_t epoch, const std::string& summary) {
  const double elapsed = now_() - start_;
  if (bar_drawn_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "epoch %lld/%lld  %s  (%s)\n", static_cast<long long>(epoch),
               static_cast<long long>(epochs_), summary.c_str(), FormatDouble(elapsed, 2).append("s").c_str());
  std::fflush(out_);
  bar_drawn_ = false;
  last_draw_ = -1;
}

void Progress::Message(const std::string& line) {
  if (bar_drawn_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  bar_drawn_ = false;
}

std::function<double()> SteadySeconds() {
  return [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
}

}  // namespace trainq::trainer
