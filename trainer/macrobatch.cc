#include "trainer/macrobatch.h"

#include <algorithm>
#include <random>

#include "trainer/rng.h"

namespace trainq::trainer {

std::vector<std::vector<std::int64_t>> PlanMacroBatches(const std::vector<std::int64_t>& train_rows,
                                                        std::int64_t macro_batch_size, std::uint64_t order_seed,
                                                        std::int64_t epoch, bool shuffle, std::int64_t blocks) {
  const std::size_t n = train_rows.size();
  std::size_t size = macro_batch_size <= 0 ? n : static_cast<std::size_t>(macro_batch_size);
  size = std::max<std::size_t>(1, std::min(size, n));
  std::vector<std::vector<std::int64_t>> plan;
  if (n == 0) return plan;
  std::mt19937_64 gen(DeriveSeed(order_seed ^ SplitMix64(static_cast<std::uint64_t>(epoch)), kStreamMacroOrder));
  std::vector<std::int64_t> order;  // the epoch's rows, macrobatch after macrobatch
  order.reserve(n);
  if (shuffle && size < n) {
    const std::size_t offset = static_cast<std::size_t>(UniformBelow(gen, n));
    const std::size_t g = static_cast<std::size_t>(std::max<std::int64_t>(1, blocks));
    const std::size_t block = std::max<std::size_t>(1, (size + g - 1) / g);
    std::vector<std::size_t> starts;
    for (std::size_t start = 0; start < n; start += block) starts.push_back(start);
    Shuffle(starts, gen);
    for (std::size_t start : starts) {
      for (std::size_t i = start; i < std::min(n, start + block); ++i) order.push_back(train_rows[(i + offset) % n]);
    }
  } else {
    order = train_rows;
  }
  for (std::size_t start = 0; start < n; start += size) {
    std::vector<std::int64_t> chunk(order.begin() + static_cast<std::ptrdiff_t>(start),
                                    order.begin() + static_cast<std::ptrdiff_t>(std::min(n, start + size)));
    // Sorted rows read as long sequential runs.
    std::sort(chunk.begin(), chunk.end());
    plan.push_back(std::move(chunk));
  }
  return plan;
}

MacroBatchReader::MacroBatchReader(const RowSource& source, const Normalizer& norm,
                                   std::vector<std::vector<std::int64_t>> plan)
    : source_(source), norm_(norm), plan_(std::move(plan)) {
  thread_ = std::thread([this] { Run(); });
}

MacroBatchReader::~MacroBatchReader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MacroBatchReader::Run() {
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    {
      // Wait for a free slot: the previous macrobatch must have been taken.
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (!ready_ && alive_ < 2); });
      if (stop_) return;
      ++alive_;
      max_alive_ = std::max(max_alive_, alive_);
    }
    MacroBatch mb;
    mb.index = static_cast<std::int64_t>(i);
    mb.rows = plan_[i];
    auto block = ReadRows(source_, mb.rows, norm_);
    std::lock_guard lock(mu_);
    if (!block) {
      error_ = block.error();
      --alive_;
      done_ = true;
      cv_.notify_all();
      return;
    }
    mb.block = std::move(*block);
    ready_ = std::move(mb);
    cv_.notify_all();
  }
  std::lock_guard lock(mu_);
  done_ = true;
  cv_.notify_all();
}

Result<bool> MacroBatchReader::Next(MacroBatch* mb) {
  *mb = MacroBatch{};  // free the previous macrobatch first
  std::unique_lock lock(mu_);
  if (consumer_holds_) {
    consumer_holds_ = false;
    --alive_;
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return ready_.has_value() || done_; });
  if (ready_) {
    *mb = std::move(*ready_);
    ready_.reset();
    consumer_holds_ = true;
    cv_.notify_all();
    return true;
  }
  if (error_) {
    Error e = *error_;
    error_.reset();
    return std::unexpected(e);
  }
  return false;
}

int MacroBatchReader::max_alive() const {
  std::lock_guard lock(mu_);
  return max_alive_;
}

}  // namespace trainq::trainer
