// ResultOutbox: run results a worker could not deliver (the server was away
// when the run ended), kept on disk until the server takes them, so that a
// restart of `trainq serve`, or a network cut at the wrong moment, costs the
// run nothing: the server accepts a late success unless the run was leased
// again (Store::Complete), and a failure while the lease still holds.
//
// One file per run, <dir>/<run id>.json (a gang member's:
// <run id>.node<rank>.json), written durably (WriteFileDurably: a temporary
// file, fsync, rename, fsync of the directory): the body of POST
// /api/v1/runs/{id}/complete (or /gang for a gang member), the metric points
// the server has not seen, and the end of the run's output it has not seen (at
// most kMaxLogTail bytes, after a line saying how much was left out). A worker
// restarted with the same data dir delivers what an earlier one kept.
//
// A result that cannot be written (a full disk, a file size limit) is held in
// memory instead, and Persist() tries the disk again: All() returns both, so
// the worker keeps delivering it either way; only a crash of the worker while
// the disk is full loses it. Not thread-safe: the worker's one thread owns it.
#pragma once

#include <cstdint>
#include <map>
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
  int node_rank = -1;  // a gang member's node (its result goes to /gang); -1: a plain run
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

  // Keeps `r`: on disk when it can be written, else in memory, and then the
  // error (naming the file and the reason) says that it is not on disk.
  Status Put(const PendingResult& r);
  // Writes the results held in memory to disk; the first error, if any
  // remain in memory.
  Status Persist();
  // Every kept result, by run id and node, those held in memory included;
  // files that cannot be read are named in a warning and set aside as
  // <file>.bad (never retried, never lost).
  std::vector<PendingResult> All() const;
  void Remove(std::int64_t run_id, int node_rank = -1);
  bool empty() const;
  // How many results are held in memory only.
  std::size_t held() const { return held_.size(); }
  std::string PathOf(std::int64_t run_id, int node_rank = -1) const;

 private:
  std::string dir_;
  std::map<std::string, PendingResult> held_;  // by PathOf: not on disk (yet)
};

}  // namespace trainq
