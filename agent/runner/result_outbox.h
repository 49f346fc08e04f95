// ResultOutbox: run results a worker could not deliver (the server was away
// when the run ended), kept on disk until the server takes them, so that a
// restart of `trainq serve`, or a network cut at the wrong moment, costs the
// run nothing: the server accepts a late success unless the run was leased
// again (Store::Complete), and a failure while the lease still holds.
//
// One file per run, <dir>/<run id>.json, written atomically (temporary file,
// then rename): the body of POST /api/v1/runs/{id}/complete (token, outcome,
// metric, exit code, error), the metric points the server has not seen, and
// the end of the run's output it has not seen (at most kMaxLogTail bytes,
// after a line saying how much was left out). A worker restarted with the same
// data dir delivers what an earlier one kept. Not thread-safe: the worker's
// one thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace trainq {

struct PendingResult {
  std::int64_t run_id = 0;
  nlohmann::json complete = nlohmann::json::object();  // the /complete body
  nlohmann::json points = nlohmann::json::array();     // for /metrics; may be empty
  std::string log;             // output bytes for /log; may be empty
  std::int64_t log_offset = 0;  // where `log` goes in the server's copy (X-Trainq-Offset)
  std::int64_t token() const { return complete.value("token", std::int64_t{0}); }
};

class ResultOutbox {
 public:
  static constexpr std::size_t kMaxLogTail = 256 << 10;

  explicit ResultOutbox(std::string dir) : dir_(std::move(dir)) {}

  // The output bytes of [from, size of `log_path`) as PendingResult::log: the
  // whole of it when it fits kMaxLogTail, else a line naming the bytes left
  // out and the last kMaxLogTail of them.
  static std::string LogTail(const std::string& log_path, std::int64_t from);

  Status Put(const PendingResult& r);
  // Every kept result, by run id; files that cannot be read are named in a
  // warning and set aside as <file>.bad (never retried, never lost).
  std::vector<PendingResult> All() const;
  void Remove(std::int64_t run_id);
  bool empty() const;
  std::string PathOf(std::int64_t run_id) const;

 private:
  std::string dir_;
};

}  // namespace trainq
