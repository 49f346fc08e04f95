// Macrobatches: the training rows of one epoch, cut into chunks that are read
// from disk whole, moved to the device whole, then split into batches.
//
// Shuffling works at two levels. Across macrobatches: each epoch the training
// rows are rotated by a random offset, cut into chunks of macro_batch_size, and
// the chunks are put in random order (so chunk boundaries and order change
// every epoch while each chunk is still read mostly sequentially). Within a
// macrobatch: the trainer shuffles the rows of each macrobatch per replica.
// The across-macrobatch order is drawn from data.split_seed and the epoch, the
// same for every run seed, so that N seeds can be fused over one stream of
// macrobatches; the within-macrobatch order comes from the run seed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/result.h"
#include "trainer/data.h"

namespace trainq::trainer {

// The row indices of each macrobatch of `epoch`, in reading order. Every row of
// `train_rows` appears exactly once. With shuffle off, the chunks follow file order.
// With shuffle on, the rows (rotated by a random offset) are cut into blocks of
// ceil(macro_batch_size / blocks) consecutive rows, the blocks are put in random
// order and the result is cut into macrobatches: each macrobatch gathers about
// `blocks` runs of rows from all over the file (a file sorted by class still gives
// mixed macrobatches), and each run is read sequentially.
std::vector<std::vector<std::int64_t>> PlanMacroBatches(const std::vector<std::int64_t>& train_rows,
                                                        std::int64_t macro_batch_size, std::uint64_t order_seed,
                                                        std::int64_t epoch, bool shuffle, std::int64_t blocks = 16);

struct MacroBatch {
  std::int64_t index = 0;           // position in the epoch's plan
  std::vector<std::int64_t> rows;   // file rows, in the order of x and y
  RowBlock block;                   // normalised features and labels
};

// Reads the macrobatches of a plan on a background thread, one ahead of the
// consumer. At most two macrobatches are alive at once: the one the consumer
// holds and the one being read or waiting. Next() frees the consumer's
// previous macrobatch before handing out the next one.
// Threading: one consumer thread calls Next(); the reader thread is internal.
class MacroBatchReader {
 public:
  MacroBatchReader(const RowSource& source, const Normalizer& norm,
                   std::vector<std::vector<std::int64_t>> plan);
  ~MacroBatchReader();
  MacroBatchReader(const MacroBatchReader&) = delete;
  MacroBatchReader& operator=(const MacroBatchReader&) = delete;

  // Replaces *mb with the next macrobatch; false at the end of the plan.
  // A read error is returned once and ends the stream.
  Result<bool> Next(MacroBatch* mb);

  // The most macrobatches that were alive at one time (for tests).
  int max_alive() const;

 private:
  void Run();

  const RowSource& source_;
  const Normalizer& norm_;
  std::vector<std::vector<std::int64_t>> plan_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<MacroBatch> ready_;  // GUARDED_BY(mu_)
  std::optional<Error> error_;       // GUARDED_BY(mu_)
  bool done_ = false;                // GUARDED_BY(mu_): the reader has finished the plan
  bool stop_ = false;                // GUARDED_BY(mu_)
  int alive_ = 0;                    // GUARDED_BY(mu_)
  int max_alive_ = 0;                // GUARDED_BY(mu_)
  bool consumer_holds_ = false;      // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace trainq::trainer
